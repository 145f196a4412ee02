"""The caller's end of one actor connection: numbered requests, replies matched to them.

There is no reader thread: whichever thread waits for a reply reads the socket (under the
receive lock) and files every reply it meets under its call id, so a plain call costs one send
and one receive with no thread hand-off. Requests may be queued without waiting (futures); when
the socket is full, the sender drains replies first, so caller and actor never block each other.

Death of the peer is seen as end of stream, as a connection error (reset, timed out, host
unreachable) or through the carrier's ``liveness`` descriptor (a pidfd for local workers) and
turns every pending and later call into the carrier's error. A thread that finds the
connection dead shuts the socket down at once, which wakes any thread blocked on it; the socket
itself is closed by the last thread to leave ``submit``, so a sender never finds its descriptor
gone under it (a raw EBADF) and always raises the carrier's error.

A connection belongs to the process that opened it. A forked child inherits the socket, but a
call from it would interleave with the parent's on the same stream: at fork every connection in
the child turns into :class:`ActorForkedError` and lets go of its copy of the socket, without
stopping the parent's worker.
"""

from __future__ import annotations

import errno
import os
import pickle
import select
import socket
import threading
import time
import weakref
from typing import Any, Protocol

from parl.errors import (
    ActorClosedError,
    ActorForkedError,
    DeserializationError,
    ParlError,
    RemoteError,
)
from parl.wire import protocol
from parl.wire.classes import ClassTable
from parl.wire.contract import CallBook, CallTimeout
from parl.wire.failure import rebuild_exception
from parl.wire.framing import SPIN_S, FrameSocket, Spin, crowded
from parl.wire.protocol import CALL, ERROR, RESULT, RESULT_HIDING, Link
from parl.wire.serialization import Encoder

_POLL_S = 0.25  # how often a waiting caller re-checks liveness without a descriptor
_PENDING = object()  # in Connection._results: submitted, no reply yet


class Liveness(Protocol):
    """How a carrier tells that the actor's process is gone."""

    def fileno(self) -> int | None:
        """A descriptor that becomes readable when the actor dies, or None."""

    def is_alive(self) -> bool: ...

    def death_error(self) -> ParlError:
        """The error every call raises once the actor is dead."""

    def close(self) -> None: ...


__all__ = ["NAMES", "CallTimeout", "Connection", "Liveness", "NameRecording", "live_connections"]


