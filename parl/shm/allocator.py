"""The allocator of a process's own shared memory: page-aligned blocks in memfd segments.

Many small blocks share a segment (a descriptor and a mapping serve hundreds of them); a large
block has a segment of its own. A block goes back to a free list when its last reference goes,
and is reused by the next request of its size class (a reused block costs no page faults).
"""

from __future__ import annotations

import mmap
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from parl.errors import ParlError

if TYPE_CHECKING:
    from parl.shm.segment import Segment, SegmentTable

PAGE = mmap.PAGESIZE
SLAB_SIZE = 1 << 26  # segments that hold many small blocks
MAX_SLOT = 1 << 22  # blocks above this get a segment of their own
DEFAULT_CACHE_BYTES = 1 << 29  # free memory kept for reuse (512 MiB)
MAX_FREE_SEGMENTS = 16  # whole free segments kept (each holds a descriptor here and in peers)
MIN_SEGMENT = PAGE  # the smallest block
_MADV_POPULATE_WRITE = 23


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
        if handle:
            self._table.handles_seen = True
        slot = max(PAGE, 1 << max(0, nbytes - 1).bit_length())
        segment, offset = self._take(slot)
        self._process_returned()  # blocks dropped while _take held the lock
        assert segment.shared is not None
        block = segment.shared.view(offset, nbytes)
        segment.blocks[offset] = _BlockRef(block, self._block_died, segment, offset, handle)
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
                # the most recently freed first: its pages are warm, and the peer that held it
                # last still has it mapped (the oldest go first when the cache is trimmed)
                for segment in reversed(self._free_segments):
                    if segment.slot == slot:
                        self._claim(segment, slot)
                        return segment, 0
        size = SLAB_SIZE if slot <= MAX_SLOT else slot  # large blocks: a segment each
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

    def _block_died(
        self, ref: _BlockRef, _finalizing: Callable[[], bool] = sys.is_finalizing
    ) -> None:
        """A block's last reference is gone (a weak reference's callback: it may run in any
        thread, and inside this allocator's own locked code when a collection frees a block
        there). The block is queued and the queue is processed now if the lock is free, else by
        its holder. A block still alive when the interpreter shuts down goes with the process:
        nothing is filed then, as module teardown may have emptied the globals it would use."""
        if _finalizing():
            return
        self._returned.append((ref.segment, ref.offset))
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
        block = entry() if entry is not None else None
        if block is None or entry is None:
            raise ParlError(
                f"shared-memory block {segment.segment_id:#x}+{start} was referenced after it was "
                "freed (a bug in parl: please report it)"
            )
        return block, entry.handle


class _BlockRef(weakref.ref):
    """The owner's weak reference to a live block, whose callback gives the block back (a
    ``weakref.finalize`` costs about 4x as much to make and to run). The segment keeps it
    alive, in ``Segment.blocks``, until the block has been filed as free again."""

    __slots__ = ("segment", "offset", "handle")

    def __new__(cls, block: Any, callback: Any, segment: Segment, offset: int, handle: bool) -> Any:
        return super().__new__(cls, block, callback)

    def __init__(
        self, block: Any, callback: Any, segment: Segment, offset: int, handle: bool
    ) -> None:
        super().__init__(block, callback)  # type: ignore[call-arg]
        self.segment = segment
        self.offset = offset
        self.handle = handle
