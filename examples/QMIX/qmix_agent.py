"""QMIX's agent: epsilon-greedy acting over the available actions with the agents' hidden
states, episode batches to tensors (the team rewards standardised if asked), and the target
networks refreshed every few updates."""

from __future__ import annotations

import numpy as np
import torch

import parl
from parl.utils.reward_standardiser import (
    RewardStandardiser,
    load_standardiser_state,
    standardiser_state,
)


class QMixAgent(parl.Agent):
    def __init__(
        self,
        algorithm: parl.Algorithm,
        exploration_start: float,
        min_exploration: float,
        exploration_decay: float,
        update_target_interval: int,
        standardise_rewards: bool = False,
        exploration_draws: str = "team",
    ) -> None:
        super().__init__(algorithm)
        # EPyMARL's reward standardisation: the running mean and variance of the team rewards
        # the updates have seen (real steps only), and each update learns (r - mean) / std
        self.reward_stats = RewardStandardiser() if standardise_rewards else None
        self.exploration = exploration_start
        self.min_exploration = min_exploration
        self.exploration_decay = exploration_decay
        if exploration_draws not in ("team", "agent"):
            raise ValueError(
                f"exploration_draws must be 'team' or 'agent', got {exploration_draws!r}"
            )
        self.exploration_draws = exploration_draws
        self.update_target_interval = update_target_interval
        self.global_step = 0  # learn calls
        self.alg.sync_target()

    def reset_agent(self, batch_size: int = 1) -> None:
        """Zero the agents' hidden states at the start of an episode."""
        self.alg._init_hidden_states(batch_size)

    def predict(self, obs: np.ndarray, available_actions: np.ndarray) -> np.ndarray:
        """Greedy available actions ``(n_agents,)``, advancing the hidden states."""
        actions, self.alg.hidden_states = self.alg.predict(
            self.to_tensor(obs), self.to_tensor(available_actions), self.alg.hidden_states
        )
        return self.to_numpy(actions)

    def sample(self, obs: np.ndarray, available_actions: np.ndarray) -> np.ndarray:
        """Epsilon-greedy over the available actions, drawn from numpy's global generator (saved
        by training checkpoints): with ``exploration_draws="team"`` (PARL's agent) one draw
        sends every agent to a uniformly random available action at once; with ``"agent"``
        (PyMARL's and EPyMARL's selector) each agent draws for itself."""
        actions = self.predict(obs, available_actions)  # the hidden states always advance
        n_agents = len(actions)
        draws = np.random.random(1 if self.exploration_draws == "team" else n_agents)
        explore = np.broadcast_to(draws < self.exploration, (n_agents,))
        for i in np.flatnonzero(explore):
            actions[i] = np.random.choice(np.flatnonzero(available_actions[i]))
        self.exploration = max(self.min_exploration, self.exploration - self.exploration_decay)
        return actions

    def learn(self, batch: dict[str, np.ndarray]) -> tuple[float, float]:
        """One update on a batch of episodes; the target networks follow every
        ``update_target_interval`` updates. Returns ``(loss, mean_td_error)``."""
        self.global_step += 1
        if self.reward_stats is not None:
            reward = self.reward_stats(batch["reward"], real=batch["filled"] == 0)
            batch = dict(batch, reward=reward)
        tensors = {key: self.to_tensor(value) for key, value in batch.items()}
        tensors["actions"] = self.to_tensor(batch["actions"], dtype=torch.long)
        loss, td_error = self.alg.learn(
            tensors["state"], tensors["actions"], tensors["reward"],
            tensors["terminated"], tensors["obs"], tensors["available_actions"],
            tensors["filled"],
        )  # fmt: skip
        if self.global_step % self.update_target_interval == 0:
            self.alg.sync_target()
        return loss, td_error

    def reward_stats_state(self) -> dict[str, float] | None:
        """The running reward statistics, for a training checkpoint."""
        return standardiser_state(self.reward_stats)

    def load_reward_stats_state(self, state: dict[str, float] | None) -> None:
        load_standardiser_state(self.reward_stats, state, "QMixAgent")
