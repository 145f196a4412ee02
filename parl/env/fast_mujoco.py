"""A lean step for gymnasium's MuJoCo HalfCheetah-v5 envs in one actor.

Half of the time of ``HalfCheetahEnv.step`` is Python around MuJoCo (the wrappers, the action
check, ``np.concatenate`` for the observation, a ``dt`` property read, ``np.sum`` through
``fromnumeric``, the info dict). :class:`HalfCheetahBatch` keeps the real gymnasium envs (made
by ``gymnasium.make``: resets, seeding, ``call``/``get_attr``/``set_attr`` are theirs) and, per
step, only sets each env's controls, runs ``mujoco.mj_step`` and ``mj_rnePostConstraint`` as
``MujocoEnv`` does and copies ``qpos``/``qvel`` into the observation rows; the reward is
computed for the whole block at once with the same expressions and dtypes as
``HalfCheetahEnv._get_rew`` (a float64 forward reward minus a float32 control cost), so
observations, rewards and infos are bit for bit gymnasium's. Truncation is counted here as
``TimeLimit`` counts it (the wrapper's own ``step`` is not called).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import mujoco
import numpy as np
from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import OrderEnforcing, TimeLimit

from parl.env.env_batch import EnvList, Infos

HALF_CHEETAH = "gymnasium.envs.mujoco.half_cheetah_v5:HalfCheetahEnv"


def _lean(env: gymnasium.Env) -> bool:
    """Whether ``env`` is exactly ``TimeLimit(OrderEnforcing(HalfCheetahEnv))``."""
    return (
        type(env) is TimeLimit
        and type(env.env) is OrderEnforcing
        and type(env.env.env) is HalfCheetahEnv
        and env.unwrapped.render_mode is None
    )


class HalfCheetahBatch(EnvList):
    """HalfCheetah-v5 envs stepped without their Python wrappers (see the module doc)."""

    def __init__(
        self, env_fns: Sequence[Callable[[], gymnasium.Env]], mode: AutoresetMode, keep_info: bool
    ) -> None:
        super().__init__(env_fns, mode, keep_info)
        self.lean = all(_lean(env) for env in self.envs)  # else gymnasium's own step
        self.raw: list[Any] = [env.unwrapped for env in self.envs]
        self.elapsed = np.zeros(self.num_envs, dtype=np.int64)
        self.has_reset = False
        self._x_before = np.zeros(self.num_envs)
        self._x_after = np.zeros(self.num_envs)
        self._settings()

    def _settings(self) -> None:
        """What the block's step reads from its envs (again after ``set_attr``)."""
        first = self.raw[0]
        self.limits = np.array([env.get_wrapper_attr("_max_episode_steps") for env in self.envs])
        self.dt = np.array([env.dt for env in self.raw])
        self.forward_weight = first._forward_reward_weight
        self.ctrl_weight = first._ctrl_cost_weight
        self.skip = int(first._exclude_current_positions_from_observation)
        same = all(
            (env._forward_reward_weight, env._ctrl_cost_weight, env.frame_skip)
            == (self.forward_weight, self.ctrl_weight, first.frame_skip)
            for env in self.raw
        )
        self.lean = self.lean and same
        # MjData's arrays are views made anew at each attribute read: made once here instead
        datas = [env.data for env in self.raw]
        self._sims = [
            (env.model, d, d.ctrl, env.frame_skip) for env, d in zip(self.raw, datas, strict=True)
        ]
        self._x_views = [d.qpos[:1] for d in datas]
        self._qpos_views = [d.qpos[self.skip :] for d in datas]
        self._qvel_views = [d.qvel for d in datas]

    def reset(self, seeds: Sequence[int | None], options: Any, obs: np.ndarray) -> Infos:
        infos = super().reset(seeds, options, obs)
        self.elapsed[:] = 0
        self.has_reset = True
        return infos

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        super().set_attr(name, values)
        self._settings()

    def step(
        self,
        actions: np.ndarray,
        obs: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
    ) -> Infos:
        if not self.lean:
            return super().step(actions, obs, rewards, terminations, truncations)
        if not self.has_reset:
            raise ResetNeeded("Cannot call env.step() before calling env.reset()")
        moving = ~self.autoreset if not self.same_step else np.ones(self.num_envs, dtype=bool)
        self._simulate(actions, obs, moving)
        x_velocity = (self._x_after - self._x_before) / self.dt
        forward_reward = self.forward_weight * x_velocity
        ctrl_cost = self.ctrl_weight * np.sum(np.square(actions), axis=1)  # float32, as theirs
        np.subtract(forward_reward, ctrl_cost, out=rewards)
        terminations[:] = False
        self.elapsed[moving] += 1
        np.greater_equal(self.elapsed, self.limits, out=truncations)
        infos: Infos = []
        if self.keep_info:
            for k in np.flatnonzero(moving):
                info = {
                    "x_position": self._x_after[k],
                    "x_velocity": x_velocity[k],
                    "reward_forward": forward_reward[k],
                    "reward_ctrl": -ctrl_cost[k],
                }
                infos.append((int(k), info))
        return self._autoreset(moving, obs, rewards, terminations, truncations, infos)

    def _simulate(self, actions: np.ndarray, obs: np.ndarray, moving: np.ndarray) -> None:
        """``MujocoEnv._step_mujoco_simulation`` for the moving envs, and ``_get_obs`` of
        every env gathered in one copy per part (rows of envs about to reset are overwritten
        by their reset)."""
        step, post = mujoco.mj_step, mujoco.mj_rnePostConstraint
        split = obs.shape[1] - self.raw[0].model.nv
        np.concatenate(self._x_views, out=self._x_before)
        for k, (model, data, ctrl, frames) in enumerate(self._sims):
            if moving[k]:
                ctrl[:] = actions[k]
                step(model, data, frames)
                post(model, data)
        np.concatenate(self._x_views, out=self._x_after)
        np.stack(self._qpos_views, out=obs[:, :split])
        np.stack(self._qvel_views, out=obs[:, split:])

    def _autoreset(
        self,
        moving: np.ndarray,
        obs: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        infos: Infos,
    ) -> Infos:
        keep, resets = self.keep_info, self._resets
        if self.same_step:
            for k in np.flatnonzero(truncations):
                final = dict(infos.pop(_index(infos, int(k)))[1]) if keep else {}
                infos.append((int(k), {"final_obs": obs[k].copy(), "final_info": final}))
                obs[k], info = resets[k]()
                self.elapsed[k] = 0
                if keep and info:
                    infos.append((int(k), info))
            return infos
        for k in np.flatnonzero(~moving):
            obs[k], info = resets[k]()
            self.elapsed[k] = 0
            rewards[k], truncations[k] = 0.0, False
            if keep and info:
                infos.append((int(k), info))
        np.logical_or(terminations, truncations, out=self.autoreset)
        return infos


def _index(infos: Infos, k: int) -> int:
    return next(i for i, (j, _) in enumerate(infos) if j == k)
