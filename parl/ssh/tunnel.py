"""Calls through the SSH connection (``tunnel=yes``), for networks where only SSH is open.

Two forwards per host, as ``ssh -L`` and ``ssh -R`` make them: a *local* one (a listener on
this machine's loopback whose connections become ``direct-tcpip`` channels to the host
agent's port on the host's loopback), and a *remote* one (a port on the host's loopback whose
connections come back as channels and are joined to the master here). The cluster carrier
dials the local listener as it would dial the host: the actors' protocol, its authentication
and its frames are unchanged, only carried inside SSH.
"""

from __future__ import annotations

import logging
import socket
import threading

import paramiko

log = logging.getLogger("parl.ssh")
_CHUNK = 1 << 18


def pump(sock: socket.socket, channel: paramiko.Channel) -> None:
    """Move bytes both ways between ``sock`` and ``channel`` until either end closes; then
    close both. One thread each way."""

    def close() -> None:
        for end in (sock, channel):
            try:
                end.close()
            except (OSError, EOFError, paramiko.SSHException):  # the SSH connection is gone
                pass

    def up() -> None:  # socket -> channel
        try:
            while True:
                data = sock.recv(_CHUNK)
                if not data:
                    break
                channel.sendall(data)
            channel.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException):
            close()

    def down() -> None:  # channel -> socket
        try:
            while True:
                data = channel.recv(_CHUNK)
                if not data:
                    break
                sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        close()

    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=up, name="parl-tunnel-up", daemon=True).start()
    threading.Thread(target=down, name="parl-tunnel-down", daemon=True).start()


class LocalForward:
    """A listener on 127.0.0.1 (any free port) whose connections are forwarded through
    ``transport`` to ``target`` on the host, once :meth:`set_target` has named it."""

    def __init__(self, transport: paramiko.Transport, name: str) -> None:
        self._transport = transport
        self._name = name
        self._target: tuple[str, int] | None = None
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, name="parl-tunnel-accept", daemon=True).start()

    def set_target(self, host: str, port: int) -> None:
        self._target = (host, port)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._forward, args=(sock,), daemon=True).start()

    def _forward(self, sock: socket.socket) -> None:
        if self._target is None:
            sock.close()
            return
        try:
            channel = self._transport.open_channel(
                "direct-tcpip", self._target, ("127.0.0.1", self.port), timeout=10.0
            )
        except (paramiko.SSHException, OSError, EOFError) as exc:
            log.warning("tunnel to %s %s failed: %s", self._name, self._target, exc)
            sock.close()
            return
        pump(sock, channel)

    def drop_in_child(self) -> None:
        """In a forked child: close this copy of the listener only (no shutdown, which would
        stop the parent's listener too)."""
        self._closed = True
        self._listener.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()


def remote_forward(transport: paramiko.Transport, master: tuple[str, int]) -> int:
    """A port on the host's loopback whose connections reach ``master`` here; the port."""

    def arrived(channel: paramiko.Channel, origin: object, server: object) -> None:
        # called on paramiko's transport thread: join the master on a thread of its own
        threading.Thread(target=join, args=(channel,), daemon=True).start()

    def join(channel: paramiko.Channel) -> None:
        try:
            sock = socket.create_connection(master, timeout=10.0)
        except OSError:
            channel.close()
            return
        sock.settimeout(None)
        pump(sock, channel)

    return int(transport.request_port_forward("127.0.0.1", 0, handler=arrived))
