"""``CompatWrapper``: a gymnasium env behind the pre-0.26 gym API that PARL 2.x scripts use.

PARL 2.x scripts call ``obs = env.reset()``, ``obs, reward, done, info = env.step(action)``,
``env.seed(seed)`` and read ``env._max_episode_steps``. Gymnasium returns ``(obs, info)`` from
``reset``, splits ``done`` into ``terminated`` and ``truncated``, seeds through
``reset(seed=...)`` and hides private attributes behind its wrappers. This wrapper restores the
old face so that such a script runs with ``import gymnasium as gym`` and nothing else changed.

Differences from PARL's own wrapper, on purpose:

* ``done = terminated or truncated``: a time limit ends the episode the way old gym's
  ``TimeLimit`` did, and ``info["TimeLimit.truncated"]`` says that it was a time limit (old gym's
  key), so a script can still bootstrap through it.
* Attributes of inner wrappers are found through this one (``env.get_real_done()``), as old
  gym's ``Wrapper`` found them; gymnasium 1.x asks for ``env.get_wrapper_attr(name)``.
* A one-element integer array is taken as the action of a ``Discrete`` space, as old gym's
  Atari envs took it (PARL's PPO agent hands actions over that way).
* ``seed(s)`` seeds the *next* reset only (and the action and observation spaces); later resets
  continue that generator. PARL's wrapper passed the same seed to every reset, which replays the
  same initial state in every episode.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
import numpy as np

from parl.validation import check_int

__all__ = [
    "CompatWrapper",
    "V_GYM_CHANGED",
    "V_NPRANDOM_CHANGED",
    "inner_attribute",
    "is_gym_version_ge",
]

# gym 0.26 changed reset/step/seed; gym 0.22 changed np_random.randint to integers. Every gymnasium
# release is past both.
V_GYM_CHANGED = "0.26.0"
V_NPRANDOM_CHANGED = "0.22.0"


def _version_tuple(version: str) -> tuple[int, ...]:
    numbers: list[int] = []
    for part in version.split("."):
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def is_gym_version_ge(compare_version: str) -> bool:
    """Whether the installed gym (here: gymnasium) is at least ``compare_version``.

    PARL scripts ask ``is_gym_version_ge("0.26.0")`` to choose the new API (``render_mode`` in
    ``make``); with gymnasium the answer is always true, as it should be.
    """
    if not isinstance(compare_version, str):
        raise TypeError(
            f"compare_version must be a version string such as '0.26.0', got {compare_version!r}"
        )
    return _version_tuple(gymnasium.__version__) >= _version_tuple(compare_version)


def _max_episode_steps(env: gymnasium.Env) -> int | None:
    """The time limit of ``env``: its ``TimeLimit`` wrapper's, else its spec's, else ``None``."""
    try:
        limit = env.get_wrapper_attr("_max_episode_steps")
    except AttributeError:
        spec = getattr(env, "spec", None)
        limit = getattr(spec, "max_episode_steps", None)
    return None if limit is None else int(limit)


def inner_attribute(wrapper: gymnasium.Wrapper, name: str) -> Any:
    """``wrapper.name`` found in the envs it wraps, as old gym's ``Wrapper.__getattr__`` found
    it; gymnasium 1.x asks for ``get_wrapper_attr(name)``. Used as ``__getattr__``, so it runs
    only when normal lookup fails; private names and a half-built wrapper (no ``env`` yet, e.g.
    while unpickling) are not forwarded, so it cannot recurse."""
    if name.startswith("_") or "env" not in wrapper.__dict__:
        raise AttributeError(f"{type(wrapper).__name__!r} object has no attribute {name!r}")
    try:
        return wrapper.env.get_wrapper_attr(name)
    except AttributeError:
        raise AttributeError(
            f"{type(wrapper).__name__!r} object and the envs it wraps have no attribute {name!r}"
        ) from None


class CompatWrapper(gymnasium.Wrapper):
    """Old gym's API on a gymnasium env: ``reset() -> obs``, ``step(a) -> (obs, r, done, info)``.

    ``env._max_episode_steps`` is the time limit (``None`` without one), ``env.seed(s)`` seeds the
    next reset and the spaces, and ``render``/``close`` pass through (``render(mode=...)`` accepts
    and ignores the old ``mode`` argument: gymnasium fixes the mode in ``make(render_mode=...)``).
    """

    def __init__(self, env: gymnasium.Env) -> None:
        if not isinstance(env, gymnasium.Env):
            raise TypeError(
                f"CompatWrapper wraps a gymnasium env (gymnasium.make(...)), got "
                f"{type(env).__name__}"
            )
        super().__init__(env)
        self._max_episode_steps = _max_episode_steps(env)
        self._next_seed: int | None = None
        self._elapsed_steps = 0

    __getattr__ = inner_attribute

    def seed(self, seed: int | None = None) -> list[int | None]:
        """Seed the next ``reset`` and the action and observation spaces; returns ``[seed]``."""
        if seed is not None:
            seed = check_int("seed", seed, low=0, what="an int of at least 0, or None")
        self._next_seed = seed
        if seed is not None:
            self.env.action_space.seed(seed)
            self.env.observation_space.seed(seed)
        return [seed]

    def reset(self, **kwargs: Any) -> Any:
        """Start an episode; returns only the observation (the info is ``self.last_info``)."""
        if self._next_seed is not None and "seed" not in kwargs:
            kwargs["seed"] = self._next_seed
        self._next_seed = None
        obs, info = self.env.reset(**kwargs)
        self._elapsed_steps = 0
        self.last_info = info
        return obs

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, dict[str, Any]]:  # type: ignore[override]
        """One step; ``done`` is ``terminated or truncated`` and a truncation by the time limit
        sets ``info["TimeLimit.truncated"]`` (as old gym's ``TimeLimit`` did)."""
        if (
            isinstance(action, np.ndarray)
            and action.size == 1
            and action.dtype.kind in "iu"
            and isinstance(self.env.action_space, gymnasium.spaces.Discrete)
        ):
            action = action.reshape(()).item()
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._elapsed_steps += 1
        if truncated and not terminated:
            info = dict(info)
            info["TimeLimit.truncated"] = True
        return obs, reward, bool(terminated or truncated), info

    def render(self, mode: str | None = None, **kwargs: Any) -> Any:
        """Render with the ``render_mode`` given to ``make``; ``mode`` is accepted for old code."""
        return self.env.render(**kwargs)
