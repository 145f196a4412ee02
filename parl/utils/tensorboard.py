"""PARL's ``parl.utils.tensorboard``: ``tensorboard.add_scalar(tag, value, step)``.

The same writer as :mod:`parl.utils.summary` (one event file per process, in the logger's
folder, else ``train_log/<script name>``), with PARL's flush after every write, so that a
TensorBoard watching the folder sees each value at once. ``summary`` is the faster choice for a
value written every step.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

from parl.utils import summary

__all__ = ["add_histogram", "add_scalar", "close", "flush"]


def add_scalar(
    tag: str,
    scalar_value: SupportsFloat,
    global_step: int | None = None,
    walltime: float | None = None,
) -> None:
    """Record ``scalar_value`` under ``tag`` and write it to disk now."""
    summary.add_scalar(tag, scalar_value, global_step, walltime=walltime)
    summary.flush()


def add_histogram(
    tag: str,
    values: Any,
    global_step: int | None = None,
    bins: str = "tensorflow",
    walltime: float | None = None,
) -> None:
    """Record the distribution of ``values`` under ``tag`` and write it to disk now."""
    summary.add_histogram(tag, values, global_step, bins=bins, walltime=walltime)
    summary.flush()


def flush() -> None:
    """Write pending events to disk (every write here already does)."""
    summary.flush()


def close() -> None:
    """Close the event file; a later write opens a new one."""
    summary.close()
