"""Step-based schedules for hyperparameters such as the exploration rate or the learning rate.

``step(n)`` advances the schedule by ``n`` steps and returns the value at the new step; ``value``
reads it without advancing. ``state_dict``/``load_state_dict`` let a training checkpoint carry a
schedule (``agent.save_checkpoint(path, extra={"eps": scheduler.state_dict()})``).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

from parl.validation import check_float, check_int

__all__ = ["LinearDecayScheduler", "PiecewiseScheduler"]


class LinearDecayScheduler:
    """Goes linearly from ``start_value`` at step 0 to ``end_value`` at ``max_steps``, then stays.

    With PARL's two arguments it decays to 0: ``LinearDecayScheduler(1.0, 100).step(25) == 0.75``.
    """

    def __init__(self, start_value: float, max_steps: int, end_value: float = 0.0) -> None:
        owner = "LinearDecayScheduler"
        self.start_value = check_float("start_value", start_value, owner=owner)
        self.end_value = check_float("end_value", end_value, owner=owner)
        self.max_steps = check_int("max_steps", max_steps, low=1, owner=owner)
        self.cur_step = 0

    @property
    def value(self) -> float:
        """The value at the current step."""
        fraction = min(self.cur_step, self.max_steps) / self.max_steps
        return self.start_value + (self.end_value - self.start_value) * fraction

    def step(self, step_num: int = 1) -> float:
        """Advance by ``step_num`` (>= 1) steps and return the new value."""
        step_num = check_int("step_num", step_num, low=1, owner="LinearDecayScheduler.step")
        self.cur_step = min(self.cur_step + step_num, self.max_steps)
        return self.value

    def state_dict(self) -> dict[str, Any]:
        """The schedule's position, ``{"cur_step": int}``, for a checkpoint."""
        return {"cur_step": self.cur_step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go back to the position saved by :meth:`state_dict`.

        Args:
            state: A dict from :meth:`state_dict` of a LinearDecayScheduler (its ``"cur_step"`` is read).

        Raises:
            ValueError: ``cur_step`` is negative.
            TypeError: ``cur_step`` is not an int.
        """
        self.cur_step = check_int(
            "cur_step", state["cur_step"], low=0, owner="LinearDecayScheduler"
        )


class PiecewiseScheduler:
    """A piecewise-constant schedule from ``(step, value)`` pairs.

    ``PiecewiseScheduler([(0, 1e-3), (10_000, 5e-4), (50_000, 1e-4)])`` is ``1e-3`` for steps
    0..9999, ``5e-4`` for 10000..49999 and ``1e-4`` from then on. The steps must increase; the
    first value also holds before the first pair's step, as in PARL (``[(3, 0.1)]`` is ``0.1``
    throughout). Unlike PARL, a ``step(n)`` that passes several pairs lands on the last of them
    (PARL moves one pair per call).
    """

    def __init__(self, scheduler_list: Sequence[tuple[int, float]]) -> None:
        owner = "PiecewiseScheduler"
        if isinstance(scheduler_list, (str, bytes)) or not isinstance(scheduler_list, Sequence):
            raise TypeError(
                f"{owner}: scheduler_list must be a list of (step, value) pairs, "
                f"got {type(scheduler_list).__name__}"
            )
        if not scheduler_list:
            raise ValueError(f"{owner}: scheduler_list must not be empty")
        steps: list[int] = []
        values: list[float] = []
        for i, pair in enumerate(scheduler_list):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(
                    f"{owner}: scheduler_list[{i}] must be a (step, value) pair, got {pair!r}"
                )
            step = check_int(f"scheduler_list[{i}][0]", pair[0], low=0, owner=owner)
            if steps and step <= steps[-1]:
                raise ValueError(
                    f"{owner}: steps must increase, but scheduler_list[{i}] has step {step} "
                    f"after step {steps[-1]}"
                )
            steps.append(step)
            values.append(check_float(f"scheduler_list[{i}][1]", pair[1], owner=owner))
        self._steps = steps
        self._values = values
        self.cur_step = 0

    @property
    def value(self) -> float:
        """The value at the current step."""
        return self._values[max(bisect.bisect_right(self._steps, self.cur_step) - 1, 0)]

    def step(self, step_num: int = 1) -> float:
        """Advance by ``step_num`` (>= 1) steps and return the new value."""
        step_num = check_int("step_num", step_num, low=1, owner="PiecewiseScheduler.step")
        self.cur_step += step_num
        return self.value

    def state_dict(self) -> dict[str, Any]:
        """The schedule's position, ``{"cur_step": int}``, for a checkpoint."""
        return {"cur_step": self.cur_step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go back to the position saved by :meth:`state_dict`.

        Args:
            state: A dict from :meth:`state_dict` of a PiecewiseScheduler (its ``"cur_step"`` is read).

        Raises:
            ValueError: ``cur_step`` is negative.
            TypeError: ``cur_step`` is not an int.
        """
        self.cur_step = check_int("cur_step", state["cur_step"], low=0, owner="PiecewiseScheduler")
