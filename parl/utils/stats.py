"""Running statistics: ``WindowStat`` over the last N values, ``TimeStat`` for timing code."""

from __future__ import annotations

import numbers
import time
from collections import deque
from types import TracebackType
from typing import SupportsFloat

import numpy as np

from parl.validation import check_int

__all__ = ["TimeStat", "WindowStat"]


class WindowStat:
    """Mean, min and max of the last ``window_size`` values added (``None`` while empty).

    Example: episode returns over the last 100 episodes, ``stat.add(ret); stat.mean``.
    """

    def __init__(self, window_size: int) -> None:
        self.window_size = check_int("window_size", window_size, low=1, owner="WindowStat")
        self._items: deque[float] = deque(maxlen=self.window_size)

    def add(self, obj: SupportsFloat) -> None:
        """Add a number (Python, numpy or a one-element tensor)."""
        item = getattr(obj, "item", None)
        value = item() if callable(item) else obj
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"WindowStat.add expects a number, got {obj!r} ({type(obj).__name__})")
        self._items.append(float(value))

    @property
    def count(self) -> int:
        """Number of values in the window (at most ``window_size``)."""
        return len(self._items)

    @property
    def mean(self) -> float | None:
        """The mean of the values in the window, or None while it is empty."""
        return float(np.mean(self._items)) if self._items else None

    @property
    def min(self) -> float | None:
        """The smallest of the values in the window, or None while it is empty."""
        return min(self._items) if self._items else None

    @property
    def max(self) -> float | None:
        """The largest of the values in the window, or None while it is empty."""
        return max(self._items) if self._items else None


class TimeStat:
    """Durations (seconds) of the last ``window_size`` timed sections.

    Use ``with timer: ...`` or ``timer.start()`` / ``timer.stop()``; ``mean``, ``min``, ``max``
    cover the window and ``total`` every section timed so far.
    """

    def __init__(self, window_size: int = 1) -> None:
        self.time_samples = WindowStat(window_size)
        self.total = 0.0
        self._start: float | None = None

    def start(self) -> None:
        """Start timing a section; :meth:`stop` ends it."""
        self._start = time.perf_counter()

    def stop(self) -> float:
        """End the current section; returns its duration."""
        if self._start is None:
            raise RuntimeError("TimeStat.stop() called without start()")
        elapsed = time.perf_counter() - self._start
        self._start = None
        self.time_samples.add(elapsed)
        self.total += elapsed
        return elapsed

    def __enter__(self) -> TimeStat:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def mean(self) -> float | None:
        """The mean of the durations in the window, in seconds, or None while it is empty."""
        return self.time_samples.mean

    @property
    def min(self) -> float | None:
        """The smallest of the durations in the window, in seconds, or None while it is empty."""
        return self.time_samples.min

    @property
    def max(self) -> float | None:
        """The largest of the durations in the window, in seconds, or None while it is empty."""
        return self.time_samples.max
