"""Frames over a connected stream socket, with file descriptors passed alongside.

A frame is ``prefix | body lengths | meta | bodies``::

    prefix  <Q meta_len> <I body_count> <I fd_count>
    lengths body_count x <Q length>

``meta`` is opaque to this layer (the protocol puts its header and pickle stream there); each
body is one out-of-band buffer sent inline. File descriptors (shared-memory segments) ride with
the first bytes of the frame as ``SCM_RIGHTS`` on Unix sockets (at most ``MAX_FDS`` per byte)
and are handed back with the frame.

Sending is one ``sendmsg`` with a gather list: payloads are never joined. Receiving reads ahead
into a reusable buffer, so a burst of small frames costs one system call, and reads a large body
straight into its own memory with ``recv_into``.
"""

from __future__ import annotations

import array
import os
import select
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

PREFIX = struct.Struct("<QII")
_PREFIX_SIZE = PREFIX.size
_pack_prefix = PREFIX.pack
_unpack_prefix = PREFIX.unpack_from
MAX_FDS = 250  # descriptors per sendmsg (the kernel takes at most 253); a frame may carry more
_READ_AHEAD = 1 << 16
_ANC_SIZE = socket.CMSG_SPACE(MAX_FDS * 4)
_IOV_MAX = 512  # parts per sendmsg (the kernel's limit is 1024)
# the longest a reader polls before it sleeps (see FrameSocket.spin, Spin); PARL_SPIN_US=0 in
# the environment turns polling off (a machine where every core is needed for other work)
SPIN_S = float(os.environ.get("PARL_SPIN_US") or 500) * 1e-6


class FrameTooLarge(ConnectionError):
    """A peer announced a frame larger than this connection's ``max_frame``: the connection
    is dropped before anything of that size is allocated."""


class Frame(NamedTuple):
    meta: bytearray
    bodies: list[bytearray]
    fds: list[int]


