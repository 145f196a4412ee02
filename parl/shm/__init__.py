"""Shared memory: segments and their allocator, the links that carry a message's buffers
through them to local workers (:mod:`parl.workers`), and shared arrays.

The public part is the explicit shared-array API. Arrays made here are *shared handles*: they
live in shared memory from the start, handing one to an actor (as an argument, a return value or
an attribute) passes a handle, not a copy, and what any process holding it writes, every other
holder sees. (Every other array crosses as a *value*: the receiver's copy-on-write view is its
own.) ::

    buf = parl.shm.zeros((n_steps, obs_dim), np.float32)
    sampler.rollout_into(buf)      # the actor fills buf in place; nothing is copied
    buf.mean()

The memory is reclaimed when the last view of it (here or in any actor) is dropped.

For loops whose data already sits in shared arrays, :mod:`parl.shm.doorbell` (public too)
replaces a remote call per round by one byte each way between the caller and a local actor.

Handles are shared with local workers only: an actor on a cluster, on SSH hosts or on Ray
cannot map this memory, so sending it one there (or it sending one back) raises
:class:`parl.SharedHandleError` instead of passing a copy (:mod:`parl.shm.handles`).
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
    block = segment_table().allocator.block(nbytes, handle=True)
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


def memory_kind(array: Any) -> str | None:
    """Where ``array``'s memory lives: ``"handle"`` (a shared handle, see :func:`is_shared`),
    ``"value"`` (a large array received from another process: a zero-copy, copy-on-write view
    that is this process's own) or None (ordinary memory)."""
    if not isinstance(array, np.ndarray) or array.nbytes == 0:
        return None
    table = segment_table()
    found = table.find(array.__array_interface__["data"][0], 1)
    if found is None:
        return None
    return "handle" if table.is_handle(found) else "value"


def is_shared(array: np.ndarray) -> bool:
    """True when ``array`` is a shared handle (made here, or received as one): it crosses to
    actors by handle and writes to it are seen by every process holding it. A large array
    received as a value is a private copy-on-write view: False."""
    return memory_kind(array) == "handle"


__all__ = ["copy", "empty", "full", "is_shared", "memory_kind", "zeros"]
