"""A doorbell between a caller and one local actor: two named pipes (FIFOs), one byte each way
per step, for the hot loop of ``RemoteVectorEnv``.

A remote call costs a pickled request, a frame, a dispatch and a pickled reply on each side
(about 150 Python-level calls in the caller per 2-actor step); a step whose data already sits in
shared arrays needs none of that, only "go" and "done". The actor runs one long call
(:meth:`ActorBell.serve`) that reads a byte, steps, and writes a byte back (followed by pickled
info dicts when there are any); any other request first stops that call (:meth:`CallerBell.stop`)
and goes through the ordinary remote API.

The FIFOs are made in a private temporary folder (mode 0700) and unlinked as soon as both ends
are open, so nothing is left in the file system. End of stream on either side means the other
side is gone: the caller then reports the actor's own error (its death, or the exception
:meth:`ActorBell.serve` raised), the actor returns from :meth:`ActorBell.serve`. Actors on
another host cannot open the FIFOs; ``RemoteVectorEnv`` then keeps to ordinary calls.
"""

from __future__ import annotations

import os
import pickle
import shutil
import struct
import tempfile
from collections.abc import Callable
from typing import Any

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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class CallerBell:
    """The caller's ends: ``request`` (write) and ``reply`` (read) descriptors."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="parl-bell-")  # mode 0700
        self.paths = (os.path.join(self.folder, "request"), os.path.join(self.folder, "reply"))
        self.request = self.reply = -1
        for path in self.paths:
            os.mkfifo(path, 0o600)
        # opened without blocking (no writer yet); the actor's open for writing then succeeds
        self.reply = os.open(self.paths[1], os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)

    def connect(self) -> None:
        """After the actor opened its ends (see :meth:`ActorBell.open`)."""
        try:
            self.request = os.open(self.paths[0], os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.set_blocking(self.request, True)
            os.set_blocking(self.reply, True)
        finally:
            self.unlink()

    def unlink(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def ring(self) -> None:
        os.write(self.request, GO)

    def answer(self) -> tuple[bytes, Any]:
        """Wait for the actor's answer: (DONE, None), (INFOS, infos), (FAILED, None), or
        (b"", None) when the actor is gone."""
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
        self.unlink()
        for fd in (self.request, self.reply):
            if fd >= 0:
                os.close(fd)
        self.request = self.reply = -1


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

    def serve(self, step: Callable[[], list]) -> None:
        """Run ``step()`` for each ring until the caller says stop or goes away. ``step``
        returns the info pairs to send back (an empty list for none)."""
        read, write, request, reply = os.read, os.write, self.request, self.reply
        while read(request, 1) == GO:
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
        for fd in (self.request, self.reply):
            os.close(fd)