class FrameSocket:
    """Sends and receives :class:`Frame` objects on a connected stream socket.

    Not thread-safe: callers serialise ``send`` and ``recv`` with their own locks (one lock for
    each direction is enough).

    ``max_frame``: the largest frame (meta and bodies, in bytes) accepted from the peer, and
    sent to it; None for no limit (a local peer). A larger announced frame raises
    :class:`FrameTooLarge` and breaks the stream; a larger frame to send raises ValueError
    before a byte of it goes out.
    """

    def __init__(self, sock: socket.socket, max_frame: int | None = None) -> None:
        sock.setblocking(True)
        self.sock = sock
        self.max_frame = max_frame
        self._unix = sock.family == socket.AF_UNIX
        self._buf = bytearray(_READ_AHEAD)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._fds: deque[int] = deque()
        self._sending = False
        self._spin_poll: select.poll | None = None
        self.broken = False  # a frame was cut by an exception: the stream is out of step

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            while self._fds:
                _close_quietly(self._fds.popleft())

    # -- sending ------------------------------------------------------------------------------

    def send(
        self,
        meta: bytes,
        bodies: Sequence[memoryview | bytes | bytearray] = (),
        fds: Sequence[int] = (),
        on_blocked: Callable[[], None] | None = None,
    ) -> None:
        """Send one frame. ``on_blocked`` runs when the socket is full and readable data is
        waiting: the caller drains replies there, so two peers can never block each other.

        If this raises after part of the frame went out (``self.broken``), the stream is out of
        step and the socket must be dropped."""
        if self.max_frame is not None and (bodies or len(meta) > self.max_frame):
            self._check_size(meta, bodies)
        if not bodies and not fds and not self.broken:  # a small message: one system call
            data = _pack_prefix(len(meta), 0, 0) + meta
            try:
                sent = self.sock.send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                sent = 0
            except BaseException:
                # a signal handled as the call returned (Ctrl-C) hides how much went out
                self.broken = True
                raise
            if sent != len(data):
                self._sending = sent > 0
                self._send_parts([memoryview(data)[sent:]], [], on_blocked)
            return
        if self.broken:
            raise ConnectionResetError("the connection broke in the middle of a frame")
        if fds and not self._unix:
            raise ValueError("file descriptors can only be passed over a Unix socket")
        lengths = struct.pack(f"<{len(bodies)}Q", *(memoryview(b).nbytes for b in bodies))
        head = memoryview(PREFIX.pack(len(meta), len(bodies), len(fds)) + lengths + meta)
        parts: list[memoryview] = []
        # descriptors ride on the head's first bytes, MAX_FDS on each byte
        chunks = [list(fds[i : i + MAX_FDS]) for i in range(0, len(fds), MAX_FDS)]
        for i, chunk in enumerate(chunks[:-1]):
            self._send_parts([head[i : i + 1]], chunk, on_blocked)
        skip = max(0, len(chunks) - 1)
        parts.append(head[skip:])
        parts.extend(m for m in (memoryview(b).cast("B") for b in bodies) if m.nbytes)
        self._send_parts(parts, chunks[-1] if chunks else [], on_blocked)

    def _check_size(self, meta: bytes, bodies: Sequence[memoryview | bytes | bytearray]) -> None:
        size = len(meta) + sum(memoryview(b).nbytes for b in bodies)
        if self.max_frame is not None and size > self.max_frame:
            raise ValueError(
                f"a message of {size} bytes is larger than this connection's max_frame of "
                f"{self.max_frame} bytes; send less at once, or raise max_frame (e.g. "
                "parl.connect(address, max_frame=...))"
            )

    def _send_parts(
        self, parts: list[memoryview], fds: list[int], on_blocked: Callable[[], None] | None
    ) -> None:
        ancillary = (
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        )
        flags = socket.MSG_DONTWAIT if on_blocked is not None else 0
        try:
            while parts:
                was_sending, self._sending = self._sending, True  # see send's fast path
                try:
                    sent = self.sock.sendmsg(parts[:_IOV_MAX], ancillary, flags)
                except BlockingIOError:
                    self._sending = was_sending
                    assert on_blocked is not None
                    poller = select.poll()
                    poller.register(self.sock.fileno(), select.POLLIN | select.POLLOUT)
                    if any(ev & ~select.POLLOUT for _, ev in poller.poll(1000)):
                        on_blocked()  # replies are waiting: read them so the peer can go on
                    continue
                ancillary = []
                while sent:
                    first = parts[0]
                    if sent >= first.nbytes:
                        sent -= first.nbytes
                        parts.pop(0)
                    else:
                        parts[0] = first[sent:]
                        sent = 0
        except BaseException:
            if self._sending:
                self.broken = True
            raise
        self._sending = False

    # -- receiving ----------------------------------------------------------------------------

    def has_buffered_frame(self) -> bool:
        """True when a whole frame prefix is already buffered (recv will not wait for it)."""
        return self._end - self._start >= PREFIX.size

    def recv(self) -> Frame | None:
        """Receive one frame; None on a clean end of stream between frames."""
        parts = self.recv_parts()
        return None if parts is None else Frame(*parts)

    def recv_parts(self) -> tuple[bytearray, list[bytearray], list[int]] | None:
        """:meth:`recv` as a plain ``(meta, bodies, fds)`` tuple: the hot path of every call.

        A small frame that one read brings in whole costs that read and one ``unpack``."""
        if self.broken:
            raise ConnectionResetError("the connection broke in the middle of a frame")
        start = self._start
        if start == self._end:  # nothing buffered: read what is there, blocking for it
            self._start = self._end = start = 0
            if self._recv_some(0) == 0:
                return None
        if self._end - start >= _PREFIX_SIZE:
            meta_len, body_count, fd_count = _unpack_prefix(self._buf, start)
            stop = start + _PREFIX_SIZE + meta_len
            if stop <= self._end and not body_count and not fd_count:
                self._start = stop
                return self._buf[start + _PREFIX_SIZE : stop], [], []
        if not self._fill_to(PREFIX.size, eof_ok=True):
            return None
        try:
            return self._recv_rest()
        except BaseException:
            self.broken = True  # part of the frame is consumed: the stream is out of step
            raise

    def _recv_rest(self) -> tuple[bytearray, list[bytearray], list[int]]:
        meta_len, body_count, fd_count = PREFIX.unpack_from(self._buf, self._start)
        self._start += PREFIX.size
        limit = self.max_frame
        if limit is not None and meta_len + 8 * body_count > limit:
            raise FrameTooLarge(f"the peer announced a frame over max_frame ({limit} bytes)")
        lengths: tuple[int, ...] = ()
        if body_count:
            self._fill_to(8 * body_count)
            lengths = struct.unpack_from(f"<{body_count}Q", self._buf, self._start)
            self._start += 8 * body_count
            if limit is not None and meta_len + sum(lengths) > limit:
                raise FrameTooLarge(f"the peer announced a frame over max_frame ({limit} bytes)")
        meta = bytearray(meta_len)
        self._read_into(memoryview(meta))
        # every descriptor rode on the head, which has been read by now
        # (fewer when the kernel dropped some: this process is out of descriptors; the
        # stream stays in step and the receiver reports the shortfall)
        fds = [self._fds.popleft() for _ in range(min(fd_count, len(self._fds)))]
        bodies = []
        for length in lengths:
            body = bytearray(length) if length < _LARGE_BODY else _uninitialised(length)
            self._read_into(memoryview(body).cast("B"))
            bodies.append(body)
        return meta, bodies, fds

    def _read_into(self, target: memoryview) -> None:
        n = target.nbytes
        have = min(n, self._end - self._start)
        if have:
            target[:have] = self._view[self._start : self._start + have]
            self._start += have
        while have < n:
            if n - have >= _READ_AHEAD // 2:
                got = self.sock.recv_into(target[have:], n - have)
                if got == 0:
                    raise ConnectionResetError("peer closed the connection inside a frame")
                have += got
            else:
                self._fill_to(min(n - have, _READ_AHEAD))
                take = min(n - have, self._end - self._start)
                target[have : have + take] = self._view[self._start : self._start + take]
                self._start += take
                have += take

    def spin(self, seconds: float) -> float:
        """Poll without blocking for up to ``seconds``: 0.0 once data (or end of stream) is
        here, else the ``perf_counter`` time at which it gave up. A peer that answers within
        the spin is met without a sleep and a wake-up, which on a virtual machine costs more
        than the whole round trip. (It does not yield the CPU between turns: a yielding process
        loses its core to any busy process for a whole time slice.)"""
        if self._end > self._start:
            return 0.0
        poll = self._spin_poll
        if poll is None:
            poll = self._spin_poll = select.poll()
            poll.register(self.sock.fileno(), select.POLLIN)
        now = time.perf_counter()
        deadline = now + seconds
        # poll(0), not a non-blocking recv: a recv locks the socket, and a TCP segment that
        # arrives meanwhile waits in the socket's backlog until the recv lets go (a few µs
        # per round trip on loopback TCP, less on a Unix socket); the read that follows a
        # successful poll finds the data there
        while now < deadline:
            if poll.poll(0):
                return 0.0
            now = time.perf_counter()
        return now

    def _fill_to(self, n: int, eof_ok: bool = False) -> bool:
        """Make at least ``n`` bytes available in the read-ahead buffer."""
        if n > len(self._buf):  # e.g. the length table of a frame with 70,000 buffers
            self._view.release()
            self._buf.extend(bytes(n - len(self._buf)))
            self._view = memoryview(self._buf)
        while self._end - self._start < n:
            if self._start + n > len(self._buf):
                remaining = self._end - self._start
                self._buf[:remaining] = self._buf[self._start : self._end]
                self._start, self._end = 0, remaining
            if self._recv_some(0) == 0:
                if eof_ok and self._start == self._end:
                    return False
                raise ConnectionResetError("peer closed the connection inside a frame")
        return True

    def _recv_some(self, flags: int) -> int:
        """One read into the free end of the buffer: bytes read, 0 at end of stream, -1 when
        nothing is available (only with MSG_DONTWAIT)."""
        if self._start == self._end:
            self._start = self._end = 0
        try:
            if self._unix:
                got, ancdata, _, _ = self.sock.recvmsg_into(
                    [self._view[self._end :]], _ANC_SIZE, flags
                )
                for level, kind, data in ancdata:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds = array.array("i")
                        fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                        self._fds.extend(fds)
            else:
                got = self.sock.recv_into(self._view[self._end :], 0, flags)
        except BlockingIOError:
            return -1
        except BaseException as exc:
            if not isinstance(exc, OSError):
                # a signal handled as the call returned (Ctrl-C): what it read is lost, and the
                # stream is out of step (a read here never sleeps on the caller's side, so
                # the signal did not interrupt a wait)
                self.broken = True
            raise
        self._end += got
        return got


