"""EPyMARL's reward standardisation (``standardise_rewards``): each update learns ``(r - mean) /
std``, the mean and variance running over every reward the updates have seen."""

from __future__ import annotations

import numpy as np
from gymnasium.wrappers.utils import RunningMeanStd

__all__ = ["RewardStandardiser", "load_standardiser_state", "standardiser_state"]


class RewardStandardiser:
    """Running statistics of the rewards of real steps (padding never enters them), and
    rewards standardised by them.

    The statistics start, as gymnasium's ``RunningMeanStd``, from one pseudo-observation of
    mean 0 and variance 1; they travel in a training checkpoint through :meth:`state_dict`.

    Example::

        standardise = RewardStandardiser()
        batch["reward"] = standardise(batch["reward"], real=batch["filled"] == 0)
    """

    def __init__(self) -> None:
        self._stats = RunningMeanStd(shape=())

    @property
    def mean(self) -> float:
        return float(self._stats.mean)

    @property
    def var(self) -> float:
        return float(self._stats.var)

    @property
    def count(self) -> float:
        return float(self._stats.count)

    def __call__(self, reward: np.ndarray, real: np.ndarray) -> np.ndarray:
        """Fold ``reward[real]`` into the statistics, then return every reward as ``(r - mean) /
        std`` in float32 (the padding's too: whatever it holds, it is never learned).

        Args:
            reward: rewards of any shape.
            real: a boolean mask of ``reward``'s shape, true on the steps that happened.
        """
        reward = np.asarray(reward)
        real = np.asarray(real, dtype=bool)
        if real.shape != reward.shape:
            raise ValueError(
                f"RewardStandardiser: real has shape {real.shape}, the rewards {reward.shape}; "
                "pass a mask of the steps that happened, one per reward"
            )
        if real.any():  # no real step: nothing to learn about (numpy's mean of none is NaN)
            self._stats.update(reward[real].astype(np.float64))
        return ((reward - self._stats.mean) / np.sqrt(self._stats.var)).astype(np.float32)

    def state_dict(self) -> dict[str, float]:
        """``{"mean", "var", "count"}``, for a training checkpoint."""
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Continue from statistics :meth:`state_dict` returned."""
        self._stats.mean = np.asarray(state["mean"], np.float64)
        self._stats.var = np.asarray(state["var"], np.float64)
        self._stats.count = float(state["count"])


def standardiser_state(standardiser: RewardStandardiser | None) -> dict[str, float] | None:
    """A run's reward statistics for its training checkpoint: ``None`` for a run that does not
    standardise."""
    return None if standardiser is None else standardiser.state_dict()


def load_standardiser_state(
    standardiser: RewardStandardiser | None, state: dict[str, float] | None, owner: str
) -> None:
    """Continue from a checkpoint's statistics, refusing a checkpoint of a run that standardised
    where this one does not, or the other way round.

    Args:
        standardiser: this run's, or ``None`` if it does not standardise.
        state: what :func:`standardiser_state` wrote into the checkpoint.
        owner: the agent, as the error names it.
    """
    if (state is None) != (standardiser is None):
        raise ValueError(
            f"{owner}: the checkpoint's reward standardisation does not match this run's; "
            "resume with the flags of the run that wrote it (--standardise_rewards or not)"
        )
    if state is not None and standardiser is not None:
        standardiser.load_state_dict(state)
