"""A2C's agent (PARL's AtariAgent) and the envs of the example, shared by learner and actors.

A model with an observation normaliser (``obs_norm``, the MuJoCo model) has its statistics
updated from each training batch before the update; actors get them with the weights."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

import parl
from parl.algorithms import A2C
from parl.env.atari_wrappers import wrap_deepmind  # importing it registers the Atari ids
from parl.utils.scheduler import LinearDecayScheduler, PiecewiseScheduler


def is_mujoco(env_name: str) -> bool:
    return "mujoco" in str(gym.spec(env_name).entry_point)


def make_env(env_name: str, test: bool = False) -> gym.Env:
    if env_name.startswith("CartPole"):
        return gym.wrappers.RecordEpisodeStatistics(gym.make(env_name))
    if is_mujoco(env_name):  # the Gaussian samples are clipped here, learned unclipped
        return gym.wrappers.ClipAction(gym.wrappers.RecordEpisodeStatistics(gym.make(env_name)))
    entry_point = str(gym.spec(env_name).entry_point)
    if "ale_py" not in entry_point:  # the Atari wrappers would fail obscurely on, say, Pendulum
        raise ValueError(
            f"A2C's example runs CartPole, MuJoCo (HalfCheetah-v5...) and Atari "
            f"(PongNoFrameskip-v4...) envs; {env_name} ({entry_point}) is none of them"
        )

    return wrap_deepmind(gym.make(env_name), obs_format="NCHW", test=test, compat=False)


class A2CAgent(parl.Agent):
    """numpy in and out; the learning-rate and entropy schedules of PARL's AtariAgent."""

    alg: A2C

    def __init__(self, algorithm: A2C, config: dict[str, Any]) -> None:
        super().__init__(algorithm)
        self.lr_scheduler = LinearDecayScheduler(config["start_lr"], config["max_sample_steps"])
        self.entropy_coeff_scheduler = PiecewiseScheduler(config["entropy_coeff_scheduler"])

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        return self.to_tensor(obs, dtype=None if obs.dtype == np.uint8 else torch.float32).float()

    def sample(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        actions, values = self.alg.sample(self._obs(obs))
        return self.to_numpy(actions), self.to_numpy(values)

    def predict(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.predict(self._obs(obs)))

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.value(self._obs(obs)))

    def learn(self, obs, actions, advantages, target_values) -> tuple[float, ...]:
        lr = self.lr_scheduler.value
        self.lr_scheduler.step(obs.shape[0])
        entropy_coeff = self.entropy_coeff_scheduler.step()
        obs_tensor = self._obs(obs)
        obs_norm = getattr(self.alg.model, "obs_norm", None)
        if obs_norm is not None:
            obs_norm.update(obs_tensor)
        continuous = self.alg.continuous_action
        total, pi, vf, entropy = self.alg.learn(
            obs_tensor,
            self.to_tensor(actions, dtype=torch.float32 if continuous else torch.int64),
            self.to_tensor(advantages),
            self.to_tensor(target_values),
            lr,
            entropy_coeff,
        )
        return float(total), float(pi), float(vf), float(entropy), lr, entropy_coeff
