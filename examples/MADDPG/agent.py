"""MADDPG's agent: one per env agent, each with its own replay memory. Its ``learn`` draws the
same transitions from every agent's memory and computes the critic's target with every agent's
target policy, as PARL's MADDPG agent does."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

import parl
from parl.utils import ReplayMemory


class MAAgent(parl.Agent):
    def __init__(
        self,
        algorithm: parl.Algorithm,
        agent_index: int,
        obs_dim_n: Sequence[int],
        act_dim_n: Sequence[int],
        batch_size: int,
        memory_size: int = int(1e5),
        learn_every: int = 100,
        warmup_size: int | None = None,
    ) -> None:
        super().__init__(algorithm)
        self.agent_index = agent_index
        self.batch_size = batch_size
        self.learn_every = learn_every
        # PARL learns once the memory holds more than batch_size * 25 transitions
        self.warmup_size = batch_size * 25 if warmup_size is None else warmup_size
        self.rpm = ReplayMemory(
            max_size=memory_size, obs_dim=obs_dim_n[agent_index], act_dim=act_dim_n[agent_index]
        )
        self.global_train_step = 0
        self.alg.sync_target(decay=0)

    def predict(self, obs: np.ndarray) -> np.ndarray:
        """The greedy action: action probabilities (the env takes their argmax) or ``tanh(mean)``."""
        return self.to_numpy(self.alg.predict(self.to_tensor(obs.reshape(1, -1))))[0]

    def sample(self, obs: np.ndarray) -> np.ndarray:
        """An exploring action (Gumbel-softmax, or a squashed Gaussian draw)."""
        with torch.no_grad():
            action = self.alg.sample(self.to_tensor(obs.reshape(1, -1)))
        return self.to_numpy(action)[0]

    def add_experience(self, obs, act, reward, next_obs, terminal) -> None:  # type: ignore[no-untyped-def]
        self.rpm.append(obs, act, reward, next_obs, terminal)

    def learn(self, agents: Sequence[MAAgent]) -> float | None:
        """Called once per env step: every ``learn_every`` steps past the warm-up, one update of
        this agent on a batch drawn from every agent's memory; returns the critic loss, or
        ``None`` when it did not learn."""
        self.global_train_step += 1
        if self.global_train_step % self.learn_every != 0 or self.rpm.size() <= self.warmup_size:
            return None
        index = self.rpm.make_index(self.batch_size)
        batches = [agent.rpm.sample_batch_by_index(index) for agent in agents]
        obs_n = [self.to_tensor(batch.obs) for batch in batches]
        act_n = [self.to_tensor(batch.action) for batch in batches]
        next_obs_n = [self.to_tensor(batch.next_obs) for batch in batches]
        own = batches[self.agent_index]
        reward, terminal = self.to_tensor(own.reward), self.to_tensor(own.terminal)
        with torch.no_grad():
            next_act_n = [
                agent.alg.sample(next_obs, use_target_model=True)
                for agent, next_obs in zip(agents, next_obs_n, strict=True)
            ]
            next_q = self.alg.Q(next_obs_n, next_act_n, use_target_model=True)
            target_q = reward + self.alg.gamma * (1.0 - terminal) * next_q
        return float(self.alg.learn(obs_n, act_n, target_q))
