"""A2C models: ``policy``, ``value`` and ``policy_and_value`` (one pass) as PARL's A2C expects."""

from __future__ import annotations

import torch
from torch import nn

import parl
from parl.utils import ObsNormalizer


def _mlp(inputs: int, outputs: int, hidden: int) -> nn.Sequential:
    """Two tanh layers of ``hidden`` units, then a linear output."""
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
        nn.Linear(hidden, outputs),
    )  # fmt: skip


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
        self.policy_net = _mlp(obs_dim, act_dim, hidden)
        self.value_net = _mlp(obs_dim, 1, hidden)

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy_net(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_net(obs).squeeze(-1)

    def policy_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(obs), self.value(obs)


class AtariModel(_ActorCritic):
    """Nature-DQN trunk on ``(B, 4, 84, 84)`` frames."""

    def __init__(self, act_dim: int) -> None:
        super().__init__(512, act_dim)
        self.trunk = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, 512),
            nn.ReLU(),
        )

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.trunk(obs / 255.0)


class MujocoModel(parl.Model):
    """A Gaussian policy for continuous control: separate 64-64 tanh networks for the mean and the
    value, a state-independent log-std, and the observations normalised inside the model
    (``obs_norm``: the learner updates its statistics, the actors get them with the weights)."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: int = 64, log_std_init: float = -0.5
    ) -> None:
        super().__init__()
        self.obs_norm = ObsNormalizer(obs_dim)
        self.mean_net = _mlp(obs_dim, act_dim, hidden)
        self.value_net = _mlp(obs_dim, 1, hidden)
        with torch.no_grad():  # small initial means: the first actions stay near 0
            self.mean_net[-1].weight.mul_(0.01)
            self.mean_net[-1].bias.zero_()
        self.log_std = nn.Parameter(torch.full((1, act_dim), float(log_std_init)))

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean_net(self.obs_norm(obs)), self.log_std.exp()

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_net(self.obs_norm(obs)).squeeze(-1)

    def policy_and_value(
        self, obs: torch.Tensor
    ) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        x = self.obs_norm(obs)
        return (self.mean_net(x), self.log_std.exp()), self.value_net(x).squeeze(-1)
