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


class DiscreteActorCritic(parl.Model):
    """``obs (B, 4) -> logits (B, 3)`` and ``value (B,)``: the model IMPALA and A2C take."""

    def __init__(self) -> None:
        super().__init__()
        self.pi, self.v = nn.Linear(4, 3), nn.Linear(4, 1)

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(obs).squeeze(-1)

    def policy_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(obs), self.value(obs)


class GaussianActorCritic(DiscreteActorCritic):
    """``obs (B, 4) -> (mean (B, 3), std (1, 3))``, the std from a learnt ``log_std``."""

    def __init__(self, log_std: float = 0.0) -> None:
        super().__init__()
        self.log_std = nn.Parameter(torch.full((1, 3), log_std))

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        return self.pi(obs), self.log_std.exp()


def seeded_obs(n: int = 8) -> torch.Tensor:
    """``(n, 4)`` observations, the same at every call."""
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(0))


def state_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``model``'s state dict, to compare the weights with after a step."""
    return {k: v.clone() for k, v in model.state_dict().items()}
