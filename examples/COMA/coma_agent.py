"""COMA's agent: sampling from the epsilon mixture over the available actions, and the actor's
and critic's inputs built from a batch of episodes, as PARL's COMA agent builds them."""

from __future__ import annotations

import numpy as np
import torch

import parl
from parl.algorithms.coma import exploration_probs
from parl.utils.reward_standardiser import (
    RewardStandardiser,
    load_standardiser_state,
    standardiser_state,
)


class ComaAgent(parl.Agent):
    def __init__(
        self,
        algorithm: parl.Algorithm,
        n_agents: int,
        n_actions: int,
        target_update_cycle: int,
        standardise_rewards: bool = False,
    ) -> None:
        super().__init__(algorithm)
        self.n_agents, self.n_actions = n_agents, n_actions
        # EPyMARL's reward standardisation over the real steps the updates have seen
        self.reward_stats = RewardStandardiser() if standardise_rewards else None
        self.target_update_cycle = target_update_cycle
        self.train_steps = 0
        self.rnn_h: torch.Tensor | None = None

    def init_hidden(self) -> None:
        """Zero the agents' hidden states at the start of an episode."""
        self.rnn_h = self.alg.init_hidden(1)[0]

    def actor_inputs(self, obs: np.ndarray, last_actions: np.ndarray) -> np.ndarray:
        """``(..., n_agents, obs_dim + n_actions + n_agents)``: observation, last action
        (one-hot; none before the first step: ``-1``), agent id."""
        last = np.zeros((*last_actions.shape, self.n_actions), np.float32)
        taken = last_actions >= 0
        last[taken, last_actions[taken]] = 1.0
        ids = np.broadcast_to(
            np.eye(self.n_agents, dtype=np.float32), (*obs.shape[:-1], self.n_agents)
        )
        return np.concatenate([obs, last, ids], axis=-1)

    def sample(
        self, obs: np.ndarray, last_actions: np.ndarray, avail: np.ndarray, epsilon: float,
        greedy: bool = False,
    ) -> np.ndarray:  # fmt: skip
        """Every agent's action: from ``(1 - eps) * pi + eps / n_available`` (torch's global
        generator, saved by training checkpoints), or the most probable one when ``greedy``."""
        inputs = self.to_tensor(self.actor_inputs(obs, last_actions))
        probs, self.rnn_h = self.alg.predict(inputs, self.rnn_h)
        probs = exploration_probs(probs, self.to_tensor(avail), 0.0 if greedy else epsilon)
        if greedy:
            return self.to_numpy(probs.argmax(dim=-1))
        return self.to_numpy(torch.multinomial(probs, 1).squeeze(-1))

    def critic_inputs(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``(o_a, s, u_-a, u_last, id)`` at each step and at the next one (zeros after the
        batch's end), ``(E, T, n_agents, dim)`` each."""
        obs, state = batch["o"], batch["s"]
        e, t, n, _ = obs.shape
        u_onehot = np.eye(self.n_actions, dtype=np.float32)[batch["u"][..., 0]]
        u_onehot *= 1.0 - batch["padded"][..., None]
        u_last = np.zeros_like(u_onehot)
        u_last[:, 1:] = u_onehot[:, :-1]
        others = np.repeat(u_onehot[:, :, None], n, axis=2)  # (E, T, agent, other, actions)
        others[:, :, np.arange(n), np.arange(n)] = 0.0
        inputs = np.concatenate(
            [
                obs,
                np.repeat(state[:, :, None], n, axis=2),
                others.reshape(e, t, n, -1),
                np.repeat(u_last.reshape(e, t, 1, -1), n, axis=2),
                np.broadcast_to(np.eye(n, dtype=np.float32), (e, t, n, n)),
            ],
            axis=-1,
        )
        inputs_next = np.zeros_like(inputs)
        inputs_next[:, :-1] = inputs[:, 1:]
        return inputs, inputs_next

    def learn(self, batch: dict[str, np.ndarray], epsilon: float) -> tuple[float, float]:
        """One COMA update on a batch of episodes (cut to the longest), the target critic
        copied every ``target_update_cycle`` updates; returns ``(critic_loss, actor_loss)``."""
        length = int((1.0 - batch["padded"][..., 0]).sum(axis=1).max())
        batch = {key: value[:, :length] for key, value in batch.items()}
        if self.reward_stats is not None:
            batch["r"] = self.reward_stats(batch["r"], real=batch["padded"] == 0)
        last = np.full_like(batch["u"][..., 0], -1)
        last[:, 1:] = batch["u"][:, :-1, :, 0]
        batch["actor_inputs"] = self.actor_inputs(batch["o"], last)
        batch["critic_inputs"], batch["critic_inputs_next"] = self.critic_inputs(batch)
        tensors = {key: self.to_tensor(value) for key, value in batch.items() if key != "u"}
        tensors["u"] = self.to_tensor(batch["u"], dtype=torch.long)
        critic_loss, actor_loss = self.alg.learn(tensors, epsilon)
        self.train_steps += 1
        if self.train_steps % self.target_update_cycle == 0:
            self.alg.sync_target()
        return float(critic_loss), float(actor_loss)

    def reward_stats_state(self) -> dict[str, float] | None:
        """The running reward statistics, for a training checkpoint."""
        return standardiser_state(self.reward_stats)

    def load_reward_stats_state(self, state: dict[str, float] | None) -> None:
        load_standardiser_state(self.reward_stats, state, "ComaAgent")
