"""A doorbell between a caller and one local actor: two named pipes (FIFOs), one byte each way
per round, for hot loops whose data already sits in shared arrays (``parl.env.RemoteVectorEnv``).

A remote call costs a pickled request, a frame, a dispatch and a pickled reply on each side
(about 75 Python-level calls in the caller per call); a round whose data is in shared arrays
needs none of that, only "go" and "done". The actor runs one long call (:meth:`ActorBell.serve`)
that reads a byte, runs a function, and writes a byte back (followed by a pickle of what the
function returned, when that is not empty); any other request first stops that call
(:meth:`CallerBell.stop`) and goes through the ordinary remote API.

Waiting follows the call path's policy (:class:`parl.wire.framing.Spin`): spin briefly for the
other side when the machine is not crowded (a sleep and a wake-up cost more than the round on a
virtual machine), else block.

The FIFOs are made in a private temporary folder (mode 0700) and unlinked as soon as both ends
are open, so nothing is left in the file system. End of stream on either side means the other
side is gone: the caller then reports the actor's own error (its death, or the exception
:meth:`ActorBell.serve` raised), the actor returns from :meth:`ActorBell.serve`. Actors on
another host cannot open the FIFOs; ``RemoteVectorEnv`` then keeps to ordinary calls.

The order of a session: the caller makes a :class:`CallerBell`; the actor, in a remote call,
makes an :class:`ActorBell` from the caller's ``paths``; the caller then calls
:meth:`CallerBell.connect`, starts the actor's long :meth:`ActorBell.serve` call (a future it
does not wait for), and from then on each round is :meth:`CallerBell.ring` and
:meth:`CallerBell.answer` (or :func:`answers` for several actors). :meth:`CallerBell.stop` ends
the serving call, after which the actor takes ordinary calls again.
"""

from __future__ import annotations

import os
import pickle
import select
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from typing import Any

from parl.wire.forking import drop_in_child
from parl.wire.framing import SPIN_S, Spin, crowded

GO = b"g"  # caller -> actor: step now
STOP = b"s"  # caller -> actor: return from serve()
DONE = b"d"  # actor -> caller: stepped, no infos
INFOS = b"i"  # actor -> caller: stepped, infos follow (4-byte length, then a pickle)
FAILED = b"f"  # actor -> caller: the step raised; serve() returns with the exception
_LENGTH = struct.Struct("<I")


def _read_exact(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd``, or None at end of stream."""
    data = os.read(fd, n)
    while len(data) < n:
        if not data:
            return None
        more = os.read(fd, n - len(data))
        if not more:
            return None
        data += more
    return data


def _wait_readable(poller: select.poll, spin: Spin, may_spin: bool) -> None:
    """Until the descriptor registered in ``poller`` is readable: spin first when allowed."""
    if not SPIN_S:
        poller.poll()
        return
    now = time.perf_counter()
    if may_spin and spin.seconds:
        deadline = now + spin.seconds
        while now < deadline:
            if poller.poll(0):
                return
            now = time.perf_counter()
    if poller.poll(0):
        return
    poller.poll()
    spin.missed(spin.seconds + time.perf_counter() - now)


def _poller(fd: int) -> select.poll:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return poller


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class CallerBell:
    """The caller's ends: ``request`` (write) and ``reply`` (read) descriptors. Not thread-safe."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="parl-bell-")  # mode 0700
        self.paths = (os.path.join(self.folder, "request"), os.path.join(self.folder, "reply"))
        self.request = self.reply = -1
        for path in self.paths:
            os.mkfifo(path, 0o600)
        # opened without blocking (no writer yet); the actor's open for writing then succeeds
        self.reply = os.open(self.paths[1], os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._poller = _poller(self.reply)
        self._spin = Spin(SPIN_S)
        drop_in_child(self)

    def _drop_in_child(self) -> None:
        """In a process the caller forks: close this copy of the ends, so that the actor still
        sees the end of the stream when the caller closes or dies (the folder is the parent's)."""
        for fd in (self.request, self.reply):
            if fd >= 0:
                os.close(fd)
        self.request = self.reply = -1

    def connect(self) -> None:
        """After the actor opened its ends (made its :class:`ActorBell` from ``paths``)."""
        try:
            self.request = os.open(self.paths[0], os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.set_blocking(self.request, True)
            os.set_blocking(self.reply, True)
        finally:
            self.unlink()

    def unlink(self) -> None:
        """Remove the FIFOs' folder (the open ends keep working)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def ring(self) -> None:
        """Tell the actor to run its step once; :meth:`answer` waits for it."""
        os.write(self.request, GO)

    def answer(self, may_spin: bool = False) -> tuple[bytes, Any]:
        """Wait for the actor's answer: (DONE, None), (INFOS, value), (FAILED, None), or
        (b"", None) when the actor is gone. ``may_spin``: the caller found the machine not
        crowded (see ``parl.wire.framing.crowded``; one look serves several bells)."""
        _wait_readable(self._poller, self._spin, may_spin)
        kind = os.read(self.reply, 1)
        if kind != INFOS:
            return kind, None
        header = _read_exact(self.reply, _LENGTH.size)
        body = None if header is None else _read_exact(self.reply, _LENGTH.unpack(header)[0])
        if body is None:
            return b"", None
        return kind, pickle.loads(body)

    def stop(self) -> None:
        """Ask :meth:`ActorBell.serve` to return (a broken pipe means it is gone already)."""
        try:
            os.write(self.request, STOP)
        except OSError:
            pass

    def close(self) -> None:
        """Close the caller's ends: a serving actor sees the end of the stream and returns."""
        self.unlink()
        for fd in (self.request, self.reply):
            if fd >= 0:
                os.close(fd)
        self.request = self.reply = -1


def answers(bells: list[CallerBell | None]) -> list[tuple[bytes, Any]]:
    """Every bell's answer in order (see :meth:`CallerBell.answer`); None, a bell that was not
    rung, answers (b"", None). The machine is looked at once for all of them."""
    may_spin = not crowded()
    return [(b"", None) if bell is None else bell.answer(may_spin) for bell in bells]


class ActorBell:
    """The actor's ends, opened from the paths the caller made."""

    def __init__(self, paths: tuple[str, str]) -> None:
        self.request = os.open(paths[0], os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.reply = os.open(paths[1], os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            os.close(self.request)
            raise
        os.set_blocking(self.request, True)

    def serve(self, step: Callable[[], Any]) -> None:
        """Run ``step()`` for each ring until the caller says stop or goes away; what ``step``
        returns goes back when it is not empty."""
        read, write, request, reply = os.read, os.write, self.request, self.reply
        poller, spin = _poller(request), Spin(SPIN_S)
        while True:
            _wait_readable(poller, spin, not crowded())
            if read(request, 1) != GO:
                return
            try:
                infos = step()
            except BaseException:
                write(reply, FAILED)
                raise
            if infos:
                body = pickle.dumps(infos, protocol=pickle.HIGHEST_PROTOCOL)
                _write_all(reply, INFOS + _LENGTH.pack(len(body)) + body)
            else:
                write(reply, DONE)

    def close(self) -> None:
        """Close the actor's ends: the caller's next answer is (b"", None)."""
        for fd in (self.request, self.reply):
            os.close(fd)
