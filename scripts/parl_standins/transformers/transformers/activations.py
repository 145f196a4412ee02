"""``ACT2FN``: activation modules by the names GPT-2's configuration uses."""

from __future__ import annotations

import math

import torch
from torch import nn


class NewGELU(nn.Module):
    """GPT-2's tanh approximation of GELU (``"gelu_new"``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


ACT2FN = {
    "relu": nn.ReLU(),
    "gelu": nn.GELU(),
    "gelu_new": NewGELU(),
    "tanh": nn.Tanh(),
    "sigmoid": nn.Sigmoid(),
    "silu": nn.SiLU(),
    "swish": nn.SiLU(),
    "linear": nn.Identity(),
}
