"""Local workers and shared memory.

The public part is the explicit shared-array API: arrays made here live in shared memory from
the start, so handing one to an actor (as an argument or attribute) passes a handle, not a copy,
and what the actor writes into it is what the caller sees::

    buf = parl.shm.zeros((n_steps, obs_dim), np.float32)
    sampler.rollout_into(buf)      # the actor fills buf in place; nothing is copied
    buf.mean()

The memory is reclaimed when the last view of it (here or in any actor) is dropped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parl.shm.segment import segment_table


def empty(shape: int | tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A shared array of ``shape`` and ``dtype``, uninitialised (like :func:`numpy.empty`)."""
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError(f"shared arrays hold plain data, not Python objects (dtype {dtype})")
    shape_tuple = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape_tuple):
        raise ValueError(f"shape must be non-negative integers, got {shape!r}")
    nbytes = int(np.prod(shape_tuple, dtype=np.int64)) * dtype.itemsize
    block = segment_table().allocator.block(nbytes)
    return block.view(dtype).reshape(shape_tuple)


def zeros(shape: int | tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A shared array filled with zeros."""
    out = empty(shape, dtype)
    out.fill(0)
    return out


def full(shape: int | tuple[int, ...], fill_value: Any, dtype: Any = np.float32) -> np.ndarray:
    """A shared array filled with ``fill_value``."""
    out = empty(shape, dtype)
    out.fill(fill_value)
    return out


def copy(array: Any) -> np.ndarray:
    """A shared copy of ``array`` (anything :func:`numpy.asarray` accepts)."""
    source = np.asarray(array)
    out = empty(source.shape, source.dtype)
    np.copyto(out, source)
    return out


def is_shared(array: np.ndarray) -> bool:
    """True when ``array``'s memory is in a shared segment (it crosses to actors by handle)."""
    if not isinstance(array, np.ndarray) or array.nbytes == 0:
        return False
    start = array.__array_interface__["data"][0]
    return segment_table().find(start, 1) is not None


__all__ = ["copy", "empty", "full", "is_shared", "zeros"]