class Connection(CallBook):
    """One actor connection. ``label`` names the actor in errors (``Sampler pid=123``)."""

    def __init__(self, sock: FrameSocket, link: Link, liveness: Liveness, label: str) -> None:
        super().__init__(label)
        self._sock = sock
        self._link = link
        self._liveness = liveness
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        # call id -> _PENDING until the reply is in, then (ok, value); a call that is not here
        # was collected or dropped, and its reply is dropped on arrival
        self._results: dict[int, Any] = {}
        self.created = time.time()
        self.names: dict[int, str] = {}  # call id -> method, while a monitor records them
        # methods of the actor's class that attributes of its instance hide (parl.wire.hiding)
        self.hidden: frozenset[str] = frozenset()
        self._sending = ClassTable("caller").sending  # by-value classes the actor holds
        self._encoder = Encoder(link, self._sending)
        self._spin = Spin(SPIN_S)  # how long to spin for a reply (under the receive lock)
        self._failure: ParlError | None = None
        self._fail_lock = threading.Lock()
        self._closed = False
        live_fd = liveness.fileno()
        self._sock_fd = sock.fileno()
        self._wait_fds = [self._sock_fd] + ([live_fd] if live_fd is not None else [])
        self._poller = select.poll()  # used under the receive lock only
        for fd in self._wait_fds:
            self._poller.register(fd, select.POLLIN)
        self._finalizer = weakref.finalize(self, _close_resources, sock, link, liveness)
        self._pid = os.getpid()
        _track(self)

    # -- requests -----------------------------------------------------------------------------

    def submit(self, kind: int, payload: Any) -> int:
        """Send a request; returns its call id. Raises SerializationError (a TypeError) when the
        payload cannot be pickled, leaving the connection usable."""
        if self._failure is not None:
            raise self._failure
        self._send_lock.acquire()
        try:
            if self._failure is not None:
                raise self._failure
            self._last_id = call_id = self._last_id + 1
            sending, link = self._sending, self._link
            if sending.defined:  # left by a message cut short (Ctrl-C) before it went out:
                sending.finish(False)  # the actor never got those definitions
            try:
                meta, bodies, fds = protocol.encode(kind, call_id, payload, link, self._encoder)
            except BaseException as exc:
                if sending.defined:
                    sending.finish(False)
                if self._closed and isinstance(exc, Exception):
                    raise self._failure from None  # type: ignore[misc]
                raise
            self._results[call_id] = _PENDING  # before sending: another thread may read the reply
            if NAMES.on and kind == CALL:
                _record(self.names, call_id, payload)
            try:
                self._sock.send(meta, bodies, fds, self._drain_if_free)
            except BaseException as exc:
                self._results.pop(call_id, None)
                if _connection_lost(exc):
                    self._fail_from_peer(exc)
                if self._failure is not None and isinstance(exc, Exception):
                    # the peer is gone, or another thread found it gone (or closed the
                    # connection) while this one was sending
                    raise self._failure from None
                if self._sock.broken:  # e.g. Ctrl-C with half a message sent
                    self._break("interrupted in the middle of sending a message")
                raise
            if sending.defined:  # the definitions it carried are the actor's now
                sending.finish(True)
            return call_id
        finally:
            self._send_lock.release()
            if self._failure is not None:  # found under the send lock: close here (_let_go)
                self._finalize_later()

    def _is_pending(self, call_id: int) -> bool:
        return self._results.get(call_id) is _PENDING

    def _wait(self, call_id: int, timeout: float | None) -> Any:
        results = self._results
        recv_lock = self._recv_lock
        deadline = remaining = None
        while True:
            try:
                got = results[call_id]
            except KeyError:
                raise self._collected(call_id) from None
            if got is not _PENDING:
                break
            if self._failure is not None:
                results.pop(call_id, None)
                raise self._failure
            if timeout is not None:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + timeout
                remaining = deadline - now
                if remaining <= 0:
                    raise self._timed_out(timeout)
            if not recv_lock.acquire(True, _POLL_S if remaining is None else remaining):
                continue
            try:
                if results.get(call_id) is _PENDING and self._failure is None:
                    self._read_one(remaining)
            except Exception:
                if self._failure is None:
                    raise
                # closed (or found dead) by another thread under the read (EBADF, or
                # anything): the loop raises that error
            finally:
                recv_lock.release()
        del results[call_id]
        if got[0]:
            return got[1]
        raise got[1]

    @property
    def wait_fds(self) -> list[int]:
        """Descriptors that become readable when a reply arrives or the actor dies (to poll
        many connections at once, see ``parl.wait``); empty once the connection failed."""
        return [] if self._failure is not None else self._wait_fds

    def ready(self, call_id: int) -> bool:
        """True when the reply for ``call_id`` (or the connection's failure) is in."""
        if self._results.get(call_id) is not _PENDING or self._failure is not None:
            return True
        self._drain_if_free()
        return self._results.get(call_id) is not _PENDING or self._failure is not None

    def outstanding(self) -> int:
        """How many calls were submitted and not collected (nor dropped) yet."""
        return len(self._results)

    def pending_calls(self) -> list[int]:
        """The call ids sent whose reply has not arrived yet (for monitors: "busy")."""
        return [k for k, v in list(self._results.items()) if v is _PENDING]

    def discard(self, call_id: int) -> None:
        """Forget a call whose result nobody will collect (a dropped future): its reply is
        dropped on arrival, which also releases any shared memory it holds. Takes no lock, as
        it runs from ``Future.__del__``, possibly inside ``_read_one``."""
        self._results.pop(call_id, None)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failure(self) -> ParlError | None:
        return self._failure

    def close(self) -> None:
        """Close the connection (the actor's worker exits). Idempotent."""
        if self._closed:
            return
        if self._failure is None:
            self._failure = self._closed_error()
        self._closed = True  # after the failure: a reader that sees it raises that failure
        self._let_go()

    def poll_death(self) -> ParlError | None:
        """For monitors: the connection's failure. A worker that died unnoticed is recorded
        as a reader would record it (under the receive lock, when no reader holds it), so that
        its exit status is read once, here, and every later call raises that same error. The
        replies already here are filed first, as a reader would: a reply the worker sent before
        it died still belongs to its call."""
        if self._failure is None and self._recv_lock.acquire(blocking=False):
            try:
                if self._failure is None and not self._closed:
                    self._drain()
                if self._failure is None and not self._closed:
                    try:
                        alive = self._liveness.is_alive()
                    except OSError:  # closed by another thread meanwhile
                        alive = True
                    if not alive:
                        self._fail_from_peer(None)
            finally:
                self._recv_lock.release()
        return self._failure

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _orphan(self) -> None:
        """In a forked child: the actor is the parent's. Refuse every call, drop this process's
        copy of the socket, and never stop the worker (the finalizer would, at exit)."""
        self._finalizer.detach()
        self._failure = ActorForkedError(
            f"actor {self.label} belongs to process {self._pid}, and this process "
            f"(pid {os.getpid()}) is a fork of it: an actor can only be used by the process "
            "that created it; create the actors this process needs after the fork, in it"
        )
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass

    # -- reading ------------------------------------------------------------------------------

    def _drain_if_free(self) -> None:
        """Read the replies already here, unless another thread is reading (then it will).

        Also what a blocked send calls: the actor may be waiting for us to read its replies
        before it reads more requests."""
        if self._recv_lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self._recv_lock.release()

    def _drain(self) -> None:
        """Read every reply that is already available (with the receive lock held)."""
        while self._failure is None:
            if not self._sock.has_buffered_frame() and not self._poller.poll(0):
                return
            try:
                self._read_one(0)
            except Exception:
                if self._failure is None:
                    raise
                return  # closed by another thread under the read: waiters raise its error

    def _read_one(self, timeout: float | None) -> None:
        """Read one reply (waiting up to ``timeout``, at most ``_POLL_S``) and file it under
        its call id. The receive lock is held."""
        sock = self._sock
        if not sock.has_buffered_frame():
            spin = self._spin
            gave_up = 1.0  # no spin at all (SPIN_S is 0): nothing to learn either
            if SPIN_S:
                if not spin.seconds or timeout == 0 or crowded():
                    gave_up = time.perf_counter()  # time the wait all the same, to learn
                else:
                    try:
                        gave_up = sock.spin(min(spin.seconds, SPIN_S))
                    except OSError as exc:  # e.g. ECONNRESET: the worker was killed
                        self._fail_from_peer(exc)
                        return
                    except BaseException:
                        if sock.broken:  # e.g. Ctrl-C with part of a reply read
                            self._break("interrupted in the middle of receiving a message")
                        raise
            if gave_up:
                wait = _POLL_S if timeout is None else min(timeout, _POLL_S)
                ready = self._poller.poll(wait * 1000 + 0.999)
                if not ready:
                    if len(self._wait_fds) == 1 and not self._liveness.is_alive():
                        self._fail_from_peer(None)
                    if SPIN_S:
                        spin.missed(SPIN_S)  # a long wait
                    return
                for fd, _ in ready:
                    if fd == self._sock_fd:
                        break
                else:
                    self._fail_from_peer(None)  # the liveness descriptor fired: worker gone
                    return
                if SPIN_S and gave_up != 1.0:
                    spin.missed(spin.seconds + time.perf_counter() - gave_up)
        try:
            parts = sock.recv_parts()
        except OSError as exc:
            self._fail_from_peer(exc)
            return
        except BaseException:
            if sock.broken:  # e.g. Ctrl-C with half a reply read
                self._break("interrupted in the middle of receiving a message")
            raise
        if parts is None:
            self._fail_from_peer(None)
            return
        meta, bodies, fds = parts
        try:
            kind, call_id, stream, buffers = protocol.decode_parts(meta, bodies, fds, self._link)
        except Exception as exc:  # noqa: BLE001 - e.g. out of descriptors: fail this call only
            call_id = protocol.HEADER.unpack_from(meta, 0)[-1]
            error = (
                exc if isinstance(exc, ParlError) else RemoteError(f"{type(exc).__name__}: {exc}")
            )
            self._file(call_id, False, error)
            return
        results = self._results
        if results.get(call_id) is not _PENDING and kind != RESULT_HIDING:
            return  # its future was dropped (the names a RESULT_HIDING brings are kept)
        try:
            payload = pickle.loads(stream, buffers=buffers)
        except Exception as exc:  # noqa: BLE001 - e.g. a remote exception type missing here
            self._file(
                call_id,
                False,
                DeserializationError(
                    f"the reply of {self.label} could not be unpickled here: "
                    f"{type(exc).__name__}: {exc}"
                ),
            )
            return
        if kind == RESULT:
            if call_id in results:  # else its future was dropped while the payload loaded
                results[call_id] = (True, payload)
        elif kind == RESULT_HIDING:
            payload, self.hidden = payload
            self._file(call_id, True, payload)
        elif kind == ERROR:
            self._file(call_id, False, rebuild_exception(payload, self.label))
        else:
            self._file(call_id, False, RemoteError(f"unexpected message kind {kind}"))

    def _file(self, call_id: int, ok: bool, value: Any) -> None:
        if self._results.get(call_id) is _PENDING:  # else its future was dropped meanwhile
            self._results[call_id] = (ok, value)

    def _break(self, why: str) -> None:
        """The stream is out of step: no later message can be trusted. Close the actor."""
        if self._failure is None:
            self._failure = ActorClosedError(
                f"actor {self.label} was closed: {why}; create a new actor"
            )
        self.close()

    def _fail_from_peer(self, exc: BaseException | None) -> None:
        if self._failure is None:
            # one thread asks the liveness (a reader and a sender can find the end together;
            # the exit status is read once, and the error each raises is the same)
            with self._fail_lock:
                if self._failure is None:
                    failure = self._liveness.death_error()
                    if exc is not None and not isinstance(exc, ParlError):
                        failure.__cause__ = exc
                    self._failure = failure
        self._let_go()

    def _let_go(self) -> None:
        """After the failure is set: shut the socket down at once (a thread blocked sending or
        reading on it wakes with an error, which it turns into the failure), and close it, the
        link and the liveness unless a thread is sending. Closing under a sender would pull
        its descriptor away between two ``sendmsg`` calls (EBADF, or worse, another file that
        took the same number); that sender closes them as it leaves ``submit`` instead."""
        if self._pid == os.getpid():  # (a forked child's shutdown would end the parent's)
            try:
                self._sock.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected any more, or closed already
        self._finalize_later()

    def _finalize_later(self) -> None:
        # the failure was set before this tries the lock, and a sender looks at the failure
        # after it lets go of the lock: one of the two always closes
        if self._send_lock.acquire(blocking=False):
            try:
                self._finalizer()
            finally:
                self._send_lock.release()


