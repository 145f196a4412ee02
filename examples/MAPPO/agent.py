"""``MAPPOAgent``: numpy in and out around one agent's ``parl.algorithms.MAPPO``, and the
epochs of minibatch updates over that agent's rollout."""

from __future__ import annotations

import numpy as np
import torch
from buffer import AgentBuffer

import parl
from parl.algorithms import MAPPO


class MAPPOAgent(parl.Agent):
    """One agent of the team.

    Args:
        algorithm: the agent's MAPPO.
        ppo_epoch: passes over a rollout per update.
        num_mini_batch: minibatches per pass.
    """

    alg: MAPPO

    def __init__(self, algorithm: MAPPO, ppo_epoch: int = 15, num_mini_batch: int = 1) -> None:
        super().__init__(algorithm)
        self.ppo_epoch = ppo_epoch
        self.num_mini_batch = num_mini_batch
        self.value_normalizer = algorithm.value_normalizer

    def sample(
        self, share_obs: np.ndarray, obs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(values (N, 1), actions, log_probs)`` for the N envs' observations of this agent."""
        values, actions, log_probs = self.alg.sample(self.to_tensor(share_obs), self.to_tensor(obs))
        return self.to_numpy(values), self.to_numpy(actions), self.to_numpy(log_probs)

    def predict(self, obs: np.ndarray) -> np.ndarray:
        """Greedy actions for a batch of observations."""
        return self.to_numpy(self.alg.predict(self.to_tensor(obs)))

    def value(self, share_obs: np.ndarray) -> np.ndarray:
        """``V(share_obs) (N, 1)`` in the critic's scale."""
        return self.to_numpy(self.alg.value(self.to_tensor(share_obs)))

    def learn(self, buffer: AgentBuffer) -> dict[str, float]:
        """``ppo_epoch`` passes of ``num_mini_batch`` updates over ``buffer``; returns the mean
        ``value_loss``, ``policy_loss`` and ``dist_entropy``."""
        advantages = buffer.advantages(self.value_normalizer)
        totals = torch.zeros(3)
        for _ in range(self.ppo_epoch):
            for batch in buffer.minibatches(advantages, self.num_mini_batch):
                result = self.alg.learn(*(self.to_tensor(column) for column in batch))
                totals += torch.stack(result).cpu()
        totals /= self.ppo_epoch * self.num_mini_batch
        return dict(
            zip(("value_loss", "policy_loss", "dist_entropy"), totals.tolist(), strict=True)
        )
