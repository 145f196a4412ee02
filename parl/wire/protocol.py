"""Messages: what a caller and an actor say to each other, independent of the carrier.

A message is a kind, a call id and one Python object (the payload), encoded as one frame::

    meta = header | buffer refs | releases | new segments | dropped segments | pickle stream

    header   <B kind> <B unused> <I refs> <I releases> <I new> <I dropped> <Q call_id>
    ref      <B where> <Q segment> <Q offset> <Q length> <Q lease>
             (where: 0 inline, 1 a value in shared memory, 2 a shared handle)
    release  <Q lease>                                  leases of the peer's buffers we dropped
    new      <Q segment> <Q size> <Q slot>              one per attached file descriptor
    dropped  <Q segment>                                segments the sender no longer reuses

Out-of-band buffers either travel inline as frame bodies or, when the :class:`Link` can share
memory with the peer, as (segment, offset, length) references: a *value* (the receiver's view is
its own: writes on either side never reach the other) or a *handle* (memory both sides share on
purpose). A reference carries a lease: the
sender keeps the memory alive until the receiver's view of it is dropped and the lease comes
back in a later message's ``releases``. The local carrier implements a sharing link
(:mod:`parl.shm.link`); :class:`InlineLink` is the link of carriers that cannot share memory.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, NamedTuple, Protocol

from parl.errors import SharedHandleError
from parl.wire.framing import Frame
from parl.wire.serialization import Encoder, dumps, loads

# message kinds
INIT = 1  # caller -> actor: (class_spec, args, kwargs, environment)
CALL = 2  # caller -> actor: (method name, args, kwargs)
GETATTR = 3  # caller -> actor: attribute name
SETATTR = 4  # caller -> actor: (attribute name, value)
RESULT = 5  # actor -> caller: the return value
ERROR = 6  # actor -> caller: RemoteFailure
RESULT_HIDING = 7  # actor -> caller: (return value, names of the class's methods that the
# instance's attributes now hide), when those names changed (see parl.wire.hiding)

HEADER = struct.Struct("<BBIIIIQ")
_HEADER_SIZE = HEADER.size
_pack_header = HEADER.pack
_unpack_header = HEADER.unpack_from
REF = struct.Struct("<BQQQQ")
_Q = struct.Struct("<Q")
_QQQ = struct.Struct("<QQQ")
_INLINE, _VALUE, _HANDLE = 0, 1, 2


class SharedRef(NamedTuple):
    segment: int
    offset: int
    length: int
    lease: int
    handle: bool = False  # shared on purpose (parl.shm arrays), else a value


class Link(Protocol):
    """How one connection moves out-of-band buffers; supplied by the carrier.

    ``place``, ``take_attachments`` and ``take_releases`` are called under the connection's send
    lock; ``attach``, ``open`` and ``release`` under its receive lock.
    """

    def place(self, buffer: pickle.PickleBuffer) -> SharedRef | None:
        """Share ``buffer`` with the peer (a reference) or return None to send it inline."""

    def stage(self, nbytes: int) -> Any:
        """Writable memory to build an outgoing buffer of ``nbytes`` in (a non-contiguous
        array is copied there once and then sent like any buffer), or None."""

    def is_handle(self, address: int, nbytes: int) -> bool:
        """Whether the memory is a shared handle (a strided view of it then travels as the
        bytes it spans, so that the peer writes into the same memory)."""

    def take_attachments(self) -> tuple[list[tuple[int, int, int, int]], list[int]]:
        """Segments first referenced since the last call, as (segment, size, slot, fd), and
        the segments the peer may forget."""

    def take_releases(self) -> list[int]:
        """Leases of the peer's memory that this side no longer uses."""

    def has_news(self) -> bool:
        """Whether the next message must carry attachments, dropped segments or releases."""

    def attach(
        self, segments: list[tuple[int, int, int]], fds: list[int], dropped: list[int]
    ) -> None:
        """Take segments (segment, size, slot) received from the peer and forget the ones it
        dropped."""

    def open(self, ref: SharedRef) -> Any:
        """A writable buffer over a shared reference, releasing its lease when dropped."""

    def release(self, leases: list[int]) -> None:
        """The peer no longer uses the memory behind ``leases``."""

    def close(self) -> None:
        """Forget everything lent to or borrowed from the peer."""


class HandleFinder(Protocol):
    """Which memory of this process is a shared handle (``parl.shm``); supplied by
    :mod:`parl.shm.handles` to the links of carriers that cannot share memory."""

    def holds_handle(self, buffer: memoryview) -> bool:
        """Whether ``buffer`` lies in a shared handle."""

    def is_handle(self, address: int, nbytes: int) -> bool:
        """Whether ``[address, address + nbytes)`` lies in a shared handle."""


class InlineLink:
    """A link that shares nothing: every buffer travels inline in the frame.

    With ``handles``, a buffer of a shared handle is refused (:class:`SharedHandleError`)
    rather than sent as a copy that the peer would take for the shared memory itself. A strided
    view of a handle is reported as one (:meth:`is_handle`), so that it reaches :meth:`place`
    as the handle's own bytes instead of a contiguous copy and is refused there too."""

    def __init__(self, handles: HandleFinder | None = None) -> None:
        self._handles = handles

    def place(self, buffer: pickle.PickleBuffer) -> SharedRef | None:
        handles = self._handles
        if handles is not None and handles.holds_handle(buffer.raw()):
            raise SharedHandleError()
        return None

    def stage(self, nbytes: int) -> Any:
        return None

    def is_handle(self, address: int, nbytes: int) -> bool:
        handles = self._handles
        return handles is not None and handles.is_handle(address, nbytes)

    def take_attachments(self) -> tuple[list[tuple[int, int, int, int]], list[int]]:
        return [], []

    def take_releases(self) -> list[int]:
        return []

    def has_news(self) -> bool:
        return False

    def attach(
        self, segments: list[tuple[int, int, int]], fds: list[int], dropped: list[int]
    ) -> None:
        if fds:
            raise ValueError("this connection cannot receive shared-memory segments")

    def open(self, ref: SharedRef) -> Any:
        raise ValueError("this connection cannot receive shared-memory references")

    def release(self, leases: list[int]) -> None:
        pass

    def close(self) -> None:
        pass


