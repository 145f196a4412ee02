"""Sine-wave regression tasks (the setting of Meta-SGD, Li et al. 2017,
https://arxiv.org/abs/1707.09835, that PARL's MAML++ benchmark follows): each task is
``y = A * sin(f * x + phase)`` with its own amplitude, frequency and phase, seen through a few
support points (to adapt on) and query points (to score the adapted model on)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SineFamily:
    """The ranges the task parameters and the inputs are drawn from, uniformly.

    Args:
        amplitude: range of ``A``.
        frequency: range of ``f``.
        phase: range of the phase.
        x_range: range of the inputs ``x``.
    """

    amplitude: tuple[float, float] = (0.1, 5.0)
    frequency: tuple[float, float] = (0.8, 1.2)
    phase: tuple[float, float] = (0.0, math.pi)
    x_range: tuple[float, float] = (-5.0, 5.0)


Batch = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class SineTasks:
    """A fixed set of tasks, each with ``support + query`` points drawn once.

    Every batch splits each task's points into support and query points at random; which
    tasks and which split depend only on ``seed`` and the batch's number, so a resumed run sees
    the batches the uninterrupted run would have seen.

    Args:
        num_tasks: how many tasks.
        support: support points per task.
        query: query points per task.
        seed: seed of the tasks and of the batches.
        family: the ranges of the task parameters.
    """

    def __init__(
        self, num_tasks: int, support: int, query: int, seed: int, family: SineFamily = SineFamily()
    ) -> None:
        for name, value in (("num_tasks", num_tasks), ("support", support), ("query", query)):
            if value < 1:
                raise ValueError(f"{name} must be 1 or more, got {value}")
        self.num_tasks, self.support, self.query, self.seed = num_tasks, support, query, seed
        rng = np.random.default_rng(seed)
        amplitude = rng.uniform(*family.amplitude, size=(num_tasks, 1))
        frequency = rng.uniform(*family.frequency, size=(num_tasks, 1))
        phase = rng.uniform(*family.phase, size=(num_tasks, 1))
        x = rng.uniform(*family.x_range, size=(num_tasks, support + query))
        self.x = x.astype(np.float32)
        self.y = (amplitude * np.sin(frequency * x + phase)).astype(np.float32)

    def batch(self, tasks: np.ndarray, rng: np.random.Generator) -> Batch:
        """``(x_support, y_support, x_query, y_query)`` of ``tasks``, ``(len(tasks), points,
        1)`` each, with each task's points shuffled by ``rng`` before the split.

        Args:
            tasks: indices of the tasks.
            rng: draws the split.
        """
        order = np.argsort(rng.random((len(tasks), self.support + self.query)), axis=1)
        x = np.take_along_axis(self.x[tasks], order, axis=1)[..., None]
        y = np.take_along_axis(self.y[tasks], order, axis=1)[..., None]
        s = self.support
        return x[:, :s], y[:, :s], x[:, s:], y[:, s:]

    def train_batch(self, step: int, batch_size: int) -> Batch:
        """The ``step``-th training batch: passes over the tasks in an order reshuffled every
        pass, ``batch_size`` tasks at a time (the last, incomplete batch of a pass dropped).

        Args:
            step: the number of the batch, from 0.
            batch_size: tasks per batch.
        """
        per_pass = self.num_tasks // batch_size
        if per_pass < 1:
            raise ValueError(
                f"batch_size={batch_size} is larger than the {self.num_tasks} training tasks"
            )
        epoch, index = divmod(step, per_pass)
        order = np.random.default_rng((self.seed, 1, epoch)).permutation(self.num_tasks)
        tasks = order[index * batch_size : (index + 1) * batch_size]
        return self.batch(tasks, np.random.default_rng((self.seed, 2, step)))

    def test_batches(self, batch_size: int) -> list[Batch]:
        """Every task once, in order, ``batch_size`` at a time, with one fixed split.

        Args:
            batch_size: tasks per batch.
        """
        rng = np.random.default_rng((self.seed, 3))
        return [
            self.batch(np.arange(start, min(start + batch_size, self.num_tasks)), rng)
            for start in range(0, self.num_tasks, batch_size)
        ]
