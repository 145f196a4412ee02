"""CQL's model in PARL's shape: ``policy``, ``value``, ``get_actor_params``,
``get_critic_params``; three hidden layers of 256 as in PARL's CQL benchmark."""

from __future__ import annotations

import torch
from torch import nn

import parl

LOG_SIG_MAX = 2.0
LOG_SIG_MIN = -5.0


def mlp(inputs: int, outputs: int, hidden: int, layers: int = 3) -> nn.Sequential:
    sizes = [inputs] + [hidden] * layers
    body: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        body += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*body, nn.Linear(hidden, outputs))


class Actor(parl.Model):
    """``obs -> (mean, log_std)`` of the pre-tanh Gaussian, ``log_std`` clipped to [-5, 2]."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.net = mlp(obs_dim, 2 * action_dim, hidden)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        act_mean, act_log_std = self.net(obs).chunk(2, dim=-1)
        return act_mean, act_log_std.clamp(LOG_SIG_MIN, LOG_SIG_MAX)


class Critic(parl.Model):
    """Twin ``Q(obs, action)``, each ``(B, 1)``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.q1 = mlp(obs_dim + action_dim, 1, hidden)
        self.q2 = mlp(obs_dim + action_dim, 1, hidden)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=1)
        return self.q1(x), self.q2(x)


class MujocoModel(parl.Model):
    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.actor_model = Actor(obs_dim, action_dim, hidden)
        self.critic_model = Critic(obs_dim, action_dim, hidden)

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor_model(obs)

    def value(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.critic_model(obs, action)

    def get_actor_params(self):  # type: ignore[no-untyped-def]
        return self.actor_model.parameters()

    def get_critic_params(self):  # type: ignore[no-untyped-def]
        return self.critic_model.parameters()
