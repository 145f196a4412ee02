"""The policy network of the QuickStart: a small MLP from observation to action probabilities."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import parl


class CartpoleModel(parl.Model):
    """``obs (B, obs_dim) -> action probabilities (B, act_dim)``.

    Args:
        obs_dim: size of the observation (4 for CartPole).
        act_dim: number of discrete actions (2 for CartPole).
        hidden_size: width of the hidden layer.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden_size: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(obs_dim, hidden_size)
        self.fc2 = nn.Linear(hidden_size, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.fc1(obs))
        return F.softmax(self.fc2(hidden), dim=-1)
