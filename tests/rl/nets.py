"""Small models and an agent shared by the RL tests."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import parl


class PolicyNet(parl.Model):
    """``obs (B, obs_dim) -> probabilities (B, act_dim)``; optional dropout and batch norm."""

    def __init__(
        self,
        obs_dim: int = 4,
        act_dim: int = 2,
        hidden: int = 8,
        dropout: float = 0.0,
        batch_norm: bool = False,
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(obs_dim, hidden)
        self.norm = nn.BatchNorm1d(hidden) if batch_norm else nn.Identity()
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        hidden = self.drop(torch.tanh(self.norm(self.fc1(obs))))
        return torch.softmax(self.fc2(hidden), dim=-1)


class PGAgent(parl.Agent):
    """numpy in, numpy out around PolicyGradient."""

    def predict(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.predict(self.to_tensor(obs)))

    def sample(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.sample(self.to_tensor(obs)))

    def learn(self, obs: np.ndarray, act: np.ndarray, reward: np.ndarray) -> float:
        loss = self.alg.learn(
            self.to_tensor(obs), self.to_tensor(act, dtype=None), self.to_tensor(reward)
        )
        return float(loss)
