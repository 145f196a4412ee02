"""OAC's model in PARL's shape (the same as SAC's): ``policy``, ``value``,
``get_actor_params``, ``get_critic_params``; the twin critics are one stacked network."""

from __future__ import annotations

import torch
from torch import nn

import parl
from parl.algorithms.ensemble import TwinQNetwork

LOG_SIG_MAX = 2.0
LOG_SIG_MIN = -20.0


class Actor(parl.Model):
    """``obs -> (mean, log_std)`` of the pre-tanh Gaussian; one linear layer gives both."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.heads = nn.Linear(hidden, 2 * action_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        act_mean, act_log_std = self.heads(self.body(obs)).chunk(2, dim=-1)
        return act_mean, act_log_std.clamp(LOG_SIG_MIN, LOG_SIG_MAX)


class MujocoModel(parl.Model):
    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.actor_model = Actor(obs_dim, action_dim, hidden)
        self.critic_model = TwinQNetwork(obs_dim, action_dim, (hidden, hidden))

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor_model(obs)

    def value(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.critic_model.value(obs, action)

    def get_actor_params(self):  # type: ignore[no-untyped-def]
        return self.actor_model.parameters()

    def get_critic_params(self):  # type: ignore[no-untyped-def]
        return self.critic_model.parameters()
