"""A TCP listener for cluster peers: authenticate each connection, then hand it to a handler.

Each accepted connection gets a thread. The thread runs the handshake of
:mod:`parl.cluster.auth` on the raw socket, reads the first control message (its ``op``
chooses the handler) and runs the handler, which owns the connection from then on. A peer
that fails the handshake, sends garbage or an oversized frame loses its connection; the
server goes on serving.

Each handler is registered for the message class of its op (:class:`Route`), so that it
reads the first message as that class: ``Route(messages.Register, serve_host)`` has mypy
check that ``serve_host`` takes a :class:`parl.cluster.messages.Register`.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeGuard, TypeVar

from parl.cluster import control, messages
from parl.cluster.auth import HANDSHAKE_TIMEOUT_S, serve_handshake
from parl.wire.framing import FrameSocket

log = logging.getLogger("parl.cluster")
M = TypeVar("M", bound=messages.ControlMessage)


class Handler(Protocol):
    """Serves the connections whose first message has op ``op``: from that message on, the
    connection is the handler's."""

    op: str

    def __call__(self, sock: FrameSocket, hello: messages.ControlMessage, /) -> None: ...


class Route(Generic[M]):
    """``handle`` as the :class:`Handler` of the op of message class ``kind``."""

    def __init__(self, kind: type[M], handle: Callable[[FrameSocket, M], None]) -> None:
        self.op = messages.op_of(kind)
        self._handle = handle

    def __call__(self, sock: FrameSocket, hello: messages.ControlMessage, /) -> None:
        if not self._takes(hello):
            raise ValueError(f"a {hello['op']!r} message came to the {self.op!r} handler")
        self._handle(sock, hello)

    def _takes(self, hello: messages.ControlMessage) -> TypeGuard[M]:
        # the op is the class's (op_of), and control.recv has checked the op's fields
        return hello["op"] == self.op


def by_op(*handlers: Handler) -> dict[str, Handler]:
    """``handlers`` keyed by their ops, as :class:`Server` takes them."""
    return {handler.op: handler for handler in handlers}


class Server:
    """Listens on ``host:port`` (0: any free port) and serves ``handlers`` by op."""

    def __init__(
        self, host: str, port: int, secret: bytes, handlers: dict[str, Handler] | None = None
    ) -> None:
        self.secret = secret
        self.handlers: dict[str, Handler] = dict(handlers or {})
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind((host, port))
            self._listener.listen(128)
        except OSError:
            self._listener.close()
            raise
        self.host, self.port = self._listener.getsockname()[:2]
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.monitor: Any = None  # the master's monitor page (parl.monitoring), closed with it

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._accept_loop, name="parl-accept", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        if self.monitor is not None:
            self.monitor.close()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        except OSError:
            pass
        self._listener.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                if self._closed.is_set():
                    return
                continue  # e.g. EMFILE, or a connection reset before it was accepted
            threading.Thread(
                target=self._serve_one, args=(sock,), name="parl-peer", daemon=True
            ).start()

    def _serve_one(self, sock: socket.socket) -> None:
        control.tune(sock)
        if not serve_handshake(sock, self.secret):
            sock.close()
            return
        frames = FrameSocket(sock, control.CONTROL_MAX_FRAME)
        try:
            first = control.recv(frames, HANDSHAKE_TIMEOUT_S)
            handler = self.handlers.get(first["op"]) if first is not None else None
            if first is None or handler is None:
                frames.close()
                return
            handler(frames, first)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # a peer out of step (bad frame, bad message): drop it, keep serving
            log.debug("dropped a cluster connection: %s", exc)
            frames.close()
        except Exception:  # a bug in a handler: logged, the server goes on
            log.exception("a cluster connection failed")
            frames.close()
