"""Shared-memory segments: anonymous ``memfd`` files mapped into every process that uses them.

A segment has no name in ``/dev/shm``: it exists while some process holds its descriptor or a
mapping of it, and the kernel frees it when the last one goes, even when every process involved
is killed with SIGKILL. Nothing can leak into ``/dev/shm`` and there is nothing to reap.
Segments reach other processes as descriptors passed over the local carrier's Unix socket.

The :class:`SegmentTable` of a process knows every segment it maps (its own and its peers'),
finds the segment that holds a given address, and owns the :class:`Allocator` that hands out
blocks of its own segments and takes them back for reuse (a fresh 128 MiB segment costs tens of
milliseconds of page faults; a reused one costs nothing).
"""

from __future__ import annotations

import bisect
import ctypes
import itertools
import mmap
import os
import threading
import time
import weakref
from typing import Protocol

import numpy as np

MIN_SEGMENT = 1 << 16  # smallest segment; sizes are rounded up to a power of two
DEFAULT_CACHE_BYTES = 1 << 29  # free segments kept for reuse (512 MiB of address space)
_SWEEP_INTERVAL_S = 0.1
MAX_FREE_SEGMENTS = 256  # and at most this many (each holds descriptors)


class Segment:
    """One memfd and its mapping in this process."""

    __slots__ = ("segment_id", "size", "fd", "mmap", "address", "owned")

    def __init__(self, segment_id: int, size: int, fd: int, owned: bool) -> None:
        self.segment_id = segment_id
        self.size = size
        self.fd = fd
        self.owned = owned
        self.mmap = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        probe = ctypes.c_char.from_buffer(self.mmap)
        self.address = ctypes.addressof(probe)
        del probe

    def view(self, offset: int, length: int) -> np.ndarray:
        """A writable uint8 array over ``[offset, offset + length)`` of the segment."""
        return np.frombuffer(self.mmap, np.uint8, length, offset)

    def close(self) -> bool:
        """Unmap and close; False (and nothing done) while views of the mapping exist."""
        try:
            self.mmap.close()
        except BufferError:
            return False
        self.close_fd()
        return True

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _size_class(nbytes: int) -> int:
    return max(MIN_SEGMENT, 1 << max(0, nbytes - 1).bit_length())


