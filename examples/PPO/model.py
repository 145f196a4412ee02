"""Actor-critic networks for PPO: ``value(obs)`` and ``policy(obs)`` as ``parl.algorithms.PPO``
expects. Separate actor and critic MLPs with orthogonal initialisation (the choice of openai
baselines, CleanRL and SB3); a shared convolutional trunk for Atari."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

import parl

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def _layer(layer: nn.Linear | nn.Conv2d, gain: float) -> nn.Linear | nn.Conv2d:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _mlp(sizes: Sequence[int], out: int, out_gain: float, activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [_layer(nn.Linear(fan_in, fan_out), np.sqrt(2)), _ACTIVATIONS[activation]()]
    layers.append(_layer(nn.Linear(sizes[-1], out), out_gain))
    return nn.Sequential(*layers)


class MLPModel(parl.Model):
    """``policy(obs)``: logits ``(B, act_dim)``, or ``(mean, std)`` when ``continuous``."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        continuous: bool = False,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
    ) -> None:
        super().__init__()
        sizes = [obs_dim, *hidden_sizes]
        self.continuous = continuous
        self.actor = _mlp(sizes, act_dim, 0.01, activation)
        self.critic = _mlp(sizes, 1, 1.0, activation)
        if continuous:
            self.log_std = nn.Parameter(torch.full((1, act_dim), float(log_std_init)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs)

    def policy(self, obs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        out = self.actor(obs)
        if self.continuous:
            return out, self.log_std.exp()
        return out


class AtariModel(parl.Model):
    """Nature-DQN trunk on ``(B, 4, 84, 84)`` uint8 frames, a policy and a value head."""

    def __init__(self, act_dim: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            _layer(nn.Conv2d(4, 32, 8, stride=4), np.sqrt(2)),
            nn.ReLU(),
            _layer(nn.Conv2d(32, 64, 4, stride=2), np.sqrt(2)),
            nn.ReLU(),
            _layer(nn.Conv2d(64, 64, 3, stride=1), np.sqrt(2)),
            nn.ReLU(),
            nn.Flatten(),
            _layer(nn.Linear(64 * 7 * 7, 512), np.sqrt(2)),
            nn.ReLU(),
        )
        self.pi = _layer(nn.Linear(512, act_dim), 0.01)
        self.v = _layer(nn.Linear(512, 1), 1.0)

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.trunk(obs / 255.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(self._features(obs))

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(self._features(obs))
