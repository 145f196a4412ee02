"""The policy-value network of the AlphaZero example: a small residual tower over the board.

Input: canonical boards ``(B, 6, 7)`` (+1 the player to move, -1 the opponent, 0 empty), split
into two planes of stones. Output: ``(log_pi, v)``, the log-probabilities of the seven columns
``(B, 7)`` and the value for the player to move ``(B, 1)`` in ``[-1, 1]``, the contract of
``parl.algorithms.AlphaZero`` (PARL's ``Connect4Model`` returns the same two).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from connect4 import ACTIONS, COLUMNS, ROWS
from torch import nn

import parl


class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with batch normalisation and a skip connection (AlphaZero's)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


class Connect4Model(parl.Model):
    """A stem convolution, ``blocks`` residual blocks of ``channels`` channels, and AlphaZero's
    two heads (a 1x1 convolution each, then fully connected layers).

    Args:
        channels: width of the tower (PARL's network: 64, four plain convolutions).
        blocks: residual blocks.
    """

    def __init__(self, channels: int = 32, blocks: int = 2) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(2, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU()
        )
        self.tower = nn.Sequential(*(ResidualBlock(channels) for _ in range(blocks)))
        cells = ROWS * COLUMNS
        self.policy_conv = nn.Sequential(nn.Conv2d(channels, 2, 1), nn.BatchNorm2d(2), nn.ReLU())
        self.policy_fc = nn.Linear(2 * cells, ACTIONS)
        self.value_conv = nn.Sequential(nn.Conv2d(channels, 1, 1), nn.BatchNorm2d(1), nn.ReLU())
        self.value_fc = nn.Sequential(nn.Linear(cells, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, 6, 7)`` canonical boards -> ``log_pi (B, 7)``, ``v (B, 1)``."""
        boards = boards.reshape(-1, ROWS, COLUMNS)
        planes = torch.stack([(boards > 0).float(), (boards < 0).float()], dim=1)
        x = self.tower(self.stem(planes))
        logits = self.policy_fc(self.policy_conv(x).flatten(1))
        v = torch.tanh(self.value_fc(self.value_conv(x).flatten(1)))
        return F.log_softmax(logits, dim=1), v