class RemoteFailure(NamedTuple):
    """The payload of an ERROR reply."""

    exception: BaseException | None  # None when it could not be pickled
    type_name: str
    message: str
    traceback: str


class Incoming(NamedTuple):
    kind: int
    call_id: int
    stream: memoryview
    buffers: list[Any]

    def payload(self) -> Any:
        return loads(self.stream, self.buffers)


def encode(
    kind: int, call_id: int, payload: Any, link: Link, encoder: Encoder | None = None
) -> tuple[bytes, list[Any], list[int]]:
    """Encode a message; returns (meta, bodies, fds) for :meth:`FrameSocket.send`.

    ``encoder`` is the connection's (made with ``link`` and its class scope), else a one-off
    pickler is used. Raises :class:`parl.errors.SerializationError` when the payload cannot be
    pickled; the link is left untouched in that case.
    """
    stream, buffers = dumps(payload, link) if encoder is None else encoder.dumps(payload)
    if not buffers and not link.has_news():  # the common small message: a header and a pickle
        return _pack_header(kind, 0, 0, 0, 0, 0, call_id) + stream, [], []
    refs = bytearray()
    bodies: list[Any] = []
    for buffer in buffers:
        shared = link.place(buffer)
        if shared is None:
            refs += _INLINE_REF
            bodies.append(buffer.raw())
        else:
            where = _HANDLE if shared.handle else _VALUE
            refs += REF.pack(where, shared.segment, shared.offset, shared.length, shared.lease)
    new, dropped = link.take_attachments()
    releases = link.take_releases()
    head = _pack_header(kind, 0, len(buffers), len(releases), len(new), len(dropped), call_id)
    if not new and not dropped:  # the usual case: buffers and releases
        return b"".join((head, refs, _pack_q(releases), stream)), bodies, []
    news = [field for segment, size, slot, _ in new for field in (segment, size, slot)]
    meta = b"".join((head, refs, _pack_q(releases), _pack_q(news), _pack_q(dropped), stream))
    return meta, bodies, [fd for _, _, _, fd in new]


_INLINE_REF = REF.pack(_INLINE, 0, 0, 0, 0)


def _pack_q(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values) if values else b""


def _unpack_q(count: int, view: memoryview, pos: int) -> tuple[int, ...]:
    return struct.unpack_from(f"<{count}Q", view, pos) if count else ()


def peek(frame: Frame) -> tuple[int, int]:
    """The kind and call id of a frame, without touching its buffers."""
    kind, _, _, _, _, _, call_id = HEADER.unpack_from(frame.meta, 0)
    return kind, call_id


def decode(frame: Frame, link: Link) -> Incoming:
    """Decode a frame's header, apply its releases and segments, and open its buffers.

    The payload itself is unpickled by :meth:`Incoming.payload`, so that a payload that fails to
    load can be reported for its own call without losing the connection.
    """
    return Incoming(*decode_parts(frame.meta, frame.bodies, frame.fds, link))


def decode_parts(
    meta: bytearray, bodies: list[bytearray], fds: list[int], link: Link
) -> tuple[int, int, memoryview, list[Any]]:
    """:func:`decode` on the parts of a frame; returns ``(kind, call_id, stream, buffers)``,
    the payload being ``pickle.loads(stream, buffers=buffers)``."""
    kind, _, n_refs, n_releases, n_new, n_dropped, call_id = _unpack_header(meta, 0)
    if not (n_refs or n_releases or n_new or n_dropped or fds):
        return kind, call_id, memoryview(meta)[_HEADER_SIZE:], []
    view = memoryview(meta)
    pos = _HEADER_SIZE
    refs = [REF.unpack_from(view, pos + i * _REF_SIZE) for i in range(n_refs)] if n_refs else ()
    pos += n_refs * _REF_SIZE
    if n_releases:
        link.release(list(_unpack_q(n_releases, view, pos)))
        pos += 8 * n_releases
    if n_new or n_dropped or fds:
        news = _unpack_q(3 * n_new, view, pos)
        pos += 24 * n_new
        dropped = _unpack_q(n_dropped, view, pos)
        pos += 8 * n_dropped
        new = [(news[i], news[i + 1], news[i + 2]) for i in range(0, len(news), 3)]
        link.attach(new, fds, list(dropped))
    buffers: list[Any] = []
    inline = iter(bodies)
    for where, segment, offset, length, lease in refs:
        if where == _INLINE:
            buffers.append(next(inline))
        else:
            buffers.append(link.open(SharedRef(segment, offset, length, lease, where == _HANDLE)))
    return kind, call_id, view[pos:], buffers


_REF_SIZE = REF.size


class MethodRef(NamedTuple):
    """GETATTR's answer when the attribute is a bound method of the actor: call it remotely."""

    name: str