class SegmentTable:
    """Every segment mapped in this process, by id and by address; one per process."""

    def __init__(self, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._by_id: dict[int, Segment] = {}
        self._starts: list[int] = []  # sorted start addresses
        self._by_start: dict[int, Segment] = {}
        self._counter = itertools.count(1)
        self._retired: list[Segment] = []  # to unmap once their last view is gone
        self._sweeper: threading.Thread | None = None
        self.allocator = Allocator(self, cache_bytes)
        self._dropped_listeners: weakref.WeakSet[_DropListener] = weakref.WeakSet()

    # -- registry -----------------------------------------------------------------------------

    def new_segment(self, size: int) -> Segment:
        if self._retired:
            self.sweep()
        fd = os.memfd_create(f"parl-{self.pid}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            segment = Segment((self.pid << 32) | next(self._counter), size, fd, owned=True)
        except BaseException:
            os.close(fd)
            raise
        self._add(segment)
        return segment

    def attach(self, segment_id: int, size: int, fd: int) -> None:
        """Map a peer's segment (or close the descriptor when it is mapped already)."""
        if self._retired:
            self.sweep()
        with self._lock:
            known = segment_id in self._by_id
        if known:
            os.close(fd)
            return
        try:
            segment = Segment(segment_id, size, fd, owned=False)
        except BaseException:
            os.close(fd)
            raise
        self._add(segment)

    def get(self, segment_id: int) -> Segment:
        try:
            return self._by_id[segment_id]
        except KeyError:
            raise KeyError(f"shared-memory segment {segment_id:#x} is not mapped here") from None

    def forget(self, segment_id: int) -> None:
        """Unmap a peer's segment that its owner retired (kept while views of it exist)."""
        with self._lock:
            segment = self._by_id.get(segment_id)
        if segment is not None and not segment.owned:
            self._remove(segment)

    def find(self, address: int, nbytes: int) -> tuple[Segment, int] | None:
        """The segment holding ``[address, address + nbytes)`` and the offset, if any."""
        starts = self._starts
        if not starts:
            return None
        i = bisect.bisect_right(starts, address) - 1
        if i < 0:
            return None
        segment = self._by_start.get(starts[i])
        if segment is None or address + nbytes > segment.address + segment.size:
            return None
        return segment, address - segment.address

    def _add(self, segment: Segment) -> None:
        with self._lock:
            self._by_id[segment.segment_id] = segment
            bisect.insort(self._starts, segment.address)
            self._by_start[segment.address] = segment

    def _remove(self, segment: Segment) -> bool:
        """Unmap a segment; while views of it exist it is retired instead and unmapped by a
        later :meth:`sweep` (a finalizer cannot do it: the view still exports the buffer then).
        """
        with self._lock:
            self._by_id.pop(segment.segment_id, None)
            if self._by_start.get(segment.address) is segment:
                del self._by_start[segment.address]
                i = bisect.bisect_left(self._starts, segment.address)
                if i < len(self._starts) and self._starts[i] == segment.address:
                    del self._starts[i]
            closed = segment.close()
            if not closed:
                segment.close_fd()  # no longer forwarded; the mapping keeps the memory
                self._retired.append(segment)
                self._start_sweeper()
        for listener in list(self._dropped_listeners):
            listener.segment_dropped(segment.segment_id)
        return closed

    def _start_sweeper(self) -> None:
        """Unmap retired segments soon after their last view goes, in the background (called
        with the lock held)."""
        if self._sweeper is None or not self._sweeper.is_alive():
            self._sweeper = threading.Thread(
                target=self._sweep_loop, name="parl-shm-sweep", daemon=True
            )
            self._sweeper.start()

    def _sweep_loop(self) -> None:
        while self.sweep():
            time.sleep(_SWEEP_INTERVAL_S)

    def sweep(self) -> int:
        """Unmap retired segments whose views are gone; returns how many are still retired."""
        with self._lock:
            self._retired = [s for s in self._retired if not s.close()]
            return len(self._retired)

    def add_drop_listener(self, listener: _DropListener) -> None:
        self._dropped_listeners.add(listener)

    def stats(self) -> dict[str, int]:
        with self._lock:
            owned = [s for s in self._by_id.values() if s.owned]
            return {
                "segments": len(self._by_id),
                "owned": len(owned),
                "owned_bytes": sum(s.size for s in owned),
                "free": self.allocator.free_count(),
            }

    def close_all(self) -> None:
        with self._lock:
            segments = list(self._by_id.values())
        for segment in segments:
            self._remove(segment)


class _DropListener(Protocol):
    """Told when one of this process's segments is unmapped (links tell their peers)."""

    def segment_dropped(self, segment_id: int) -> None: ...


class Allocator:
    """Hands out whole segments as blocks and takes them back when their block is dropped.

    A block is a uint8 numpy array over a segment. When the last view of it goes away the
    segment returns to a free list of its size class and the next request of that class reuses
    it. At most ``cache_bytes`` of free segments are kept; older ones are unmapped.
    """

    def __init__(self, table: SegmentTable, cache_bytes: int) -> None:
        self._table = table
        self._cache_bytes = cache_bytes
        self._lock = threading.Lock()
        self._free: dict[int, list[Segment]] = {}
        self._free_bytes = 0
        self._free_order: list[Segment] = []  # oldest first

    def block(self, nbytes: int) -> np.ndarray:
        """A block of ``nbytes`` bytes (uint8); its segment is reused once the block is gone."""
        return self.allocate(nbytes)[0]

    def allocate(self, nbytes: int) -> tuple[np.ndarray, Segment]:
        """A block of ``nbytes`` bytes and the segment that holds it."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        size = _size_class(nbytes)
        with self._lock:
            free = self._free.get(size)
            segment = free.pop() if free else None
            if segment is not None:
                self._free_order.remove(segment)
                self._free_bytes -= size
        if segment is None:
            segment = self._table.new_segment(size)
        block = segment.view(0, nbytes)
        weakref.finalize(block, self._give_back, segment)
        return block, segment

    def free_count(self) -> int:
        with self._lock:
            return len(self._free_order)

    def _give_back(self, segment: Segment) -> None:
        evicted: list[Segment] = []
        with self._lock:
            self._free.setdefault(segment.size, []).append(segment)
            self._free_order.append(segment)
            self._free_bytes += segment.size
            while self._free_order and (
                self._free_bytes > self._cache_bytes or len(self._free_order) > MAX_FREE_SEGMENTS
            ):
                old = self._free_order.pop(0)
                self._free[old.size].remove(old)
                self._free_bytes -= old.size
                evicted.append(old)
        for old in evicted:
            self._table._remove(old)

    def trim(self) -> None:
        """Unmap every free segment."""
        with self._lock:
            evicted, self._free_order = self._free_order, []
            self._free.clear()
            self._free_bytes = 0
        for old in evicted:
            self._table._remove(old)


_table: SegmentTable | None = None
_table_lock = threading.Lock()


def segment_table() -> SegmentTable:
    """This process's table (a forked child gets a new, empty one)."""
    global _table
    table = _table
    if table is None or table.pid != os.getpid():
        with _table_lock:
            if _table is None or _table.pid != os.getpid():
                _table = SegmentTable()
            table = _table
    return table


def address_of(buffer: memoryview) -> int:
    """Start address of a contiguous buffer."""
    return int(np.frombuffer(buffer, np.uint8).ctypes.data) if buffer.nbytes else 0
