"""Several MLPs of the same shape evaluated as one: the twin critics of TD3 and SAC.

Two separate 256x256 critics cost two sets of small matrix products, activations, backward
kernels and optimizer tensors per update. Stacking their weights, ``(members, in, out)``, turns
each layer of all members into one batched matrix product (``torch.baddbmm``), so an update runs
half as many kernels with the same arithmetic. Each member is initialised exactly as an
``nn.Linear`` would be, so the stacked network is the same model as separate ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from parl.core.model import Model

__all__ = ["EnsembleLinear", "EnsembleMLP", "TwinQNetwork"]


class EnsembleLinear(nn.Module):
    """``members`` independent linear layers: ``(members, B, in) -> (members, B, out)``.

    An input of shape ``(B, in)`` is shared by every member. ``weight`` is ``(members, in,
    out)`` (already transposed for ``baddbmm``), ``bias`` ``(members, 1, out)``.
    """

    def __init__(self, members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        if members < 1 or in_features < 1 or out_features < 1:
            raise ValueError(
                f"EnsembleLinear needs members, in_features and out_features >= 1, got "
                f"{members}, {in_features}, {out_features}"
            )
        self.members, self.in_features, self.out_features = members, in_features, out_features
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(members, 1, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Linear``'s default: weight and bias uniform in ``+-1/sqrt(in_features)``
        (kaiming_uniform with ``a=sqrt(5)`` reduces to exactly this bound)."""
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            self.bias.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.members, -1, -1)
        return torch.baddbmm(self.bias, x, self.weight)

    def member_forward(self, x: torch.Tensor, member: int) -> torch.Tensor:
        """Member ``member`` alone on ``x (B, in)``: ``(B, out)``."""
        return torch.addmm(self.bias[member], x, self.weight[member])

    def extra_repr(self) -> str:
        return f"members={self.members}, in={self.in_features}, out={self.out_features}"


class EnsembleMLP(Model):
    """``members`` MLPs ``in -> hidden... -> out`` with ReLU between layers, run together.

    ``forward(x)`` maps ``(B, in)`` (shared) or ``(members, B, in)`` to ``(members, B, out)``;
    ``member_forward(x, i)`` runs member ``i`` alone.
    """

    def __init__(
        self, members: int, in_dim: int, out_dim: int, hidden_sizes: Sequence[int] = (256, 256)
    ) -> None:
        super().__init__()
        sizes = [in_dim, *hidden_sizes, out_dim]
        self.layers = nn.ModuleList(
            EnsembleLinear(members, sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < last:
                x = torch.relu(x)
        return x

    def member_forward(self, x: torch.Tensor, member: int) -> torch.Tensor:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer.member_forward(x, member)  # type: ignore[operator]
            if i < last:
                x = torch.relu(x)
        return x


class TwinQNetwork(Model):
    """The two critics ``Q1(s, a)``, ``Q2(s, a)`` of TD3 and SAC as one stacked network.

    ``forward(obs, action)`` returns ``(2, B, 1)``; ``value(obs, action)`` returns PARL's pair
    ``(q1, q2)``, each ``(B, 1)``; ``Q1(obs, action)`` runs the first critic alone (TD3's
    actor loss).
    """

    def __init__(
        self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int] = (256, 256)
    ) -> None:
        super().__init__()
        self.net = EnsembleMLP(2, obs_dim + act_dim, 1, hidden_sizes)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], dim=-1))

    def value(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.forward(obs, action)
        return q[0], q[1]

    def Q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:  # PARL's name
        return self.net.member_forward(torch.cat([obs, action], dim=-1), 0)