class Spin:
    """How long a reader spins before it sleeps, learnt from how long it waited before.

    A reply (or a busy caller's next request) that comes within a few hundred microseconds is
    best met spinning; one that takes longer only burns a core. After each wait that the spin
    missed, the spin becomes 1.5 times that wait when it was short (below ``cap``), and half
    of what it was when it was long; a wait that the spin met keeps it as it is.

    Spinning only pays on a core nobody else wants: a spinning process competes with every
    runnable one (the actors of a fan-out computing their replies, another program), and the
    scheduler makes it pay that back with whole time slices spent waiting. So a reader spins
    only while no more processes are runnable than there are cores (:func:`crowded`)."""

    __slots__ = ("seconds", "cap")

    def __init__(self, cap: float) -> None:
        self.cap = cap
        self.seconds = cap

    def missed(self, waited: float) -> None:
        """A wait that the spin did not meet took ``waited`` seconds."""
        if waited < self.cap:
            self.seconds = min(self.cap, max(1.5 * waited, 20e-6))
        else:
            self.seconds = self.seconds / 2 if self.seconds > 10e-6 else 0.0


_loadavg: tuple[int, int] | None = None  # (descriptor of /proc/loadavg, cores)


def _forget_loadavg() -> None:
    """In a forked child: its cores may differ (affinity); the descriptor is shared, which
    is harmless (pread has no file position), and is opened anew on first use."""
    global _loadavg
    _loadavg = None


