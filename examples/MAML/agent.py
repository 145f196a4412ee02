"""The agent of the MAML example: numpy batches of tasks in, losses out."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

import parl


class MAMLAgent(parl.Agent):
    """Feeds batches of tasks to ``parl.algorithms.MAML`` and scores it on held-out tasks.

    Args:
        algorithm: a ``parl.algorithms.MAML``.
    """

    def __init__(self, algorithm: Any) -> None:
        super().__init__(algorithm)

    def learn(self, data_batch: tuple[np.ndarray, ...], current_epoch: int) -> float:
        """One meta-update from ``(x_support, y_support, x_query, y_query)``; the meta-loss.

        Args:
            data_batch: four arrays of shape ``(tasks, points, 1)``.
            current_epoch: the current epoch, from 0.
        """
        batch = [self.to_tensor(part) for part in data_batch]
        return float(self.alg.train_one_iter(batch, current_epoch))

    def evaluate(
        self, batches: list[tuple[np.ndarray, ...]], confidence: float = 0.95
    ) -> tuple[float, float]:
        """The mean query MSE after adaptation over ``batches`` (each task counting once, also
        where the last batch is smaller) and the half-width of its confidence interval (a
        normal approximation over the batches' means, as many as PARL's 100 test batches).

        Args:
            batches: the held-out tasks, batch by batch.
            confidence: the interval's confidence level.
        """
        losses = np.array(
            [self.alg.evaluate_one_iter([self.to_tensor(p) for p in b]) for b in batches]
        )
        mean = float(np.average(losses, weights=[len(b[0]) for b in batches]))
        if len(losses) < 2:
            return mean, math.nan
        z = NormalDist().inv_cdf((1.0 + confidence) / 2.0)
        return mean, float(z * losses.std(ddof=1) / math.sqrt(len(losses)))
