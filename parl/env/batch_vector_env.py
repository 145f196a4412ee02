"""``BatchVectorEnv``: gymnasium's vector-env API over a batch of envs stepped in this process,
in the fast form that :mod:`parl.env.fast_envs` knows (CartPole as one numpy pass over all
envs) or else one gymnasium env after another.

Why: for a few cheap envs (PPO's 8 CartPoles), sending a step to actors costs more than the
step, and ``gymnasium.vector.SyncVectorEnv`` steps each env through its Python wrappers. This
class runs the same batch an actor of ``RemoteVectorEnv.make`` would run, without the actors:
the same trajectories as ``SyncVectorEnv`` for the same seeds (env ``i`` seeded ``seed + i``) and
the same auto-reset. With ``episode_statistics`` it also reports what gymnasium's
``RecordEpisodeStatistics`` reports at the end of an episode (``info["episode"]`` with ``r``,
``l``, ``t``; in ``final_info`` under SAME_STEP auto-reset), computed on the whole batch.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from parl.env.env_batch import EnvBatch, EnvList, Infos, per_env_values, reset_seeds
from parl.env.fast_envs import fast_builder
from parl.validation import check_int

__all__ = ["BatchVectorEnv"]


def _check_mode(autoreset_mode: str | AutoresetMode) -> AutoresetMode:
    mode = AutoresetMode(autoreset_mode)
    if mode is AutoresetMode.DISABLED:
        raise ValueError("BatchVectorEnv supports NEXT_STEP and SAME_STEP auto-reset")
    return mode


class BatchVectorEnv(gymnasium.vector.VectorEnv):
    """``num_envs`` envs ``gymnasium.make(env_id, **kwargs)`` stepped as one batch here.

    Args:
        env_id: a registered gymnasium id.
        num_envs: how many envs.
        autoreset_mode: gymnasium's ``AutoresetMode`` (or its string value): NEXT_STEP or
            SAME_STEP.
        episode_statistics: report ``info["episode"]`` at the end of each episode, as
            ``RecordEpisodeStatistics`` around each env would.
        vectorize: use the numpy batch of :mod:`parl.env.fast_envs` where there is one (else,
            and with ``False``, one gymnasium env after another).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        *,
        episode_statistics: bool = True,
        vectorize: bool = True,
        **kwargs: Any,
    ) -> None:
        if not isinstance(env_id, str):
            raise TypeError(f"env_id must be a registered gymnasium id (str), got {env_id!r}")
        num_envs = check_int("num_envs", num_envs, low=1)
        mode = _check_mode(autoreset_mode)
        gymnasium.spec(env_id)  # gymnasium's error for an unknown id, here
        build = fast_builder(env_id, num_envs, kwargs) if vectorize else None
        if build is None:
            fn = functools.partial(gymnasium.make, env_id, disable_env_checker=True, **kwargs)
            build = functools.partial(EnvList, [fn] * num_envs)
        self._setup(build(mode, False), mode, episode_statistics)

    @classmethod
    def from_env_fns(
        cls,
        env_fns: Sequence[Callable[[], gymnasium.Env]],
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        *,
        episode_statistics: bool = False,
    ) -> BatchVectorEnv:
        """The envs ``fn()`` for ``fn`` in ``env_fns``, stepped one after another like
        ``SyncVectorEnv`` but without its per-step merging of every env's info dict: only the
        infos that auto-reset needs are kept (``final_obs``, and ``final_info["episode"]`` of a
        ``RecordEpisodeStatistics`` inside the envs)."""
        if not env_fns or not all(callable(fn) for fn in env_fns):
            raise TypeError("from_env_fns needs a non-empty list of functions that build envs")
        mode = _check_mode(autoreset_mode)
        self = cls.__new__(cls)
        self._setup(EnvList(env_fns, mode, False), mode, episode_statistics)
        return self

    def _setup(self, batch: EnvBatch, mode: AutoresetMode, episode_statistics: bool) -> None:
        self.autoreset_mode = mode
        self.batch = batch
        num_envs = self.num_envs = batch.num_envs
        self.single_observation_space = self.batch.single_observation_space
        self.single_action_space = self.batch.single_action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": self.autoreset_mode}
        self._obs = np.zeros(self.observation_space.shape or (), self.observation_space.dtype)
        self._actions = np.zeros(self.action_space.shape or (), self.action_space.dtype)
        self._rewards = np.zeros(num_envs, np.float64)
        self._terminations = np.zeros(num_envs, np.bool_)
        self._truncations = np.zeros(num_envs, np.bool_)
        self._stats = episode_statistics
        self._returns = np.zeros(num_envs, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)
        self._starts = np.zeros(num_envs, np.float64)
        self._ended = np.zeros(num_envs, np.bool_)  # NEXT_STEP: the env resets on this step

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env; ``seed=s`` gives env ``i`` the seed ``s + i``."""
        seeds = reset_seeds(seed, self.num_envs)
        infos = self.batch.reset(seeds, options, self._obs)
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._starts[:] = time.perf_counter()
        self._ended[:] = False
        return self._obs.copy(), self._merge(infos)

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env with ``actions`` (batched); envs that ended auto-reset."""
        self._actions[...] = actions
        infos = self.batch.step(
            self._actions, self._obs, self._rewards, self._terminations, self._truncations
        )
        if self._stats:
            infos = self._episode_statistics(infos)
        return (
            self._obs.copy(),
            self._rewards.copy(),
            self._terminations.copy(),
            self._truncations.copy(),
            self._merge(infos),
        )

    def _episode_statistics(self, infos: Infos) -> Infos:
        """Add this step's rewards to the running returns; at the end of an episode report
        ``{"r", "l", "t"}`` (return, length, seconds) and start the next one."""
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        restarted = None
        if not same_step and self._ended.any():  # reset by this step: it is no episode step
            restarted = self._ended.copy()
            self._returns[restarted] = 0.0
            self._starts[restarted] = time.perf_counter()
        self._returns += self._rewards
        self._lengths += 1
        if restarted is not None:
            self._lengths[restarted] = 0
        done = np.logical_or(self._terminations, self._truncations, out=self._ended)
        if not done.any():
            return infos
        now = time.perf_counter()
        entries = list(infos)
        where = {
            k: i for i, (k, info) in enumerate(entries) if not same_step or "final_obs" in info
        }
        for k in np.flatnonzero(done).tolist():
            if k not in where:
                where[k] = len(entries)
                entries.append((k, {}))
            info = entries[where[k]][1]
            target = info.setdefault("final_info", {}) if same_step else info
            target["episode"] = {
                "r": self._returns[k],
                "l": self._lengths[k],
                "t": round(now - self._starts[k], 6),
            }
            if same_step:
                self._returns[k], self._lengths[k], self._starts[k] = 0.0, 0, now
        return entries

    def _merge(self, infos: Infos) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for k, info in infos:
            merged = self._add_info(merged, info, k)
        return merged

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every env (an attribute is read); results in env order."""
        return tuple(self.batch.call(name, args, kwargs))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """The attribute ``name`` of every env (a method is called with no arguments).

        Args:
            name: The attribute to read.

        Returns:
            One value per env, in env order.
        """
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set the attribute ``name`` of every env.

        Args:
            name: The attribute to set.
            values: One value per env (a list or tuple of ``num_envs`` items), or one value that
                every env gets.
        """
        self.batch.set_attr(name, per_env_values(values, self.num_envs))

    def close_extras(self, **kwargs: Any) -> None:
        """Close the envs (called by ``close()``, once).

        Args:
            **kwargs: Accepted for gymnasium's interface; unused.
        """
        self.batch.close()
