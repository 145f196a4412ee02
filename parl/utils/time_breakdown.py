"""Where the time of a distributed training run went: named sections (sampling, transfer,
learning, waiting, ...) summed on the learner and on the actors, printed and logged.

    times = TimeBreakdown()
    with times.section("learning"):
        agent.learn(...)
    times.add("sampling", seconds_reported_by_an_actor)
    logger.info(times.report(wall_seconds))
    times.to_summary(step)          # TensorBoard: time/<section>_s and time/<section>_share
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

__all__ = ["TimeBreakdown"]


class TimeBreakdown:
    """Seconds per named section; ``share`` divides by a total you choose (wall or busy time)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to the section ``name`` (created at 0 on first use).

        Args:
            name: The section, e.g. ``"sampling"``.
            seconds: Time spent in it.
        """
        self.seconds[name] = self.seconds.get(name, 0.0) + float(seconds)

    def merge(self, other: Mapping[str, float], prefix: str = "") -> None:
        """Add every section of ``other`` (e.g. an actor's report) under ``prefix + name``."""
        for name, seconds in other.items():
            self.add(prefix + name, seconds)

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        """Time the body of a ``with`` statement and add it to ``name``.

        Args:
            name: The section the elapsed time is added to (even when the body raises).

        Example::

            with breakdown.section("learning"):
                agent.learn(batch)
        """
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def share(self, name: str, total: float | None = None) -> float:
        """``name``'s part of ``total`` (default: the sum of all sections)."""
        denominator = sum(self.seconds.values()) if total is None else total
        return self.seconds.get(name, 0.0) / denominator if denominator > 0 else 0.0

    def report(self, total: float | None = None, title: str = "time") -> str:
        """One line: ``time: sampling 12.3 s (61%), learning ...`` against ``total``."""
        denominator = sum(self.seconds.values()) if total is None else total
        parts = [
            f"{name} {seconds:.2f} s ({100 * self.share(name, denominator):.1f}%)"
            for name, seconds in sorted(self.seconds.items(), key=lambda kv: -kv[1])
        ]
        return f"{title} (of {denominator:.2f} s): " + ", ".join(parts)

    def to_summary(self, step: int, total: float | None = None, prefix: str = "time") -> None:
        """Each section's seconds and share as TensorBoard scalars."""
        from parl.utils import summary

        for name, seconds in self.seconds.items():
            summary.add_scalar(f"{prefix}/{name}_s", seconds, step)
            summary.add_scalar(f"{prefix}/{name}_share", self.share(name, total), step)