# errors of a send or read that mean the peer or the path to it is gone (EBADF: the socket was
# closed by a thread that found it gone)
_LOST_ERRNOS = frozenset(
    {
        errno.EPIPE,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.EHOSTDOWN,
        errno.ENOTCONN,
        errno.EBADF,
    }
)


def _connection_lost(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionError) or (
        isinstance(exc, OSError) and exc.errno in _LOST_ERRNOS
    )


class NameRecording:
    """Whether calls note their method names in ``Connection.names`` (a monitor's "busy in
    step()"): on while any user holds it.

    Each user (a running ``parl.monitor``, the carrier of a monitored cluster) takes one
    :meth:`hold` and releases it when it ends. A hold counts once, however often it is
    released, so closing one monitor twice cannot switch off the names another one needs."""

    def __init__(self) -> None:
        self.on = False  # read by every submit: a plain attribute
        self._holds: set[NameRecordingHold] = set()
        self._lock = threading.Lock()

    def hold(self) -> NameRecordingHold:
        """Switch recording on until the returned hold is released."""
        hold = NameRecordingHold(self)
        with self._lock:
            self._holds.add(hold)
            self.on = True
        return hold

    @property
    def holders(self) -> int:
        """How many holds are not released yet."""
        return len(self._holds)

    def _release(self, hold: NameRecordingHold) -> None:
        with self._lock:
            self._holds.discard(hold)
            self.on = bool(self._holds)


