"""IMPALA models: ``policy`` (logits), ``value`` and ``policy_and_value`` (one pass for both)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import parl


class _ActorCritic(parl.Model):
    trunk: nn.Module

    def __init__(self, features: int, act_dim: int) -> None:
        super().__init__()
        self.policy_fc = nn.Linear(features, act_dim)
        self.value_fc = nn.Linear(features, 1)

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.trunk(obs)

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy_fc(self._features(obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_fc(self._features(obs)).squeeze(-1)

    def policy_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self._features(obs)
        return self.policy_fc(features), self.value_fc(features).squeeze(-1)


class CartpoleModel(parl.Model):
    """Separate policy and value networks: on CartPole a shared trunk lets the large value
    gradients (returns up to 100) drown the policy's."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.policy_net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, act_dim),
        )  # fmt: skip
        self.value_net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, 1),
        )  # fmt: skip

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy_net(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_net(obs).squeeze(-1)

    def policy_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(obs), self.value(obs)


class AtariModel(_ActorCritic):
    """A small network for ``(N, 4, dim, dim)`` uint8 frames (42 or 84 pixels): three strided
    convolutions and a 256-unit layer shared by the policy and value heads (PARL's has three
    convolutions down to 256 features too, with other kernel sizes)."""

    def __init__(self, act_dim: int, dim: int = 42) -> None:
        convs = nn.Sequential(
            nn.Conv2d(4, 32, 5, stride=2, padding=2),
            nn.ReLU(),
            nn.Conv2d(32, 32, 5, stride=2, padding=2),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = convs(torch.zeros(1, 4, dim, dim)).shape[1]
        super().__init__(256, act_dim)
        self.trunk = nn.Sequential(convs, nn.Linear(flat, 256), nn.ReLU())

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.trunk(obs.float() / 255.0)


def build_model(config: dict[str, Any], obs_shape: tuple[int, ...], act_dim: int) -> parl.Model:
    if config["env_name"].startswith("CartPole"):
        return CartpoleModel(int(obs_shape[0]), act_dim)
    return AtariModel(act_dim, config.get("env_dim", 42))
