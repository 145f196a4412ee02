"""ES policies: PARL's MuJoCo MLP (tanh actions) and a small CartPole MLP (logits)."""

from __future__ import annotations

import torch
from torch import nn

import parl


class MujocoModel(parl.Model):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, act_dim), nn.Tanh(),
        )  # fmt: skip

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class CartpoleModel(parl.Model):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, act_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)