class NameRecordingHold:
    """One user's share of a :class:`NameRecording`; :meth:`release` is idempotent."""

    __slots__ = ("_switch",)

    def __init__(self, switch: NameRecording) -> None:
        self._switch = switch

    def release(self) -> None:
        """Give the share back (recording stops when no other hold is left)."""
        self._switch._release(self)


# on while a monitor (parl.monitor, a monitored cluster) runs: submit() notes the method names
NAMES = NameRecording()


_NAMES_KEPT = 64


def _record(names: dict[int, str], call_id: int, payload: Any) -> None:
    names[call_id] = str(payload[0])
    if len(names) > _NAMES_KEPT:
        del names[next(iter(names))]


def live_connections() -> list[Connection]:
    """The connections of this process that are still referenced (for monitors)."""
    with _live_lock:
        return list(_live) if _live is not None else []


_live: weakref.WeakSet[Connection] | None = None
_live_lock = threading.Lock()


def _track(conn: Connection) -> None:
    """Remember ``conn`` so that a fork can orphan it in the child (the hook is installed with
    the first connection, not at import)."""
    global _live
    with _live_lock:
        if _live is None:
            _live = weakref.WeakSet()
            os.register_at_fork(after_in_child=_orphan_all)
        _live.add(conn)


def _orphan_all() -> None:
    global _live_lock
    _live_lock = threading.Lock()  # another thread of the parent may have held it
    if _live is not None:
        for conn in list(_live):
            conn._orphan()


def _close_resources(sock: FrameSocket, link: Link, liveness: Liveness) -> None:
    try:
        sock.close()
    finally:
        link.close()
        liveness.close()
