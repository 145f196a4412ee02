"""The agent of the AlphaZero example: numpy boards in, move probabilities and values out; it
owns the optimizer and trains on a window of self-play examples."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from connect4 import ACTIONS, COLUMNS, ROWS
from model import Connect4Model

import parl
from parl.algorithms import AlphaZero
from parl.validation import check_float, check_int


class Examples(NamedTuple):
    """Training examples: ``boards (N, 6, 7)`` int8 canonical boards, ``pis (N, 7)`` the
    search's visit distributions, ``vs (N,)`` the games' outcomes for the player to move."""

    boards: np.ndarray
    pis: np.ndarray
    vs: np.ndarray

    @staticmethod
    def empty() -> Examples:
        return Examples(np.zeros((0, ROWS, COLUMNS), np.int8),
                        np.zeros((0, ACTIONS), np.float32), np.zeros(0, np.float32))  # fmt: skip

    @staticmethod
    def concatenate(parts: list[Examples]) -> Examples:
        if not parts:
            return Examples.empty()
        return Examples(*(np.concatenate(column) for column in zip(*parts, strict=True)))


class AlphaZeroAgent(parl.Agent):
    """Feeds ``parl.algorithms.AlphaZero`` and keeps its Adam optimizer across iterations.

    Args:
        algorithm: a ``parl.algorithms.AlphaZero``.
        lr: Adam's learning rate (PARL: 1e-3).
        weight_decay: L2 penalty on the weights, the paper's ``c ||theta||^2`` (PARL: none).
    """

    def __init__(self, algorithm: AlphaZero, lr: float = 1e-3, weight_decay: float = 1e-4) -> None:
        super().__init__(algorithm)
        lr = check_float("lr", lr, low=0.0, low_open=True, owner="AlphaZeroAgent")
        weight_decay = check_float("weight_decay", weight_decay, low=0.0, owner="AlphaZeroAgent")
        self.optimizer = torch.optim.Adam(
            self.alg.model.parameters(), lr=lr, weight_decay=weight_decay
        )

    def learn(
        self, examples: Examples, epochs: int, batch_size: int, rng: np.random.Generator
    ) -> tuple[float, float, float]:
        """``epochs`` passes over ``examples`` in shuffled minibatches of ``batch_size`` (the last
        partial one dropped); the mean ``(total_loss, pi_loss, v_loss)`` of the last pass, or
        three NaNs when ``examples`` hold less than one batch and nothing was learned."""
        epochs = check_int("epochs", epochs, low=1, owner="AlphaZeroAgent.learn")
        batch_size = check_int("batch_size", batch_size, low=1, owner="AlphaZeroAgent.learn")
        batches = len(examples.vs) // batch_size
        if batches == 0:
            return float("nan"), float("nan"), float("nan")
        losses = np.zeros((batches, 3))
        for _ in range(epochs):
            order = rng.permutation(len(examples.vs))
            for b in range(batches):
                rows = order[b * batch_size : (b + 1) * batch_size]
                loss = self.alg.learn(
                    self.to_tensor(examples.boards[rows]),
                    self.to_tensor(examples.pis[rows]),
                    self.to_tensor(examples.vs[rows]),
                    self.optimizer,
                )
                losses[b] = [float(part) for part in loss]
        total, pi, v = losses.mean(axis=0)
        return float(total), float(pi), float(v)

    def predict(self, boards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Move probabilities ``(B, 7)`` and values ``(B,)`` of canonical boards ``(B, 6, 7)``:
        the evaluator the search calls."""
        pi, v = self.alg.predict(self.to_tensor(boards))
        return self.to_numpy(pi), self.to_numpy(v).reshape(-1)


def build_agent(
    channels: int, blocks: int, lr: float, weight_decay: float, device: str = "cpu"
) -> AlphaZeroAgent:
    return AlphaZeroAgent(
        AlphaZero(Connect4Model(channels, blocks), device=device), lr, weight_decay
    )
