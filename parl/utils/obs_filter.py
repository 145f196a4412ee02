"""Observation normalisation shared by many actors (OpenAI ES, PARL's ``MeanStdFilter``).

Each actor normalises with the learner's statistics and also counts what it sees in a local
buffer; the learner merges every actor's buffer into its statistics (Chan et al.'s parallel
update of mean and sum of squares, exact whatever the split), then hands the merged state back.
Only ``(count, mean, M2)`` travels, never observations.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from parl.validation import check_float, check_int

__all__ = ["MeanStdFilter", "RunningStat"]


class RunningStat(NamedTuple):
    """Count, mean and sum of squared deviations (``M2``) of a stream of arrays."""

    n: int
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> RunningStat:
        return cls(0, np.zeros(shape), np.zeros(shape))

    @classmethod
    def of(cls, x: np.ndarray) -> RunningStat:
        """The statistics of a batch ``(N, *shape)``."""
        x = np.asarray(x, np.float64)
        mean = x.mean(axis=0)
        return cls(len(x), mean, ((x - mean) ** 2).sum(axis=0))

    def merge(self, other: RunningStat) -> RunningStat:
        n = self.n + other.n
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.n / n)
        m2 = self.m2 + other.m2 + delta * delta * (self.n * other.n / n)
        return RunningStat(n, mean, m2)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else np.ones_like(self.mean)


class MeanStdFilter:
    """``filter(obs, update=True)`` -> ``clip((obs - mean) / (std + 1e-8), -clip, clip)``.

    ``state`` is the statistics used for normalising (synced from the learner), ``buffer`` what
    this process has seen since the last :meth:`flush`.
    """

    def __init__(self, shape: int | tuple[int, ...], clip: float = 10.0) -> None:
        owner = "MeanStdFilter"
        dims = tuple(shape) if isinstance(shape, Iterable) else (shape,)  # (numpy's ints too)
        self.shape = tuple(check_int("shape", d, low=1, owner=owner) for d in dims)
        self.clip = check_float("clip", clip, low=0.0, low_open=True, owner=owner)
        self.state = RunningStat.empty(self.shape)
        self.buffer = RunningStat.empty(self.shape)

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        obs = np.asarray(obs)
        if update:
            batch = RunningStat.of(obs.reshape(-1, *self.shape))
            self.state = self.state.merge(batch)
            self.buffer = self.buffer.merge(batch)
        normalised = (obs - self.state.mean) / (self.state.std + 1e-8)
        return np.clip(normalised, -self.clip, self.clip).astype(np.float32)

    def flush(self) -> RunningStat:
        """Return what was seen since the last flush, and forget it."""
        buffer, self.buffer = self.buffer, RunningStat.empty(self.shape)
        return buffer

    def apply_changes(self, buffer: RunningStat) -> None:
        """Learner side: merge an actor's buffer into the statistics."""
        self.state = self.state.merge(RunningStat(*buffer))

    def sync(self, state: RunningStat) -> None:
        """Actor side: normalise with the learner's merged statistics from now on."""
        self.state = RunningStat(*state)
