"""MADDPG's model in PARL's shape: an actor of this agent's observation (logits, or ``(mean,
log_std)`` for continuous actions) and a critic of every agent's observations and actions."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import parl


def xavier_init(module: nn.Module) -> None:
    """PARL's initialisation: Xavier-uniform weights, zero biases."""
    if isinstance(module, nn.Linear):
        nn.init.xavier_uniform_(module.weight, gain=1)
        nn.init.constant_(module.bias, 0)


class ActorModel(parl.Model):
    def __init__(self, obs_dim: int, act_dim: int, continuous: bool, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(obs_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, act_dim)
        self.std_fc = nn.Linear(hidden, act_dim) if continuous else None
        self.apply(xavier_init)

    def forward(self, obs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        hidden = F.relu(self.fc2(F.relu(self.fc1(obs))))
        means = self.fc3(hidden)
        if self.std_fc is None:
            return means
        return means, self.std_fc(hidden)


class CriticModel(parl.Model):
    def __init__(self, critic_in_dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(critic_in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 1)
        self.apply(xavier_init)

    def forward(self, obs_n: list[torch.Tensor], act_n: list[torch.Tensor]) -> torch.Tensor:
        inputs = torch.cat(obs_n + act_n, dim=1)
        hidden = F.relu(self.fc2(F.relu(self.fc1(inputs))))
        return self.fc3(hidden).squeeze(1)


class MAModel(parl.Model):
    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        critic_in_dim: int,
        continuous_actions: bool = False,
        hidden: int = 64,
    ) -> None:
        super().__init__()
        self.actor_model = ActorModel(obs_dim, act_dim, continuous_actions, hidden)
        self.critic_model = CriticModel(critic_in_dim, hidden)

    def policy(self, obs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self.actor_model(obs)

    def value(self, obs_n: list[torch.Tensor], act_n: list[torch.Tensor]) -> torch.Tensor:
        return self.critic_model(obs_n, act_n)

    def get_actor_params(self):  # type: ignore[no-untyped-def]
        return self.actor_model.parameters()

    def get_critic_params(self):  # type: ignore[no-untyped-def]
        return self.critic_model.parameters()
