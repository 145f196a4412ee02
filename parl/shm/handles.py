"""Finding ``parl.shm`` handles in what is about to cross to a process that cannot share memory.

A shared handle reaches a local worker as the same memory; an actor on a cluster, on SSH hosts
or on Ray cannot map it, and a copy there would silently cut the two sides apart (a rollout
buffer the actor fills would stay zeros for the caller). The carriers that cannot share memory refuse a handle
instead (:class:`parl.errors.SharedHandleError`):

- the TCP carriers (cluster, SSH hosts) ask about each out-of-band buffer of a message as it is
  framed (:data:`HANDLES`, given to their :class:`~parl.wire.protocol.InlineLink`): no extra
  pass over the payload;
- the Ray carrier hands payloads to Ray's own pickler, so it looks through them first with
  :func:`holds_handle`, one more pickling pass that skips every array's data.

Both cost nothing in a process where no handle ever lived (``SegmentTable.handles_seen``),
which is every process that never touched ``parl.shm``. :func:`find_handle` names where in a
value the handle is, for the error message.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from parl.errors import SHARED_HANDLE_HINT, SharedHandleError
from parl.shm.segment import existing_table
from parl.wire.unpicklable import find_unpicklable


def handles_here() -> bool:
    """Whether a ``parl.shm`` handle ever lived in this process (never creates the table)."""
    table = existing_table()
    return table is not None and table.handles_seen


def is_handle_memory(address: int, nbytes: int) -> bool:
    """Whether ``[address, address + nbytes)`` lies in a shared handle of this process."""
    table = existing_table()
    if table is None or not table.handles_seen:
        return False
    found = table.find(address, max(nbytes, 1))
    return found is not None and table.is_handle(found)


class _Handles:
    """The :class:`~parl.wire.protocol.HandleFinder` of the TCP carriers' links."""

    def holds_handle(self, buffer: memoryview) -> bool:
        if not buffer.nbytes or not handles_here():
            return False
        return is_handle_memory(_address(buffer), buffer.nbytes)

    def is_handle(self, address: int, nbytes: int) -> bool:
        return is_handle_memory(address, nbytes)


HANDLES = _Handles()


def _address(buffer: memoryview) -> int:
    return int(np.frombuffer(buffer, np.uint8).__array_interface__["data"][0])


def array_is_handle(array: np.ndarray) -> bool:
    """Whether a (view of a) numpy array lies in a shared handle."""
    if array.size == 0:
        return False
    return is_handle_memory(array.__array_interface__["data"][0], array.itemsize)


def _tensor_is_handle(tensor: Any) -> bool:
    """Whether a CPU torch tensor's storage lies in a shared handle (``torch.from_numpy``)."""
    try:
        if tensor.device.type != "cpu" or tensor.is_sparse or tensor.is_quantized:
            return False
        storage = tensor.untyped_storage()
        address, nbytes = storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError, AttributeError):  # meta, nested, functional...
        return False
    return bool(nbytes) and is_handle_memory(address, nbytes)


class _Found(Exception):
    """Raised by the scanning pickler at the first handle."""


def _skipped() -> None:
    """What the scanning pickler saves an array or a tensor as once checked: its data is no
    business of the scan."""


class _Sink:
    """A file that drops what the scanning pickler writes."""

    @staticmethod
    def write(data: Any) -> int:
        return len(data)


_scanner: type | None = None


def _scanner_class() -> type:
    """A cloudpickle pickler (it walks what Ray's pickler walks: lambdas, closures, classes
    of the script by value) that raises :class:`_Found` at the first array or tensor in a
    handle and saves every other one as nothing."""
    global _scanner
    if _scanner is None:
        import cloudpickle

        class _Scanner(cloudpickle.Pickler):
            def reducer_override(self, obj: Any) -> Any:
                if isinstance(obj, np.ndarray) and not obj.dtype.hasobject:
                    if array_is_handle(obj):
                        raise _Found
                    return _skipped, ()
                torch = sys.modules.get("torch")
                if torch is not None and isinstance(obj, torch.Tensor):
                    if _tensor_is_handle(obj):
                        raise _Found
                    return _skipped, ()
                if type(obj).__module__.startswith("ray."):
                    return _skipped, ()  # object refs, actor handles: Ray's own pickling of
                    # them registers them with its worker, which a dry run must not do
                return super().reducer_override(obj)

        _scanner = _Scanner
    return _scanner


def holds_handle(value: Any) -> bool:
    """Whether ``value`` is, or holds somewhere inside (containers, attributes of objects,
    dataclasses, closures), a ``parl.shm`` array or a view of one (also as a torch tensor).
    False at once in a process where no handle ever lived; a value that cannot be pickled at
    all counts as holding none (sending it fails with its own error)."""
    if not handles_here():
        return False
    try:
        _scanner_class()(_Sink(), 5, buffer_callback=_drop).dump(value)
    except _Found:
        return True
    except Exception:  # noqa: BLE001 - not picklable: sending says why
        return False
    return False


def _drop(buffer: Any) -> None:
    """Out-of-band buffers of the scan go nowhere (returning None keeps them out of band)."""


def find_handle(value: Any) -> str | None:
    """Where in ``value`` a handle is, as ``the dict['obs'] (a numpy.ndarray)``, or None when
    ``value`` holds none or is itself the handle."""
    if not holds_handle(value):
        return None
    return find_unpicklable(value, lambda part: not holds_handle(part))


def refuse_handles(value: Any, what: str) -> None:
    """Raise :class:`SharedHandleError` when ``value`` holds a handle; ``what`` names it
    (``"the return value of rollout()"``)."""
    if holds_handle(value):
        where = find_handle(value)
        inside = f" at {where}" if where else ""
        raise SharedHandleError(
            f"{what} is or holds a parl.shm array{inside}: {SHARED_HANDLE_HINT}"
        )


__all__ = [
    "HANDLES",
    "array_is_handle",
    "find_handle",
    "handles_here",
    "holds_handle",
    "is_handle_memory",
    "refuse_handles",
]
