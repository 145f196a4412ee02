"""Q networks of the DQN example: an MLP for vector observations (CartPole) and the Nature CNN
for Atari frames; both optionally dueling (Wang et al. 2016)."""

from __future__ import annotations

import torch
from torch import nn

import parl


class QHead(nn.Module):
    """``features -> Q``; dueling: ``V + A - mean(A)`` from two heads."""

    def __init__(self, in_dim: int, act_dim: int, dueling: bool) -> None:
        super().__init__()
        self.advantage = nn.Linear(in_dim, act_dim)
        self.value = nn.Linear(in_dim, 1) if dueling else None

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        advantage = self.advantage(features)
        if self.value is None:
            return advantage
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)


class CartpoleModel(parl.Model):
    """``obs (B, obs_dim) -> Q (B, act_dim)`` through two ReLU layers (rl-zoo: 256x256)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 256, dueling: bool = False):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.head = QHead(hidden, act_dim, dueling)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(obs))


class AtariModel(parl.Model):
    """Nature DQN: uint8 frames ``(B, 84, 84, 4)`` (NHWC, as ``wrap_deepmind`` gives) -> Q."""

    def __init__(self, act_dim: int, dueling: bool = False) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(),
        )
        self.head = QHead(512, act_dim, dueling)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        frames = obs.permute(0, 3, 1, 2).float() / 255.0
        return self.head(self.conv(frames))