os.register_at_fork(after_in_child=_forget_loadavg)


def crowded(extra: int = 0) -> bool:
    """Whether more processes (and threads) are runnable right now, plus ``extra``, than this
    process has cores (``/proc/loadavg``'s running count, which includes the caller itself;
    about 3 µs). False where the kernel does not say."""
    global _loadavg
    try:
        if _loadavg is None:
            fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
            _loadavg = (fd, len(os.sched_getaffinity(0)))
        line = os.pread(_loadavg[0], 128, 0)  # b"0.50 0.40 0.30 3/120 12345"
        return int(line.split(None, 4)[3].split(b"/")[0]) + extra > _loadavg[1]
    except (OSError, ValueError, IndexError):
        return False


_LARGE_BODY = 1 << 22


def _uninitialised(nbytes: int) -> bytearray:
    """Memory for a large body that is about to be overwritten: numpy's allocator neither
    zero-fills it (``bytearray(n)`` does, a pass over the memory) and asks for huge pages, so
    receiving 128 MiB into it costs a third of what it does into a bytearray. (numpy is
    imported only here, by a process that receives a body this large.)"""
    try:
        import numpy
    except ImportError:
        return bytearray(nbytes)
    return numpy.empty(nbytes, numpy.uint8)  # type: ignore[return-value]  # a writable buffer


def wait_readable(fds: Sequence[int], timeout: float | None) -> list[int]:
    """The descriptors of ``fds`` that are readable (or failed) within ``timeout`` seconds.

    ``poll`` rather than ``select``: descriptor numbers above 1024 are normal here (each shared
    segment holds one)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
    return [fd for fd, _ in poller.poll(ms)]


def _close_quietly(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass
