"""GA3C's agent and the envs of the example, shared by the learner and the simulators.

The agent is PARL's AtariAgent for A3C: numpy in and out, the learning rate and the entropy
coefficient on piecewise schedules counted in updates. The loss is ``parl.algorithms.A2C``'s,
which is A3C's (policy gradient weighted by the advantage, value loss, entropy bonus)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from model import AtariModel, CartpoleModel

import parl
from parl.algorithms import A2C
from parl.env.atari_wrappers import wrap_deepmind  # importing it registers the Atari ids
from parl.utils.scheduler import PiecewiseScheduler


def make_env(env_name: str, dim: int = 42, test: bool = False) -> gym.Env:
    """CartPole with episode statistics, or an Atari game through DeepMind's wrappers with
    ``dim x dim`` frames."""
    if env_name.startswith("CartPole"):
        return gym.wrappers.RecordEpisodeStatistics(gym.make(env_name))
    entry_point = str(gym.spec(env_name).entry_point)
    if "ale_py" not in entry_point:  # the Atari wrappers would fail obscurely on, say, Pendulum
        raise ValueError(
            f"GA3C's example runs CartPole and Atari (PongNoFrameskip-v4...) envs; "
            f"{env_name} ({entry_point}) is neither"
        )
    return wrap_deepmind(gym.make(env_name), dim=dim, obs_format="NCHW", test=test, compat=False)


class GA3CAgent(parl.Agent):
    """numpy in and out; ``learn`` steps the schedules by one update."""

    alg: A2C

    def __init__(self, algorithm: A2C, config: dict[str, Any]) -> None:
        super().__init__(algorithm)
        self.lr_scheduler = PiecewiseScheduler(config["lr_scheduler"])
        self.entropy_coeff_scheduler = PiecewiseScheduler(config["entropy_coeff_scheduler"])

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        return self.to_tensor(obs, dtype=None if obs.dtype == np.uint8 else torch.float32).float()

    def sample(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(actions (B,), values (B,))``, the actions drawn from the policy."""
        actions, values = self.alg.sample(self._obs(obs))
        return self.to_numpy(actions), self.to_numpy(values)

    def predict(self, obs: np.ndarray) -> np.ndarray:
        """The greedy actions ``(B,)``."""
        return self.to_numpy(self.alg.predict(self._obs(obs)))

    def learn(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        advantages: np.ndarray,
        target_values: np.ndarray,
    ) -> tuple[float, ...]:
        """One update; returns ``(total, pi, vf, entropy, lr, entropy_coeff)``."""
        lr, entropy_coeff = self.lr_scheduler.value, self.entropy_coeff_scheduler.value
        self.lr_scheduler.step()
        self.entropy_coeff_scheduler.step()
        total, pi, vf, entropy = self.alg.learn(
            self._obs(obs),
            self.to_tensor(actions, dtype=torch.int64),
            self.to_tensor(advantages),
            self.to_tensor(target_values),
            lr,
            entropy_coeff,
        )
        return float(total), float(pi), float(vf), float(entropy), lr, entropy_coeff


def build_agent(config: dict[str, Any], obs_space: gym.Space, action_space: gym.Space) -> GA3CAgent:
    if not isinstance(action_space, gym.spaces.Discrete):
        raise TypeError(f"GA3C's example handles Discrete actions, not {action_space}")
    assert obs_space.shape is not None
    act_dim = int(action_space.n)
    if config["env_name"].startswith("CartPole"):
        model: parl.Model = CartpoleModel(
            int(obs_space.shape[0]), act_dim, value_scale=config.get("value_scale", 1.0)
        )
    else:
        model = AtariModel(act_dim, config.get("env_dim", 42))
    lr = config["lr_scheduler"][0][1]
    alg = A2C(model, config, learning_rate=lr, device=config.get("device", "cpu"))
    return GA3CAgent(alg, config)
