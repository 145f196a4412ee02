"""Rollout storage of the PPO example: ``(T, N, ...)`` numpy arrays, GAE via
``parl.utils.calc_gae``."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from parl.utils import calc_gae


class Batch(NamedTuple):
    """A flattened rollout, ``B = T * N`` rows."""

    obs: np.ndarray  # (B, *obs_shape)
    actions: np.ndarray  # (B,) or (B, act_dim)
    logprobs: np.ndarray  # (B,)
    advantages: np.ndarray  # (B,)
    returns: np.ndarray  # (B,)
    values: np.ndarray  # (B,)


class RolloutStorage:
    """``step_nums`` steps of ``env_num`` envs; ``dones[t]``: the episode ended at step ``t``."""

    def __init__(
        self, step_nums: int, env_num: int, obs_shape: tuple, act_shape: tuple, obs_dtype=np.float32
    ) -> None:
        shape = (step_nums, env_num)
        self.obs = np.zeros(shape + tuple(obs_shape), dtype=obs_dtype)
        self.actions = np.zeros(shape + tuple(act_shape), dtype=np.float32)
        self.logprobs = np.zeros(shape, dtype=np.float32)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.dones = np.zeros(shape, dtype=np.float32)
        self.values = np.zeros(shape, dtype=np.float32)
        self.step_nums = step_nums
        self.cur_step = 0

    def append(self, obs, action, logprob, reward, done, value) -> None:
        t = self.cur_step
        self.obs[t] = obs
        self.actions[t] = action
        self.logprobs[t] = logprob
        self.rewards[t] = reward
        self.dones[t] = done
        self.values[t] = value
        self.cur_step = (t + 1) % self.step_nums

    def compute_returns(self, next_value: np.ndarray, gamma: float, gae_lambda: float) -> None:
        """Advantages by GAE; returns = advantages + values (the critic's targets)."""
        self.advantages = calc_gae(
            self.rewards, self.values, next_value, gamma, gae_lambda, self.dones
        ).astype(np.float32)
        self.returns = self.advantages + self.values

    def flatten(self) -> Batch:
        def flat(array: np.ndarray) -> np.ndarray:
            return array.reshape((-1,) + array.shape[2:])

        return Batch(
            flat(self.obs),
            flat(self.actions),
            flat(self.logprobs),
            flat(self.advantages),
            flat(self.returns),
            flat(self.values),
        )
