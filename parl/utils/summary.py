"""TensorBoard logging in PARL's style: ``summary.add_scalar("train/return", ret, step)``.

One process-wide ``torch.utils.tensorboard.SummaryWriter``, created on the first write (importing
this module loads neither torch nor tensorboard and creates no file). Its folder is, in order of
preference: the one given to ``summary.set_dir``, the logger's folder (``logger.set_dir``), or
``train_log/<script name>``. View it with ``tensorboard --logdir train_log``.
"""

from __future__ import annotations

import atexit
import numbers
import os
import threading
from typing import TYPE_CHECKING, Any, SupportsFloat

import numpy as np

from parl.utils import logger
from parl.validation import check_int

if TYPE_CHECKING:  # pragma: no cover
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["add_histogram", "add_scalar", "close", "flush", "get_dir", "get_writer", "set_dir"]

_lock = threading.Lock()
_writer: SummaryWriter | None = None
_writer_dir: str | None = None
_chosen_dir: str | None = None
_atexit_registered = False


def set_dir(logdir: str | os.PathLike[str]) -> None:
    """Write the next events to ``logdir`` (the current event file, if any, is closed).

    Raises:
        NotADirectoryError: ``logdir`` is a file (said now, not at the first write).
    """
    global _chosen_dir
    if not isinstance(logdir, (str, os.PathLike)):
        raise TypeError(f"logdir must be a str or os.PathLike, got {type(logdir).__name__}")
    if os.path.exists(logdir) and not os.path.isdir(logdir):
        raise NotADirectoryError(
            f"logdir {os.fspath(logdir)!r} is a file, not a folder: give another logdir"
        )
    close()
    with _lock:
        _chosen_dir = os.fspath(logdir)


def get_dir() -> str:
    """The folder the events go (or will go) to."""
    if _writer_dir is not None:
        return _writer_dir
    return _chosen_dir or logger.get_dir() or logger.default_log_dir()


def get_writer() -> SummaryWriter:
    """The underlying ``SummaryWriter`` (created now if needed), for what this module lacks."""
    global _writer, _writer_dir, _atexit_registered
    with _lock:
        if _writer is None:
            from torch.utils.tensorboard import SummaryWriter

            logdir = _chosen_dir or logger.get_dir() or logger.default_log_dir()
            _writer = SummaryWriter(log_dir=logdir)
            _writer_dir = logdir
            if not _atexit_registered:
                atexit.register(close)
                _atexit_registered = True
        return _writer


def _check_tag(tag: object) -> str:
    if not isinstance(tag, str) or not tag:
        raise TypeError(f"tag must be a non-empty str such as 'train/return', got {tag!r}")
    return tag


def _check_step(global_step: object) -> int | None:
    if global_step is None:
        return None
    return check_int("global_step", global_step, what="an int or None")


def add_scalar(
    tag: str,
    scalar_value: SupportsFloat,
    global_step: int | None = None,
    walltime: float | None = None,
) -> None:
    """Record ``scalar_value`` (a number, numpy scalar or one-element tensor) under ``tag``."""
    _check_tag(tag)
    step = _check_step(global_step)
    value: Any = scalar_value
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"scalar_value must be a real number, got {scalar_value!r} "
            f"({type(scalar_value).__name__})"
        )
    get_writer().add_scalar(tag, float(value), step, walltime=walltime)


def add_histogram(
    tag: str,
    values: Any,
    global_step: int | None = None,
    bins: str = "tensorflow",
    walltime: float | None = None,
) -> None:
    """Record the distribution of ``values`` (array-like or tensor) under ``tag``."""
    _check_tag(tag)
    step = _check_step(global_step)
    if not hasattr(values, "detach"):
        values = np.asarray(values)
        if values.dtype.kind not in "biuf":
            raise TypeError(f"values must be numeric, got an array of dtype {values.dtype}")
    get_writer().add_histogram(tag, values, step, bins=bins, walltime=walltime)


def flush() -> None:
    """Write pending events to disk (no-op before the first write)."""
    with _lock:
        if _writer is not None:
            _writer.flush()


def close() -> None:
    """Flush and close the event file; a later write opens a new one. Idempotent."""
    global _writer, _writer_dir
    with _lock:
        writer, _writer, _writer_dir = _writer, None, None
    if writer is not None:
        writer.close()
