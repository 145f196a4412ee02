"""Shared-memory segments: anonymous ``memfd`` files mapped into every process that uses them.

A segment has no name in ``/dev/shm``: it exists while some process holds its descriptor or a
mapping of it, and the kernel frees it when the last one goes, even when every process involved
is killed with SIGKILL. Nothing can leak into ``/dev/shm`` and there is nothing to reap.
Segments reach other processes as descriptors passed over the local carrier's Unix socket.

Each process maps a segment in up to two ways:

- **shared** (``MAP_SHARED``): what one process writes, every shared mapping sees. The owner
  writes outgoing copies through it, and ``parl.shm`` arrays (deliberate shared handles) are
  views of it.
- **private** (``MAP_PRIVATE``): copy-on-write. Reading costs nothing (the pages are the
  segment's own); the first write to a page gives this process a copy of that page and no other
  process ever sees it. Every array *received as a value* is a view of a private mapping, which is
  what makes values stay values: nobody but its holder can change it, and its holder's writes
  stay its own. The owner never writes a value block while a lease on it is out, so the file
  under a private view is frozen for as long as the view lives.

The :class:`SegmentTable` of a process knows every segment it maps (its own and its peers'),
finds the segment and mapping that hold a given address, and owns the :class:`Allocator` that
carves page-aligned blocks out of its own segments (many small blocks share a segment: a
descriptor and a mapping serve hundreds of them) and takes them back for reuse.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import itertools
import mmap
import os
import threading
import weakref
from collections import deque
from typing import Any, NamedTuple, Protocol

import numpy as np

from parl.errors import ParlError

PAGE = mmap.PAGESIZE
SLAB_SIZE = 1 << 26  # segments that hold many small blocks
MAX_SLOT = 1 << 22  # blocks above this get a segment of their own
DEFAULT_CACHE_BYTES = 1 << 29  # free memory kept for reuse (512 MiB)
MAX_FREE_SEGMENTS = 64  # whole free segments kept (each holds a descriptor)
MIN_SEGMENT = PAGE  # the smallest block
_MADV_POPULATE_WRITE = 23


class Mapping:
    """One mapping of a segment in this process.

    ``busy`` holds the slots of a private mapping that a live view uses: one slot (one block of
    the owner) is seen by at most one live view of a private mapping, since each value must see
    only its own writes. A second view of the same block gets another private mapping.
    """

    __slots__ = ("segment", "mmap", "address", "private", "busy", "__weakref__")

    def __init__(self, segment: Segment, private: bool) -> None:
        flags = mmap.MAP_PRIVATE if private else mmap.MAP_SHARED
        try:
            self.mmap = mmap.mmap(segment.fd, segment.size, flags, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as exc:
            raise _limit_error(exc, "map a shared-memory segment") from exc
        self.segment = segment
        self.private = private
        probe = ctypes.c_char.from_buffer(self.mmap)
        self.address = ctypes.addressof(probe)
        del probe
        self.busy: set[int] = set()

    def view(self, offset: int, length: int) -> np.ndarray:
        """A writable uint8 array over ``[offset, offset + length)`` of this mapping."""
        return np.frombuffer(self.mmap, np.uint8, length, offset)


class Segment:
    """One memfd: its descriptor and this process's mappings of it.

    ``slot`` is the size of its blocks: a slab segment holds ``size // slot`` blocks of one size
    class; a large block has a segment of its own (``slot == size``).
    """

    __slots__ = ("segment_id", "size", "fd", "owned", "slot", "shared", "privates", "blocks")

    def __init__(self, segment_id: int, size: int, fd: int, owned: bool, slot: int) -> None:
        self.segment_id = segment_id
        self.size = size
        self.fd = fd
        self.owned = owned
        self.slot = slot
        self.shared: Mapping | None = None
        self.privates: list[Mapping] = []
        # owner only: slot offset -> (weak reference to the block, is a parl.shm handle)
        self.blocks: dict[int, tuple[weakref.ref, bool]] = {}

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Location(NamedTuple):
    """Where an address lives: the mapping and the offset in its segment."""

    mapping: Mapping
    offset: int

    @property
    def segment(self) -> Segment:
        return self.mapping.segment


class _DropListener(Protocol):
    """Told when a segment leaves this process's table (links tell their peers)."""

    def segment_dropped(self, segment_id: int) -> None: ...


