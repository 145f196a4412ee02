"""The local carrier's :class:`~parl.wire.protocol.Link`: buffers cross as shared memory.

Outgoing buffers that already live in a shared segment (a view received from another process,
or an array made with :func:`parl.shm.empty` and friends) are sent as references: nothing is
copied. Other buffers at or above ``threshold`` bytes are copied once into a reused block of one
of this process's segments; smaller ones travel inline. Each reference is a lease: the memory
behind it is kept alive here until the peer's last view of it is dropped.
"""

from __future__ import annotations

import itertools
import pickle
import threading
import weakref
from collections import deque
from typing import Any

import numpy as np

from parl.shm.segment import SegmentTable, address_of
from parl.wire.protocol import SharedRef

DEFAULT_THRESHOLD = 1 << 17  # 128 KiB: below this a buffer is cheaper inline


class ShmLink:
    def __init__(self, table: SegmentTable, threshold: int = DEFAULT_THRESHOLD) -> None:
        self._table = table
        self._threshold = threshold
        self._lock = threading.Lock()
        self._peer_has: set[int] = set()  # segments the peer has been given a descriptor of
        self._new: list[tuple[int, int, int]] = []
        self._dropped: list[int] = []
        self._received: set[int] = set()
        self._leases: dict[int, Any] = {}
        self._lease_ids = itertools.count(1)
        self._releases: deque[int] = deque()
        table.add_drop_listener(self)

    # -- sending side -------------------------------------------------------------------------

    def place(self, buffer: pickle.PickleBuffer) -> SharedRef | None:
        raw = buffer.raw()
        nbytes = raw.nbytes
        found = self._table.find(address_of(raw), nbytes) if nbytes else None
        keep: Any
        if found is not None:
            segment, offset = found
            keep = buffer
        elif nbytes >= self._threshold:
            block, segment = self._table.allocator.allocate(nbytes)
            np.copyto(block, np.frombuffer(raw, np.uint8))
            offset, keep = 0, block
        else:
            return None
        lease = next(self._lease_ids)
        self._leases[lease] = keep
        with self._lock:
            if segment.segment_id not in self._peer_has:
                self._peer_has.add(segment.segment_id)
                self._new.append((segment.segment_id, segment.size, segment.fd))
        return SharedRef(segment.segment_id, offset, nbytes, lease)

    def take_attachments(self) -> tuple[list[tuple[int, int, int]], list[int]]:
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

    def segment_dropped(self, segment_id: int) -> None:
        with self._lock:
            if segment_id in self._peer_has:
                self._peer_has.discard(segment_id)
                self._dropped.append(segment_id)

    # -- receiving side -----------------------------------------------------------------------

    def attach(self, segments: list[tuple[int, int]], fds: list[int], dropped: list[int]) -> None:
        if len(segments) != len(fds):
            raise ValueError(f"{len(segments)} segments announced but {len(fds)} descriptors came")
        for (segment_id, size), fd in zip(segments, fds, strict=True):
            self._table.attach(segment_id, size, fd)
            self._received.add(segment_id)
        for segment_id in dropped:
            self._received.discard(segment_id)
            self._table.forget(segment_id)

    def open(self, ref: SharedRef) -> Any:
        view = self._table.get(ref.segment).view(ref.offset, ref.length)
        weakref.finalize(view, self._releases.append, ref.lease)
        return view

    def release(self, leases: list[int]) -> None:
        pop = self._leases.pop
        for lease in leases:
            pop(lease, None)

    def close(self) -> None:
        self._leases.clear()
        for segment_id in list(self._received):
            self._table.forget(segment_id)
        self._received.clear()

    def lease_count(self) -> int:
        return len(self._leases)
