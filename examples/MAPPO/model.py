"""``MAPPOModel``: one agent's actor (its own observation -> action distribution) and
centralised critic (every agent's observation -> a value), the networks of the MAPPO paper's
particle-world runs: two tanh layers of 64 units, each input layer-normalised."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import parl


def _trunk(in_dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.LayerNorm(in_dim),
        nn.Linear(in_dim, hidden),
        nn.Tanh(),
        nn.LayerNorm(hidden),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
    )


class Actor(parl.Model):
    """Logits ``(B, n)`` for a discrete action, a list of them for a multi-discrete one
    (``act_dim`` a list), or ``(mean, std)`` for a continuous one of ``act_dim`` dimensions."""

    def __init__(
        self, obs_dim: int, act_dim: int | list[int], continuous: bool = False, hidden: int = 64
    ) -> None:
        super().__init__()
        self.multi_discrete = isinstance(act_dim, list)
        self.trunk = _trunk(obs_dim, hidden)
        dims = act_dim if isinstance(act_dim, list) else [act_dim]
        self.heads = nn.ModuleList(nn.Linear(hidden, n) for n in dims)
        self.log_std = nn.Parameter(torch.zeros(dims[0])) if continuous else None

    def forward(self, obs: torch.Tensor) -> Any:
        x = self.trunk(obs)
        if self.log_std is not None:
            mean = torch.tanh(self.heads[0](x))  # actions live in [-1, 1]
            return mean, self.log_std.exp().expand_as(mean)
        logits = [head(x) for head in self.heads]
        return logits if self.multi_discrete else logits[0]


class Critic(parl.Model):
    """``V(cent_obs) (B, 1)``; ``v_out`` is the layer PopArt rescales."""

    def __init__(self, cent_obs_dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.trunk = _trunk(cent_obs_dim, hidden)
        self.v_out = nn.Linear(hidden, 1)

    def forward(self, cent_obs: torch.Tensor) -> torch.Tensor:
        return self.v_out(self.trunk(cent_obs))


class MAPPOModel(parl.Model):
    """One agent's ``actor`` and ``critic``, with PARL's ``policy`` and ``value``.

    Args:
        obs_dim: the agent's observation size.
        cent_obs_dim: the critic's input size (all agents' observations together).
        act_dim: the number of actions, a list of them (multi-discrete), or the dimensions of a
            continuous action.
        continuous: a Gaussian policy.
        hidden: units per hidden layer.
    """

    def __init__(
        self,
        obs_dim: int,
        cent_obs_dim: int,
        act_dim: int | list[int],
        continuous: bool = False,
        hidden: int = 64,
    ) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.actor = Actor(obs_dim, act_dim, continuous, hidden)
        self.critic = Critic(cent_obs_dim, hidden)

    def policy(self, obs: torch.Tensor) -> Any:
        return self.actor(obs)

    def value(self, cent_obs: torch.Tensor) -> torch.Tensor:
        return self.critic(cent_obs)
