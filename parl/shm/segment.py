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
finds the segment and mapping that hold a given address, and owns the
:class:`~parl.shm.allocator.Allocator` that carves blocks out of its own segments.
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
from typing import Any, NamedTuple, Protocol

import numpy as np

from parl.errors import ParlError
from parl.shm.allocator import (
    DEFAULT_CACHE_BYTES,
    Allocator,
)

_NONCE_MASK = (1 << 20) - 1
_COUNTER_MASK = (1 << 22) - 1


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
            raise limit_error(exc, "map a shared-memory segment") from exc
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
        # owner only: slot offset -> weak reference to the block (an allocator._BlockRef, which
        # also says whether it is a parl.shm handle)
        self.blocks: dict[int, Any] = {}

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
        # ids: pid, a random nonce (a later process with the same pid must not reuse the ids
        # of a dead one that its peers still know), a counter
        nonce = int.from_bytes(os.urandom(4), "little") & _NONCE_MASK
        self._id_base = ((self.pid & 0x3FFFFF) << 42) | (nonce << 22)
        self._counter = itertools.count(1)
        self.allocator = Allocator(self, cache_bytes)
        # whether a parl.shm handle ever lived here (made here, or a peer's mapped shared):
        # until then nothing sent from this process can be a handle, and the carriers that
        # cannot share memory skip looking for one
        self.handles_seen = False
        self._dropped_listeners: weakref.WeakSet[_DropListener] = weakref.WeakSet()

    # -- segments -----------------------------------------------------------------------------

    def new_segment(self, size: int, slot: int) -> Segment:
        try:
            fd = os.memfd_create(f"parl-{self.pid}", os.MFD_CLOEXEC)
        except OSError as exc:
            raise limit_error(exc, "create a shared-memory segment") from exc
        try:
            os.ftruncate(fd, size)
            segment_id = self._id_base | (next(self._counter) & _COUNTER_MASK)
            segment = Segment(segment_id, size, fd, True, slot)
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
        if not private and not segment.owned:
            self.handles_seen = True  # a peer's segment is mapped shared only for handles
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

    def is_handle(self, found: Location) -> bool:
        """Whether the memory at ``found`` is a shared handle (``parl.shm``): a peer maps a
        segment shared only for handles; the owner knows the kind of each of its blocks."""
        if found.mapping.private:
            return False
        segment = found.segment
        return not segment.owned or self.allocator.block_of(segment, found.offset)[1]

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


def limit_error(exc: OSError, what: str) -> BaseException:
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


def existing_table() -> SegmentTable | None:
    """This process's table if it has made one, without making it."""
    table = _table
    return table if table is not None and table.pid == os.getpid() else None


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
