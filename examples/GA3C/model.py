"""GA3C models: ``policy``, ``value`` and ``policy_and_value`` (one pass), as ``parl.algorithms.A2C``
expects; GA3C trains with A3C's loss, which is A2C's."""

from __future__ import annotations

import torch
from torch import nn

import parl


def _mlp(inputs: int, outputs: int, hidden: int) -> nn.Sequential:
    """Two tanh layers of ``hidden`` units, then a linear output."""
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
        nn.Linear(hidden, outputs),
    )  # fmt: skip


class CartpoleModel(parl.Model):
    """Separate policy and value networks: a shared trunk lets the value's large gradients
    (returns up to 100) drown the policy's.

    The value network's output is multiplied by ``value_scale``. CartPole's discounted returns
    reach ``1 / (1 - gamma) = 100`` (everywhere on a balanced pole, since a time limit
    bootstraps), beyond what the last linear layer learns in a few hundred Adam steps of 1e-3:
    unscaled, the tanh units saturate to push the output up and the critic becomes a constant
    (about 54, the same for every state), leaving no baseline. With ``value_scale=10`` the
    network's output needs to reach only 10.
    """

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: int = 64, value_scale: float = 1.0
    ) -> None:
        super().__init__()
        self.policy_net = _mlp(obs_dim, act_dim, hidden)
        self.value_net = _mlp(obs_dim, 1, hidden)
        self.value_scale = value_scale

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy_net(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_net(obs).squeeze(-1) * self.value_scale

    def policy_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(obs), self.value(obs)


class AtariModel(parl.Model):
    """Four convolutions of 32 3 x 3 filters with stride 2 on ``(B, 4, dim, dim)`` uint8 frames
    (A3C's usual tower for 42 x 42 frames: 42 -> 21 -> 11 -> 6 -> 3, 288 features), one
    512-unit layer, then a policy head and a value head.

    The Nature-DQN tower without padding is made for 84 x 84 frames: on 42 x 42 its 8 x 8
    stride-4 first layer and the two after it leave a 1 x 1 map of 64 features. PARL's GA3C
    pads those convolutions instead (a 4 x 4 map at 42); this tower keeps more of the frame
    for less compute in its first layer.
    """

    def __init__(self, act_dim: int, dim: int = 42) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for channels_in in (4, 32, 32, 32):
            layers += [nn.Conv2d(channels_in, 32, 3, stride=2, padding=1), nn.ReLU()]
        convs = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():  # the flattened size depends on dim: 288 for 42, 1152 for 84
            features = convs(torch.zeros(1, 4, dim, dim)).shape[1]
        self.trunk = nn.Sequential(convs, nn.Linear(features, 512), nn.ReLU())
        self.policy_fc = nn.Linear(512, act_dim)
        self.value_fc = nn.Linear(512, 1)

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.trunk(obs / 255.0)

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy_fc(self._features(obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_fc(self._features(obs)).squeeze(-1)

    def policy_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self._features(obs)
        return self.policy_fc(features), self.value_fc(features).squeeze(-1)
