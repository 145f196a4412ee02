"""The local carrier's :class:`~parl.wire.protocol.Link`: buffers cross as shared memory.

What crosses is one of two things (see :mod:`parl.shm.segment` for the mappings):

- a **value**: any array or tensor. The sender copies it once into a block of its own shared
  memory (or, when it is a received value it has not written to, refers to the block it came
  from); the receiver gets a view of a copy-on-write private mapping of that block. No copy on
  receive, and nobody's writes reach anybody else.
- a **handle**: an array made with :mod:`parl.shm` (or a view of one). Both sides see the same
  memory; what one writes, the others see.

Buffers below ``threshold`` bytes travel inline instead. Each reference is a lease: the block
behind it is neither freed nor reused here until the peer's view of it is dropped and the lease
comes back in a later message.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import pickle
import resource
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from parl.errors import ParlError
from parl.shm.allocator import PAGE
from parl.shm.copying import copy_into
from parl.shm.segment import Mapping, Segment, SegmentTable
from parl.wire.framing import wait_readable
from parl.wire.protocol import SharedRef

DEFAULT_THRESHOLD = 1 << 17  # 128 KiB: below this a buffer is cheaper inline


class ShmLink:
    """``peer_gone`` tells when the peer's process has ended: the memory lent to it stays lent
    after :meth:`close` until then, since a closed peer may still be finishing (running
    ``__del__``, ``atexit`` handlers) with our blocks in view. Without it (a worker's link to
    its caller), lent memory stays lent for the life of this process."""

    def __init__(
        self,
        table: SegmentTable,
        threshold: int = DEFAULT_THRESHOLD,
        peer_gone: Callable[[], bool] | None = None,
    ) -> None:
        self._table = table
        self._threshold = threshold
        self._peer_gone = peer_gone
        self._lock = threading.RLock()  # re-entered when a collection under it drops a segment
        self._peer_has: set[int] = set()  # segments the peer has been given a descriptor of
        self._new: list[tuple[int, int, int, int]] = []
        self._dropped: list[int] = []
        self._received: set[int] = set()
        self._leases: dict[int, Any] = {}
        self._lease_ids = itertools.count(1)
        self._releases: deque[int] = deque()
        table.add_drop_listener(self)

    # -- sending side -------------------------------------------------------------------------

    def place(self, buffer: pickle.PickleBuffer) -> SharedRef | None:
        if _parked:
            release_parked()
        raw = buffer.raw()
        nbytes = raw.nbytes
        if not nbytes:
            return None
        found = self._table.find(_address(raw), nbytes)
        keep: Any = buffer
        if found is not None and not found.mapping.private:
            segment, offset = found.segment, found.offset
            handle = self._table.is_handle(found)
        elif (
            found is not None
            and nbytes >= self._threshold
            and not written(found.mapping, found.offset, nbytes)
        ):
            segment, offset, handle = found.segment, found.offset, False  # forwarded as it came
        elif nbytes >= self._threshold:
            block, segment, offset = self._table.allocator.allocate(nbytes)
            copy_into(block, np.frombuffer(raw, np.uint8))
            keep, handle = block, False
        else:
            return None
        lease = next(self._lease_ids)
        self._leases[lease] = keep
        with self._lock:
            if segment.segment_id not in self._peer_has:
                self._peer_has.add(segment.segment_id)
                self._new.append((segment.segment_id, segment.size, segment.slot, segment.fd))
        return SharedRef(segment.segment_id, offset, nbytes, lease, handle)

    def stage(self, nbytes: int) -> Any:
        """A block of shared memory to build an outgoing value of ``nbytes`` in (a
        non-contiguous array is copied there once), or None below the threshold."""
        if nbytes < self._threshold:
            return None
        return self._table.allocator.block(nbytes)

    def is_handle(self, address: int, nbytes: int) -> bool:
        found = self._table.find(address, nbytes)
        return found is not None and self._table.is_handle(found)

    def take_attachments(self) -> tuple[list[tuple[int, int, int, int]], list[int]]:
        with self._lock:
            new, self._new = self._new, []
            dropped, self._dropped = self._dropped, []
        return new, dropped

    def take_releases(self) -> list[int]:
        releases = self._releases
        out = []
        while releases:
            out.append(releases.popleft())
        return out

    def has_news(self) -> bool:
        return True if (self._new or self._dropped or self._releases) else False

    def segment_dropped(self, segment_id: int) -> None:
        with self._lock:
            if segment_id in self._peer_has:
                self._peer_has.discard(segment_id)
                self._dropped.append(segment_id)

    # -- receiving side -----------------------------------------------------------------------

    def attach(
        self, segments: list[tuple[int, int, int]], fds: list[int], dropped: list[int]
    ) -> None:
        if len(segments) != len(fds):
            for fd in fds:
                os.close(fd)
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            raise ParlError(
                f"{len(segments)} shared-memory segments were announced but {len(fds)} "
                f"descriptors arrived: this process ran out of file descriptors (ulimit -n is "
                f"{soft}); raise the limit or hold fewer received arrays (the descriptors of "
                "dropped ones come back with the next call to the actor that sent them)"
            )
        # dropped first: a segment may be dropped and announced again in one message
        for segment_id in dropped:
            if segment_id in self._received:
                self._received.discard(segment_id)
                self._table.forget(segment_id)
        for (segment_id, size, slot), fd in zip(segments, fds, strict=True):
            if segment_id in self._received:
                os.close(fd)
                continue
            self._table.attach(segment_id, size, slot, fd)
            self._received.add(segment_id)

    def open(self, ref: SharedRef) -> Any:
        table = self._table
        segment = table.get(ref.segment)
        # a block of our own that comes back stays ours until this view goes, whatever happens
        # to the lease that lent it
        pin = table.allocator.block_of(segment, ref.offset)[0] if segment.owned else None
        if ref.handle:
            view = table.mapping(segment, private=False).view(ref.offset, ref.length)
            _watch(view, _handle_dropped, (self._releases, ref.lease, pin))
            return view
        mapping, slot, view = table.private_view(segment, ref.offset, ref.length)
        _watch(
            view,
            _value_dropped,
            (mapping, slot, ref.offset, ref.length, self._releases, ref.lease, pin),
        )
        return view

    def release(self, leases: list[int]) -> None:
        pop = self._leases.pop
        for lease in leases:
            pop(lease, None)

    def close(self) -> None:
        leases, self._leases = self._leases, {}
        if leases:
            _park(self._peer_gone or _never, leases)
        release_parked()
        for segment_id in list(self._received):
            self._table.forget(segment_id)
        self._received.clear()

    def lease_count(self) -> int:
        return len(self._leases)


def _address(raw: memoryview) -> int:
    """The address of a buffer's first byte (ctypes is 5x quicker than numpy's
    ``__array_interface__``, but only for writable buffers)."""
    try:
        probe = ctypes.c_char.from_buffer(raw)
    except TypeError:  # read-only
        return int(np.frombuffer(raw, np.uint8).__array_interface__["data"][0])
    address = ctypes.addressof(probe)
    del probe
    return address


# memory lent to peers that were closed but may still be running: (peer_gone, leases)
_parked: list[tuple[Callable[[], bool], dict[int, Any]]] = []
_parked_lock = threading.Lock()


def _never() -> bool:
    return False


_reaper_running = False


def _park(peer_gone: Callable[[], bool], leases: dict[int, Any]) -> None:
    """Keep ``leases`` until ``peer_gone()``; a daemon thread watches the peers' descriptors
    (``peer_gone.fileno()``) so that the memory comes back even while this process is idle."""
    global _reaper_running
    with _parked_lock:
        _parked.append((peer_gone, leases))
        start = not _reaper_running and getattr(peer_gone, "fileno", None) is not None
        if start:
            _reaper_running = True
    if start:
        threading.Thread(target=_reap_parked, name="parl-lent-memory", daemon=True).start()


def _reap_parked() -> None:
    global _reaper_running
    while True:
        with _parked_lock:
            fds = [fd for gone, _ in _parked if (fd := _fileno(gone)) is not None]
            if not fds:
                _reaper_running = False
                return
        wait_readable(fds, 1.0)
        release_parked()


def _fileno(peer_gone: Any) -> int | None:
    fileno = getattr(peer_gone, "fileno", None)
    return fileno() if fileno is not None else None


def release_parked() -> None:
    """Give back the memory lent to closed peers whose processes have ended."""
    with _parked_lock:
        done = [entry for entry in _parked if entry[0]()]
        if not done:
            return
        _parked[:] = [entry for entry in _parked if entry not in done]
    done.clear()  # the leases' blocks are freed here, outside the lock


class _ViewRef(weakref.ref):
    """A weak reference to a received view whose callback runs ``action(*args)`` when the view
    goes (what ``weakref.finalize`` does, at a quarter of its cost). Kept alive in ``_watched``
    until then, like a finalizer in its registry."""

    __slots__ = ("action", "args")

    def __new__(cls, view: Any, action: Callable[..., None], args: tuple) -> Any:
        return super().__new__(cls, view, _view_dropped)

    def __init__(self, view: Any, action: Callable[..., None], args: tuple) -> None:
        super().__init__(view, _view_dropped)  # type: ignore[call-arg]
        self.action = action
        self.args = args


_watched: dict[int, _ViewRef] = {}


def _watch(view: Any, action: Callable[..., None], args: tuple) -> None:
    ref = _ViewRef(view, action, args)
    _watched[id(ref)] = ref


def _view_dropped(ref: _ViewRef, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
    # A view still held when the interpreter shuts down goes during module teardown, when
    # imports fail and module globals may already be None; the process's mappings and its
    # peers' leases end with it, so there is nothing left to give back. (``_finalizing`` is
    # bound here because this module's own ``sys`` may be gone by then.)
    if _finalizing():
        return
    _watched.pop(id(ref), None)
    ref.action(*ref.args)


def _handle_dropped(releases: deque[int], lease: int, pin: Any) -> None:
    """The last view of a received handle is gone (``pin``: our own block, kept until now)."""
    releases.append(lease)


def _value_dropped(
    mapping: Mapping,
    slot: int,
    offset: int,
    length: int,
    releases: deque[int],
    lease: int,
    pin: Any,
) -> None:
    """The last view of a received value is gone: pages it wrote go back to being the
    segment's (so the next value received in this slot reads the segment, not our old writes),
    the slot is free in this mapping, and the lease goes back to the owner."""
    if length <= _CHECK_FROM or written(mapping, offset, length):
        start = offset - offset % PAGE
        mapping.mmap.madvise(mmap.MADV_DONTNEED, start, offset + length - start)
    mapping.busy.discard(slot)
    releases.append(lease)


# Below this size a dropped value's pages are discarded without asking which were written: a
# page table lookup costs more than faulting a few pages in again.
_CHECK_FROM = 1 << 20
_pagemap: tuple[int, int] | None = None  # (pid, descriptor of /proc/self/pagemap)
_BIT_PRESENT, _BIT_SWAPPED, _BIT_FILE = np.uint64(63), np.uint64(62), np.uint64(61)


def written(mapping: Mapping, offset: int, length: int) -> bool:
    """Whether this process wrote to ``[offset, offset + length)`` of a private mapping.

    A page written through a private mapping becomes an anonymous page of this process; one only
    read is still the segment's page. ``/proc/self/pagemap`` tells which (one 8-byte entry per
    page: about 0.3 ms for 128 MiB). Without it, assume written.
    """
    global _pagemap
    if _pagemap is None or _pagemap[0] != os.getpid():
        try:
            _pagemap = (os.getpid(), os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            return True
    address = mapping.address + offset
    first, last = address // PAGE, (address + length - 1) // PAGE
    try:
        data = os.pread(_pagemap[1], (last - first + 1) * 8, first * 8)
    except OSError:
        return True
    entries = np.frombuffer(data, np.uint64)
    anonymous = (entries >> _BIT_PRESENT) & ~(entries >> _BIT_FILE)
    swapped = entries >> _BIT_SWAPPED
    # a ufunc reduction rather than ``.any()``, which imports numpy's ``_methods`` module on
    # first use (and imports fail while the interpreter shuts down)
    return bool(int(np.bitwise_or.reduce(anonymous | swapped)) & 1)


__all__ = ["DEFAULT_THRESHOLD", "ShmLink", "Segment", "written"]
