"""IQL's model in PARL's shape: ``value``, ``qvalue``, ``policy`` (a distribution) and the three
parameter getters; two hidden layers of 256 as in PARL's IQL benchmark."""

from __future__ import annotations

import torch
from torch import nn

import parl

LOG_SIG_MAX = 0.0
LOG_SIG_MIN = -6.0


def mlp(inputs: int, outputs: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, outputs),
    )  # fmt: skip


class Actor(parl.Model):
    """A Gaussian with a tanh mean and a learned, state-independent std in
    ``[exp(-6), exp(0)]``, as a ``MultivariateNormal``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.net = mlp(obs_dim, action_dim, hidden)
        self.log_std = nn.Parameter(torch.zeros(action_dim))

    def forward(self, obs: torch.Tensor) -> torch.distributions.MultivariateNormal:
        mean = torch.tanh(self.net(obs))
        log_std = LOG_SIG_MIN + torch.sigmoid(self.log_std) * (LOG_SIG_MAX - LOG_SIG_MIN)
        return torch.distributions.MultivariateNormal(mean, scale_tril=torch.diag(log_std.exp()))


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
        self.value_model = mlp(obs_dim, 1, hidden)

    def policy(self, obs: torch.Tensor) -> torch.distributions.MultivariateNormal:
        return self.actor_model(obs)

    def qvalue(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.critic_model(obs, action)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_model(obs)

    def get_actor_params(self):  # type: ignore[no-untyped-def]
        return self.actor_model.parameters()

    def get_critic_params(self):  # type: ignore[no-untyped-def]
        return self.critic_model.parameters()

    def get_value_params(self):  # type: ignore[no-untyped-def]
        return self.value_model.parameters()
