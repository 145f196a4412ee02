"""Fast forms of known envs for ``RemoteVectorEnv.make``, with gymnasium's per-env semantics:
a numpy batch for CartPole (below) and a lean MuJoCo step for HalfCheetah-v5
(:mod:`parl.env.fast_mujoco`). Other ids get ``None``: one gymnasium env each.

gymnasium's own ``CartPoleVectorEnv`` (``gymnasium.make_vec(..., vectorization_mode=
"vector_entry_point")``) steps all envs in one numpy pass, but it draws every reset from one
generator seeded once, so its trajectories differ from ``SyncVectorEnv`` (env ``i`` seeded
``seed + i``) and it knows only NEXT_STEP auto-reset. :class:`CartPoleBatch` does the same numpy
pass with the arithmetic of gymnasium's single ``CartPoleEnv`` (float64 state, the same
expressions in the same order, float32 observations) and one generator per env, seeded as
``CartPoleEnv.reset(seed=...)`` seeds its own, so each env follows exactly the trajectory that
``gymnasium.make("CartPole-v1")`` would; auto-reset follows the rules of
:class:`parl.env.env_batch.EnvList` (NEXT_STEP or SAME_STEP), truncation gymnasium's
``TimeLimit``.

It has no gymnasium env objects: ``call``/``get_attr``/``set_attr`` raise (build with
``RemoteVectorEnv.make(..., vectorize=False)`` to have them).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.utils import maybe_parse_reset_bounds
from gymnasium.error import ResetNeeded
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode

from parl.env.env_batch import EnvBatch, Infos

_CARTPOLE = "gymnasium.envs.classic_control.cartpole:CartPoleEnv"
_HALF_CHEETAH = "gymnasium.envs.mujoco.half_cheetah_v5:HalfCheetahEnv"
# below this many envs per actor, gymnasium's CartPoleEnv objects step faster than the numpy
# batch (its ~25 array operations per step cost more than a few scalar steps)
CARTPOLE_BATCH_MIN = 4


def fast_builder(
    env_id: str, num_envs: int, kwargs: dict[str, Any]
) -> Callable[[AutoresetMode, bool], EnvBatch] | None:
    """A builder of a numpy batch for ``gymnasium.make(env_id, **kwargs)``, or None when
    there is none for this id or these arguments (then each env is a gymnasium env)."""
    spec = gymnasium.spec(env_id)
    if spec.additional_wrappers or kwargs.get("render_mode") is not None:
        return None
    if spec.entry_point == _HALF_CHEETAH:
        from parl.env.fast_mujoco import HalfCheetahBatch  # imports mujoco

        make = functools.partial(gymnasium.make, env_id, disable_env_checker=True, **kwargs)
        return functools.partial(HalfCheetahBatch, [make] * num_envs)
    if spec.entry_point != _CARTPOLE or num_envs < CARTPOLE_BATCH_MIN:
        return None
    options = {**spec.kwargs, **kwargs}
    max_steps = options.pop("max_episode_steps", spec.max_episode_steps)
    sutton_barto = options.pop("sutton_barto_reward", False)
    if options.pop("render_mode", None) is not None or options or max_steps is None:
        return None
    return functools.partial(CartPoleBatch, num_envs, int(max_steps), bool(sutton_barto))


class CartPoleBatch:
    """``num_envs`` CartPole envs as one float64 state array of shape (4, num_envs)."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masspole + masscart
    polemass_length = masspole * length
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(
        self,
        num_envs: int,
        max_episode_steps: int,
        sutton_barto_reward: bool,
        mode: AutoresetMode,
        keep_info: bool,
    ) -> None:
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.sutton_barto_reward = sutton_barto_reward
        self.same_step = mode is AutoresetMode.SAME_STEP
        high = np.array(
            [self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf],
            dtype=np.float32,
        )
        self.single_observation_space: gymnasium.Space = spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space: gymnasium.Space = spaces.Discrete(2)
        self.state: np.ndarray | None = None
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self.autoreset = np.zeros(num_envs, dtype=bool)
        self.rngs: list[np.random.Generator | None] = [None] * num_envs

    def _reset_one(self, k: int, low: float = -0.05, high: float = 0.05) -> None:
        rng = self.rngs[k]
        if rng is None:  # never seeded: as gymnasium, from fresh entropy
            rng = self.rngs[k] = seeding.np_random()[0]
        assert self.state is not None
        self.state[:, k] = rng.uniform(low=low, high=high, size=(4,))
        self.elapsed[k] = 0

    def reset(self, seeds: Sequence[int | None], options: Any, obs: np.ndarray) -> Infos:
        if self.state is None:
            self.state = np.zeros((4, self.num_envs), dtype=np.float64)
        low, high = maybe_parse_reset_bounds(options, -0.05, 0.05)
        for k, seed in enumerate(seeds):
            if seed is not None:
                self.rngs[k] = seeding.np_random(seed)[0]
            self._reset_one(k, low, high)
        obs[:] = self.state.T
        self.autoreset[:] = False
        return []

    def _physics(self, actions: np.ndarray) -> None:
        """One step of every env, in place (CartPoleEnv.step's Euler integration)."""
        state = self.state
        assert state is not None
        x, x_dot, theta, theta_dot = state
        force = np.where(actions == 1, self.force_mag, -self.force_mag)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        temp = (force + self.polemass_length * np.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * np.square(costheta) / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        state[0] = x + self.tau * x_dot
        state[1] = x_dot + self.tau * xacc
        state[2] = theta + self.tau * theta_dot
        state[3] = theta_dot + self.tau * thetaacc

    def step(
        self,
        actions: np.ndarray,
        obs: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
    ) -> Infos:
        if self.state is None:
            raise ResetNeeded("Cannot call env.step() before calling env.reset()")
        if (actions.view(np.uint64) > 1).any():  # negative ones wrap around
            raise ValueError(f"CartPole actions must be 0 or 1, got {actions}")
        self._physics(actions)
        x, theta = self.state[0], self.state[2]
        np.logical_or(x < -self.x_threshold, x > self.x_threshold, out=terminations)
        terminations |= theta < -self.theta_threshold_radians
        terminations |= theta > self.theta_threshold_radians
        self.elapsed += 1
        np.greater_equal(self.elapsed, self.max_episode_steps, out=truncations)
        if self.sutton_barto_reward:
            np.subtract(0.0, terminations, out=rewards)  # 0.0 or -1.0, as CartPoleEnv
        else:
            rewards[:] = 1.0
        if self.same_step:
            return self._same_step(obs, rewards, terminations, truncations)
        autoreset = self.autoreset
        if autoreset.any():
            for k in np.flatnonzero(autoreset):
                self._reset_one(int(k))
            rewards[autoreset] = 0.0
            terminations[autoreset] = False
            truncations[autoreset] = False
        obs[:] = self.state.T
        np.logical_or(terminations, truncations, out=autoreset)
        return []

    def _same_step(
        self,
        obs: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
    ) -> Infos:
        assert self.state is not None
        obs[:] = self.state.T
        done = terminations | truncations
        if not done.any():
            return []
        infos: Infos = []
        for k in np.flatnonzero(done):
            infos.append((int(k), {"final_obs": obs[k].copy(), "final_info": {}}))
            self._reset_one(int(k))
            obs[k] = self.state[:, k]
        return infos

    def _no_envs(self, what: str) -> TypeError:
        return TypeError(
            f"{what} needs gymnasium env objects, and this RemoteVectorEnv steps CartPole as a "
            "numpy batch; make it with RemoteVectorEnv.make(..., vectorize=False) to have them"
        )

    def call(self, name: str, args: tuple, kwargs: dict) -> list[Any]:
        raise self._no_envs(f"call({name!r}) / get_attr({name!r})")

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        raise self._no_envs(f"set_attr({name!r})")

    def close(self) -> None:
        self.state = None
