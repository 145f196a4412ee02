"""TD3's model in PARL's shape: ``policy``, ``value``, ``Q1``, ``get_actor_params``,
``get_critic_params``; the twin critics are one stacked network (``TwinQNetwork``)."""

from __future__ import annotations

import torch
from torch import nn

import parl
from parl.algorithms.ensemble import TwinQNetwork


class MujocoModel(parl.Model):
    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.actor_model = nn.Sequential(
            nn.Linear(obs_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_dim),
            nn.Tanh(),
        )
        self.critic_model = TwinQNetwork(obs_dim, action_dim, (hidden, hidden))

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor_model(obs)

    def value(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.critic_model.value(obs, action)

    def Q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:  # PARL's name
        return self.critic_model.Q1(obs, action)

    def get_actor_params(self):  # type: ignore[no-untyped-def]
        return self.actor_model.parameters()

    def get_critic_params(self):  # type: ignore[no-untyped-def]
        return self.critic_model.parameters()
