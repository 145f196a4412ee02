"""The regression network of PARL's MAML++ benchmark: an MLP (1-40-40-40-1 by default) whose
forward pass can run with weights other than its own, the adapted weights of a task."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import parl


class MAMLModel(parl.Model):
    """A ReLU MLP with a weight and a bias per layer, Kaiming-normal weights and zero biases.

    Args:
        network_dims: the width of each layer, input first: ``[1, 40, 40, 40, 1]``.
        device: where the parameters live.
    """

    def __init__(self, network_dims: Sequence[int], device: torch.device | str = "cpu") -> None:
        super().__init__()
        if len(network_dims) < 2:
            raise ValueError(
                f"network_dims needs an input and an output width at least, got {network_dims}"
            )
        self.network_dims = list(network_dims)
        self.num_layers = len(network_dims) - 1
        self.params = nn.ParameterList()
        for fan_in, fan_out in zip(network_dims[:-1], network_dims[1:], strict=True):
            weight = nn.Parameter(torch.empty(fan_out, fan_in, device=device))
            nn.init.kaiming_normal_(weight)
            self.params.append(weight)
            self.params.append(nn.Parameter(torch.zeros(fan_out, device=device)))

    def forward(
        self, x: torch.Tensor, params: Sequence[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """The network's output for ``x`` ``(N, in_dim)``, with ``params`` (a task's adapted
        weights, in ``get_weights()``'s order) in place of the model's own when given.

        Args:
            x: inputs, ``(N, in_dim)``.
            params: weights to use instead of the model's own.
        """
        weights = list(self.params) if params is None else list(params)
        for layer in range(self.num_layers):
            x = F.linear(x, weights[2 * layer], weights[2 * layer + 1])
            if layer < self.num_layers - 1:
                x = F.relu(x)
        return x

    def get_weights(self) -> list[nn.Parameter]:  # type: ignore[override]
        """The live parameters ``[w_0, b_0, w_1, b_1, ...]`` that MAML adapts and meta-learns
        (PARL's MAML model contract; ``parl.Model.get_weights`` returns numpy copies by name)."""
        return list(self.params)

    def set_weights(self, weights: Sequence[Any]) -> None:  # type: ignore[override]
        """Copy ``weights`` (tensors or arrays, in ``get_weights()``'s order) into the
        parameters in place, so that an optimizer holding them keeps training them.

        Args:
            weights: one tensor or array per parameter, same shapes.
        """
        if len(weights) != len(self.params):
            raise ValueError(
                f"set_weights needs {len(self.params)} tensors, one per parameter, got "
                f"{len(weights)}"
            )
        with torch.no_grad():
            for param, value in zip(self.params, weights, strict=True):
                param.copy_(torch.as_tensor(value))
