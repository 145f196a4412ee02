"""COMA's model: the agents' shared recurrent actor and the centralised critic that gives
``Q(s, (u_-a, u'))`` for every action ``u'`` of one agent at once."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import parl


class ActorModel(parl.Model):
    """``(inputs (B, input_dim), hidden) -> (logits (B, n_actions), hidden (B, H))``."""

    def __init__(self, input_dim: int, n_actions: int, hidden_dim: int = 64) -> None:
        super().__init__()
        self.hidden_dim = hidden_dim
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.rnn = nn.GRUCell(hidden_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, n_actions)

    def init_hidden(self) -> torch.Tensor:
        """A zero hidden state ``(1, H)`` on the model's device."""
        return self.fc1.weight.new_zeros(1, self.hidden_dim)

    def forward(
        self, inputs: torch.Tensor, hidden_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.rnn(F.relu(self.fc1(inputs)), hidden_state.reshape(-1, self.hidden_dim))
        return self.fc2(hidden), hidden


class CriticModel(parl.Model):
    """``critic inputs (B, input_dim) -> Q (B, n_actions)``."""

    def __init__(self, input_dim: int, n_actions: int, hidden_dim: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(input_dim, hidden_dim), nn.ReLU(),
            nn.Linear(hidden_dim, hidden_dim), nn.ReLU(),
            nn.Linear(hidden_dim, n_actions),
        )  # fmt: skip

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.net(inputs)


class ComaModel(parl.Model):
    """Actor inputs: observation, last action and id (one-hot). Critic inputs: the agent's
    observation, the state, the other agents' actions, every agent's last action and the id."""

    def __init__(self, obs_dim: int, state_dim: int, n_agents: int, n_actions: int) -> None:
        super().__init__()
        self.actor_model = ActorModel(obs_dim + n_actions + n_agents, n_actions)
        critic_dim = obs_dim + state_dim + 2 * n_agents * n_actions + n_agents
        self.critic_model = CriticModel(critic_dim, n_actions)

    def policy(
        self, inputs: torch.Tensor, hidden_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor_model(inputs, hidden_state)

    def value(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.critic_model(inputs)

    def get_actor_params(self) -> list[nn.Parameter]:
        return list(self.actor_model.parameters())

    def get_critic_params(self) -> list[nn.Parameter]:
        return list(self.critic_model.parameters())