class SegmentTable:
    """Every segment mapped in this process, by id and by address; one per process.

    Forgetting a segment closes its descriptor and drops the table's references to its mappings;
    a mapping itself goes away with its last view, so a view stays valid while it is held.
    """

    def __init__(self, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.pid = os.getpid()
        self._lock = threading.RLock()
        self._by_id: dict[int, Segment] = {}
        self._holders: dict[int, int] = {}  # peer segment -> links that announced it
        self._starts: list[int] = []  # sorted start addresses of live mappings
        self._by_start: dict[int, weakref.ref[Mapping]] = {}
        self._counter = itertools.count(1)
        self.allocator = Allocator(self, cache_bytes)
        self._dropped_listeners: weakref.WeakSet[_DropListener] = weakref.WeakSet()

    # -- segments -----------------------------------------------------------------------------

    def new_segment(self, size: int, slot: int) -> Segment:
        try:
            fd = os.memfd_create(f"parl-{self.pid}", os.MFD_CLOEXEC)
        except OSError as exc:
            raise _limit_error(exc, "create a shared-memory segment") from exc
        try:
            os.ftruncate(fd, size)
            segment = Segment((self.pid << 32) | next(self._counter), size, fd, True, slot)
            self.mapping(segment, private=False)
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            self._by_id[segment.segment_id] = segment
        return segment

    def attach(self, segment_id: int, size: int, slot: int, fd: int) -> None:
        """Take a peer's segment (or close the descriptor when it is known already); each call
        is one holder, released by :meth:`forget`."""
        with self._lock:
            self._holders[segment_id] = self._holders.get(segment_id, 0) + 1
            if segment_id in self._by_id:
                os.close(fd)
                return
            self._by_id[segment_id] = Segment(segment_id, size, fd, False, slot or size)

    def forget(self, segment_id: int) -> None:
        """One holder of a peer's segment is gone; the last one closes it (views stay valid)."""
        with self._lock:
            left = self._holders.get(segment_id, 0) - 1
            if left > 0:
                self._holders[segment_id] = left
                return
            self._holders.pop(segment_id, None)
            segment = self._by_id.get(segment_id)
            if segment is None or segment.owned:
                return
        self._remove(segment)

    def get(self, segment_id: int) -> Segment:
        try:
            return self._by_id[segment_id]
        except KeyError:
            raise KeyError(f"shared-memory segment {segment_id:#x} is not mapped here") from None

    def mapping(self, segment: Segment, private: bool) -> Mapping:
        """The shared mapping of ``segment``, or a new private one."""
        if not private and segment.shared is not None:
            return segment.shared
        mapping = Mapping(segment, private)
        with self._lock:
            if private:
                segment.privates.append(mapping)
            elif segment.shared is None:
                segment.shared = mapping
            else:
                return segment.shared
            if mapping.address not in self._by_start:
                bisect.insort(self._starts, mapping.address)
            self._by_start[mapping.address] = weakref.ref(mapping)
            weakref.finalize(mapping, self._unlist, mapping.address)
        return mapping

    def private_view(self, segment: Segment, offset: int, length: int) -> tuple[Mapping, int, Any]:
        """A view of a private mapping of ``segment`` that no other live view shares a block
        with; returns the mapping, the slot it claimed (to give back with ``busy.discard``) and
        the view."""
        slot = offset // segment.slot
        with self._lock:
            for mapping in segment.privates:
                if slot not in mapping.busy:
                    mapping.busy.add(slot)
                    return mapping, slot, mapping.view(offset, length)
        mapping = self.mapping(segment, private=True)
        with self._lock:
            mapping.busy.add(slot)
        return mapping, slot, mapping.view(offset, length)

    def find(self, address: int, nbytes: int) -> Location | None:
        """The mapping holding ``[address, address + nbytes)`` and the offset, if any."""
        starts = self._starts
        i = bisect.bisect_right(starts, address) - 1
        if i < 0:
            return None
        ref = self._by_start.get(starts[i])
        mapping = ref() if ref is not None else None
        if mapping is None or address + nbytes > mapping.address + mapping.segment.size:
            return None
        return Location(mapping, address - mapping.address)

    def _unlist(self, address: int) -> None:
        with self._lock:
            ref = self._by_start.get(address)
            if ref is not None and ref() is None:
                del self._by_start[address]
                i = bisect.bisect_left(self._starts, address)
                if i < len(self._starts) and self._starts[i] == address:
                    del self._starts[i]

    def _remove(self, segment: Segment) -> None:
        """Forget a segment: close its descriptor and drop the table's hold on its mappings."""
        with self._lock:
            if self._by_id.get(segment.segment_id) is segment:
                del self._by_id[segment.segment_id]
            for mapping in [segment.shared, *segment.privates]:
                if mapping is not None:
                    self._by_start.pop(mapping.address, None)
                    i = bisect.bisect_left(self._starts, mapping.address)
                    if i < len(self._starts) and self._starts[i] == mapping.address:
                        del self._starts[i]
            segment.shared = None
            segment.privates = []
            segment.close_fd()
        for listener in list(self._dropped_listeners):
            listener.segment_dropped(segment.segment_id)

    def add_drop_listener(self, listener: _DropListener) -> None:
        self._dropped_listeners.add(listener)

    def stats(self) -> dict[str, int]:
        self.allocator._process_returned()
        with self._lock:
            owned = [s for s in self._by_id.values() if s.owned]
            return {
                "segments": len(self._by_id),
                "owned": len(owned),
                "owned_bytes": sum(s.size for s in owned),
                "blocks": sum(len(s.blocks) for s in owned),
                "free": self.allocator.free_count(),
            }

    def close_all(self) -> None:
        with self._lock:
            segments = list(self._by_id.values())
            self._holders.clear()
        for segment in segments:
            self._remove(segment)


class Allocator:
    """Carves page-aligned blocks out of this process's segments and reuses them.

    A block of up to ``MAX_SLOT`` bytes takes a slot of its power-of-two size class in a slab
    segment of ``SLAB_SIZE`` bytes shared with other blocks of that class; a larger block has a
    segment of its own. A block is a uint8 array over the owner's shared mapping; when the last
    reference to it goes (the caller's arrays, a lease lent to a peer, a view received back), its
    slot is free again. Up to ``cache_bytes`` of free memory is kept for reuse (a reused block
    costs no page faults); beyond that, whole free segments are closed (oldest first, but never
    the most recent one, so that a program moving one huge array again and again reuses it) and
    free slots of slabs still in use give their memory back to the kernel.
    """

    def __init__(self, table: SegmentTable, cache_bytes: int) -> None:
        self._table = table
        self._cache_bytes = cache_bytes
        self._lock = threading.Lock()
        # size class -> segment id -> free slot offsets (only slabs that have a free slot)
        self._open: dict[int, dict[int, list[int]]] = {}
        self._segments: dict[int, Segment] = {}
        self._used: dict[int, int] = {}  # segment id -> blocks in use
        self._free_segments: list[Segment] = []  # whole free segments, oldest first
        self._free_bytes = 0
        self._returned: deque[tuple[Segment, int]] = deque()  # blocks dropped, to file

    def block(self, nbytes: int, handle: bool = False) -> np.ndarray:
        """A block of ``nbytes`` bytes (uint8). ``handle``: a ``parl.shm`` array, shared with
        every process it is sent to, rather than a value."""
        return self.allocate(nbytes, handle)[0]

    def allocate(self, nbytes: int, handle: bool = False) -> tuple[np.ndarray, Segment, int]:
        """A block of ``nbytes`` bytes, the segment that holds it and its offset there."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        self._process_returned()
        slot = max(PAGE, 1 << max(0, nbytes - 1).bit_length())
        segment, offset = self._take(slot)
        self._process_returned()  # blocks dropped while _take held the lock
        assert segment.shared is not None
        block = segment.shared.view(offset, nbytes)
        segment.blocks[offset] = (weakref.ref(block), handle)
        weakref.finalize(block, self._give_back, segment, offset)
        return block, segment, offset

    def _take(self, slot: int) -> tuple[Segment, int]:
        with self._lock:
            if slot <= MAX_SLOT:
                open_slabs = self._open.get(slot)
                if open_slabs:
                    segment_id, offsets = next(iter(open_slabs.items()))
                    offset = offsets.pop()
                    if not offsets:
                        del open_slabs[segment_id]
                    self._claim(self._segments[segment_id], slot)
                    return self._segments[segment_id], offset
            else:
                for segment in self._free_segments:
                    if segment.slot == slot:
                        self._claim(segment, slot)
                        return segment, 0
        size = max(SLAB_SIZE, slot)
        segment = self._table.new_segment(size, slot)
        if slot == size and segment.shared is not None:
            try:  # fault a fresh large segment in at once: ~15% faster than page by page
                segment.shared.mmap.madvise(_MADV_POPULATE_WRITE)
            except OSError:
                pass  # kernels before 5.14
        with self._lock:
            self._segments[segment.segment_id] = segment
            self._used[segment.segment_id] = 1
            if slot < size:
                offsets = list(range(size - slot, 0, -slot))  # hand out from offset 0 up
                self._open.setdefault(slot, {})[segment.segment_id] = offsets
                self._free_bytes += size - slot
            return segment, 0

    def _claim(self, segment: Segment, slot: int) -> None:
        """Called with the lock held: one more block in use in ``segment``."""
        used = self._used[segment.segment_id]
        if used == 0:
            self._free_segments.remove(segment)
        self._free_bytes -= slot
        self._used[segment.segment_id] = used + 1

    def free_count(self) -> int:
        """Whole segments kept free for reuse."""
        self._process_returned()
        with self._lock:
            return len(self._free_segments)

    def _give_back(self, segment: Segment, offset: int) -> None:
        """A block's last reference is gone (a finalizer: it may run in any thread, and inside
        this allocator's own locked code when a collection frees a block there). The block is
        queued and the queue is processed now if the lock is free, else by its holder."""
        self._returned.append((segment, offset))
        self._process_returned()

    def _process_returned(self) -> None:
        while self._returned and self._lock.acquire(blocking=False):
            try:
                evicted, removed = self._take_returned()
            finally:
                self._lock.release()
            for segment, offset in removed:
                if segment.shared is not None:
                    # over the budget in a slab still in use: give the slot's memory back
                    segment.shared.mmap.madvise(mmap.MADV_REMOVE, offset, segment.slot)
            for old in evicted:
                self._table._remove(old)

    def _take_returned(self) -> tuple[list[Segment], list[tuple[Segment, int]]]:
        """Called with the lock held: file the returned blocks; returns the segments to close
        and the slots to give back to the kernel (done after the lock is released)."""
        evicted: list[Segment] = []
        removed: list[tuple[Segment, int]] = []
        while self._returned:
            segment, offset = self._returned.popleft()
            slot = segment.slot
            segment.blocks.pop(offset, None)
            if segment.segment_id not in self._segments:
                continue  # trimmed
            used = self._used[segment.segment_id] - 1
            self._used[segment.segment_id] = used
            self._free_bytes += slot
            if slot < segment.size:
                self._open.setdefault(slot, {}).setdefault(segment.segment_id, []).append(offset)
            if used == 0:
                self._free_segments.append(segment)
            while self._free_bytes > self._cache_bytes or (
                len(self._free_segments) > MAX_FREE_SEGMENTS
            ):
                if len(self._free_segments) > 1 or (
                    self._free_segments and self._free_segments[0] is not segment
                ):
                    old = self._free_segments.pop(0)
                    self._forget_segment(old)
                    evicted.append(old)
                else:
                    if slot < segment.size and used > 0:
                        removed.append((segment, offset))
                    break
        return evicted, removed

    def _forget_segment(self, segment: Segment) -> None:
        """Called with the lock held: a whole free ``segment`` leaves the allocator."""
        self._segments.pop(segment.segment_id, None)
        self._used.pop(segment.segment_id, None)
        self._free_bytes -= segment.size
        if segment.slot < segment.size:
            self._open[segment.slot].pop(segment.segment_id, None)

    def trim(self) -> None:
        """Close every whole free segment."""
        self._process_returned()
        with self._lock:
            evicted, self._free_segments = self._free_segments, []
            for segment in evicted:
                self._forget_segment(segment)
        for segment in evicted:
            self._table._remove(segment)

    def block_of(self, segment: Segment, offset: int) -> tuple[np.ndarray, bool]:
        """The live block holding ``offset`` of an owned segment, and whether it is a handle."""
        start = offset - offset % segment.slot
        entry = segment.blocks.get(start)
        block = entry[0]() if entry is not None else None
        if block is None or entry is None:
            raise ParlError(
                f"shared-memory block {segment.segment_id:#x}+{start} was referenced after it was "
                "freed (a bug in parl: please report it)"
            )
        return block, entry[1]


def _limit_error(exc: OSError, what: str) -> BaseException:
    """A clear error for running out of descriptors or mappings; other errors unchanged."""
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return ParlError(
            f"cannot {what}: too many open files ({exc}). Each shared-memory segment holds a "
            "descriptor; raise the limit (`ulimit -n`) or hold fewer received arrays"
        )
    if exc.errno == errno.ENOMEM:
        return ParlError(
            f"cannot {what}: out of memory or of memory mappings ({exc}); hold fewer received "
            "arrays or raise vm.max_map_count"
        )
    return exc


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
