"""``ActionMappingWrapper``: a policy's actions in ``[-1, 1]`` mapped onto the env's ``Box``.

Built on gymnasium's ``RescaleAction`` (the same affine map, per dimension); what it adds is
PARL's contract: actions outside ``[-1, 1]`` (beyond a 1e-3 tolerance) are an error, the mapped
action is clipped into the env's bounds, and ``_max_episode_steps`` stays readable, so it wraps
either a gymnasium env or a :class:`parl.env.CompatWrapper` (old four-value ``step``).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium.spaces import Box
from gymnasium.wrappers import RescaleAction

__all__ = ["ActionMappingWrapper"]

_TOLERANCE = 1e-3


class ActionMappingWrapper(RescaleAction):
    """Map an action in ``[-1, 1]`` to ``low + (action + 1) * (high - low) / 2``, then clip.

    ``action_space`` becomes ``Box(-1, 1)`` of the env's shape (what the policy produces);
    ``low_bound`` and ``high_bound`` are the env's bounds.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        space = getattr(env, "action_space", None)
        if not isinstance(space, Box):
            raise TypeError(
                f"ActionMappingWrapper needs a continuous (gymnasium.spaces.Box) action space, "
                f"got {space!r}; discrete actions need no mapping"
            )
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError(
                f"ActionMappingWrapper needs finite action bounds, got low={space.low} "
                f"high={space.high}"
            )
        unit = np.ones(space.shape, dtype=space.dtype)
        super().__init__(env, min_action=-unit, max_action=unit)
        self.low_bound = space.low
        self.high_bound = space.high
        self._max_episode_steps = _time_limit_of(env)
        self._next_seed: int | None = None

    def seed(self, seed: int | None = None) -> list[int | None]:
        """Seed as PARL scripts do (``env.seed(s)`` on the outermost wrapper).

        The env below gets the seed through its own ``seed`` when it has one (a
        :class:`~parl.env.CompatWrapper`), otherwise through the next ``reset(seed=...)``; the
        ``[-1, 1]`` action space is seeded too.
        """
        self.action_space.seed(seed)
        try:
            inner_seed = self.env.get_wrapper_attr("seed")
        except AttributeError:
            self._next_seed = seed
            return [seed]
        return list(inner_seed(seed))

    def reset(self, **kwargs: Any) -> Any:
        """Pass through (old or new API, whatever the env below returns)."""
        if self._next_seed is not None and "seed" not in kwargs:
            kwargs["seed"] = self._next_seed
        self._next_seed = None
        return self.env.reset(**kwargs)

    def action(self, action: Any) -> np.ndarray:
        """The env's action for the policy's ``action`` (in ``[-1, 1]``)."""
        model_action = np.asarray(action, dtype=np.float64)
        if np.any(model_action > 1.0 + _TOLERANCE) or np.any(model_action < -1.0 - _TOLERANCE):
            raise ValueError(
                f"ActionMappingWrapper expects actions in [-1, 1], got {action!r}; squash the "
                f"policy's output (tanh) or clip it before env.step"
            )
        # In float64, not through RescaleAction's float32 arithmetic: the ends of [-1, 1] then
        # land exactly on the bounds (float32 gave 9.999999 for the top of Box(-3, 10)).
        low = self.low_bound.astype(np.float64)
        high = self.high_bound.astype(np.float64)
        mapped = low + (np.clip(model_action, -1.0, 1.0) + 1.0) * ((high - low) / 2.0)
        dtype = self.env.action_space.dtype
        return np.clip(mapped, low, high).astype(dtype, copy=False)


def _time_limit_of(env: gymnasium.Env) -> int | None:
    try:
        limit = env.get_wrapper_attr("_max_episode_steps")
    except AttributeError:
        limit = getattr(getattr(env, "spec", None), "max_episode_steps", None)
    return None if limit is None else int(limit)
