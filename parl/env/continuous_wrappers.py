"""``ActionMappingWrapper``: a policy's actions in ``[-1, 1]`` mapped onto the env's ``Box``.

The affine map of gymnasium's ``RescaleAction``, per dimension, computed in float64 so that the
ends of ``[-1, 1]`` land exactly on the bounds; and PARL's contract: actions outside ``[-1, 1]``
(beyond a 1e-3 tolerance, or NaN) are an error, the mapped action is clipped into the env's
bounds, ``_max_episode_steps`` stays readable and other attributes are found in the envs inside
(as old gym's wrappers found them), so it wraps either a gymnasium env or a
:class:`parl.env.CompatWrapper` (old four-value ``step``). It pickles (no closures).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium.spaces import Box

from parl.env.compat_wrapper import inner_attribute

__all__ = ["ActionMappingWrapper"]

_TOLERANCE = 1e-3


class ActionMappingWrapper(gymnasium.ActionWrapper):
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
        super().__init__(env)
        self.action_space = Box(-1.0, 1.0, space.shape, space.dtype)
        self.low_bound = space.low
        self.high_bound = space.high
        self._max_episode_steps = _time_limit_of(env)
        self._next_seed: int | None = None

    __getattr__ = inner_attribute

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
        in_range = (model_action <= 1.0 + _TOLERANCE) & (model_action >= -1.0 - _TOLERANCE)
        if not np.all(in_range):  # NaN is in no range: a diverged policy stops here
            raise ValueError(
                f"ActionMappingWrapper expects actions in [-1, 1] (and no NaN), got {action!r}; "
                f"squash the policy's output (tanh) or clip it before env.step"
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
