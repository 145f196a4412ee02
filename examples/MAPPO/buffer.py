"""``AgentBuffer``: one agent's rollout of ``episode_length`` steps in ``env_num`` envs, as
``(T + 1, N, ...)`` numpy arrays (row ``T`` holds the observation after the last step, from
which the next rollout starts), with GAE returns computed in the critic's unnormalised scale and
minibatches of ``T * N`` rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

from parl.algorithms import PopArt
from parl.utils import calc_gae


class MiniBatch(NamedTuple):
    """Rows of a rollout, as ``MAPPO.learn`` takes them (``B`` rows each)."""

    share_obs: np.ndarray  # (B, cent_obs_dim)
    obs: np.ndarray  # (B, obs_dim)
    actions: np.ndarray  # (B, action columns)
    value_preds: np.ndarray  # (B, 1), in the critic's (normalised) scale
    returns: np.ndarray  # (B, 1), unnormalised
    old_log_probs: np.ndarray  # (B, log-probability columns)
    advantages: np.ndarray  # (B, 1), normalised over the active steps
    active_masks: np.ndarray  # (B, 1)


class AgentBuffer:
    """One agent's rollout storage.

    Args:
        episode_length: steps per rollout (T).
        env_num: parallel envs (N).
        obs_dim: the agent's observation size.
        cent_obs_dim: the critic's input size.
        action_columns: columns of an action (1 discrete, k multi-discrete, d continuous).
        log_prob_columns: columns of its log-probability (k multi-discrete, else 1).
    """

    def __init__(
        self,
        episode_length: int,
        env_num: int,
        obs_dim: int,
        cent_obs_dim: int,
        action_columns: int,
        log_prob_columns: int,
    ) -> None:
        t, n = episode_length, env_num
        self.episode_length, self.env_num = t, n
        self.share_obs = np.zeros((t + 1, n, cent_obs_dim), np.float32)
        self.obs = np.zeros((t + 1, n, obs_dim), np.float32)
        self.value_preds = np.zeros((t + 1, n, 1), np.float32)
        self.returns = np.zeros((t + 1, n, 1), np.float32)
        self.actions = np.zeros((t, n, action_columns), np.float32)
        self.log_probs = np.zeros((t, n, log_prob_columns), np.float32)
        self.rewards = np.zeros((t, n, 1), np.float32)
        self.masks = np.ones((t + 1, n, 1), np.float32)  # 0: the episode ended before this step
        self.active_masks = np.ones((t + 1, n, 1), np.float32)  # 0: the agent was not acting
        self.step = 0

    def insert(
        self,
        share_obs: np.ndarray,
        obs: np.ndarray,
        actions: np.ndarray,
        log_probs: np.ndarray,
        value_preds: np.ndarray,
        rewards: np.ndarray,
        masks: np.ndarray,
        active_masks: np.ndarray | None = None,
    ) -> None:
        """Store one step of the N envs: what was done at ``obs`` and what followed (the next
        observations, the rewards, ``masks`` 0 where an episode ended)."""
        t = self.step
        for name, value in (("share_obs", share_obs), ("obs", obs), ("masks", masks)):
            getattr(self, name)[t + 1] = value
        self.actions[t] = actions
        self.log_probs[t] = log_probs
        self.value_preds[t] = value_preds
        self.rewards[t] = np.reshape(rewards, (self.env_num, 1))
        if active_masks is not None:
            self.active_masks[t + 1] = active_masks
        self.step = (t + 1) % self.episode_length

    def after_update(self) -> None:
        """The next rollout starts where this one ended."""
        for array in (self.share_obs, self.obs, self.masks, self.active_masks):
            array[0] = array[-1]

    def compute_returns(
        self, next_value: np.ndarray, normalizer: PopArt | None, gamma: float, gae_lambda: float
    ) -> None:
        """GAE returns ``A + V`` for every step, with ``V`` unnormalised by ``normalizer``
        (the critic's outputs are in PopArt's scale)."""
        self.value_preds[-1] = next_value
        values = (
            self.value_preds if normalizer is None else normalizer.denormalize(self.value_preds)
        )
        dones = 1.0 - self.masks[1:, :, 0]
        advantages = calc_gae(
            self.rewards[..., 0], values[:-1, :, 0], values[-1, :, 0], gamma, gae_lambda, dones
        )
        self.returns[:-1, :, 0] = advantages + values[:-1, :, 0]

    def advantages(self, normalizer: PopArt | None) -> np.ndarray:
        """``returns - V`` for each step ``(T, N, 1)``, normalised by the mean and standard
        deviation over the steps where the agent was active."""
        values = self.value_preds[:-1]
        if normalizer is not None:
            values = normalizer.denormalize(values)
        advantages = self.returns[:-1] - values
        active = advantages[self.active_masks[:-1] != 0.0]
        return (advantages - active.mean()) / (active.std() + 1e-5)

    def minibatches(self, advantages: np.ndarray, num_mini_batch: int) -> Iterator[MiniBatch]:
        """The rollout's ``T * N`` rows in ``num_mini_batch`` shuffled minibatches (torch's
        generator shuffles: ``torch.manual_seed`` fixes the order)."""
        rows = self.episode_length * self.env_num
        if num_mini_batch < 1 or num_mini_batch > rows:
            raise ValueError(
                f"num_mini_batch must be in [1, {rows}] (the rollout's T * N rows), got "
                f"{num_mini_batch}"
            )
        size = rows // num_mini_batch
        order = torch.randperm(rows).numpy()

        def flat(array: np.ndarray) -> np.ndarray:
            return array[: self.episode_length].reshape(rows, -1)

        columns = MiniBatch(
            flat(self.share_obs),
            flat(self.obs),
            flat(self.actions),
            flat(self.value_preds),
            flat(self.returns),
            flat(self.log_probs),
            flat(advantages),
            flat(self.active_masks),
        )
        for i in range(num_mini_batch):
            index = order[i * size : (i + 1) * size]
            yield MiniBatch(*(column[index] for column in columns))
