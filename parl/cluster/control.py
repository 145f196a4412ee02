"""Control messages of a cluster, and opening an authenticated connection to a cluster peer.

Control messages (placement requests, "start an actor", output lines, exit notices) are small
JSON objects, one per frame: they are never unpickled, and their frames are capped at
``CONTROL_MAX_FRAME``. Only an actor's own connection carries the pickled protocol of
:mod:`parl.wire.protocol`, with its larger ``max_frame``.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Mapping
from typing import Any

from parl.cluster import messages
from parl.cluster.auth import MAGIC, client_handshake
from parl.errors import ClusterError
from parl.wire.framing import FrameSocket, wait_readable

CONTROL_MAX_FRAME = 1 << 20
ACTOR_MAX_FRAME = 1 << 32  # default largest message on an actor's connection (4 GiB)
CONNECT_TIMEOUT_S = 5.0
# A peer whose process ends closes its sockets: the other end sees that at once. A peer whose
# machine or network goes away sends nothing more, and two kernel timers end the connection:
# - keepalive probes (after 1 s idle, every 1 s, 3 unanswered) end an idle connection in about
#   4 s, with no heartbeat thread on either side;
# - TCP_USER_TIMEOUT ends one with data on its way (a message being sent, unacknowledged) in
#   USER_TIMEOUT_MS; without it the kernel retransmits for about 15 minutes and a send blocks
#   as long.
# TCP_USER_TIMEOUT also ends a healthy connection whose receiver is busy and leaves a large
# message unread (a zero window) for that long: Linux counts the time since the window
# closed, answered window probes or not (measured on 6.18). So only control connections,
# whose receivers always read at once, get it (``tune``; a caller writes its actors' output
# on a thread of its own, so a terminal that takes none holds up no reader). An actor's connection keeps a zero
# window as long as its actor is busy (``allow_zero_window``); the caller's control connection
# to the same host agent watches the path for it: when that connection is lost, the carrier
# ends the host's actor connections (see parl.cluster.carrier).
KEEPALIVE_IDLE_S = 1
KEEPALIVE_INTERVAL_S = 1
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = 4000

Message = dict[str, Any]  # a message to send, built as a plain dict
AUTO_HOST = "auto"  # a host agent's ``--host`` default: where its link to the master leaves from


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` as (host, port); ValueError naming the address otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"a cluster address is 'host:port' (e.g. 'localhost:8010', as `xparl start` "
            f"prints it), got {address!r}"
        )
    return host.strip("[]"), int(port)


def error_line(message: str) -> str:
    """A daemon's ready line for a failure: ``error`` and the message as a JSON string, so
    that a message of several lines (several SSH hosts failed) arrives whole."""
    return "error " + json.dumps(message)


def ready_error(text: str) -> str:
    """The message of an ``error`` ready line (after ``error ``), as :func:`error_line`
    wrote it; the text itself when it is not JSON (an older daemon)."""
    try:
        message = json.loads(text)
    except ValueError:
        return text
    return message if isinstance(message, str) else text


def is_wildcard(host: str) -> bool:
    """Whether ``host`` means "every address of this machine" (only ever chosen by the user
    with ``--host``: the default is 127.0.0.1); such a host is advertised by another name."""
    return host in ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1, an IPv4-mapped 127.x, or
    ``localhost``): only processes of this machine reach a peer that listens there."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def same_machine(sock: socket.socket) -> bool:
    """Whether the peer of the accepted ``sock`` runs on this machine: it came over loopback,
    or from the very address it reached us at."""
    peer, local = sock.getpeername()[0], sock.getsockname()[0]
    return is_loopback(peer) or peer == local


def greets(address: tuple[str, int], timeout: float) -> str:
    """Open a connection to ``address`` and read a cluster peer's greeting (no secret needed),
    then close it: "" when a cluster peer answers there within ``timeout``, else why not."""
    try:
        with socket.create_connection(address, timeout=timeout) as sock:
            sock.settimeout(timeout)
            hello = b""
            while len(hello) < len(MAGIC):
                chunk = sock.recv(len(MAGIC) - len(hello))
                if not chunk:
                    break
                hello += chunk
    except OSError as exc:
        return str(exc) or type(exc).__name__
    return "" if hello == MAGIC else "something other than a parl cluster peer answers there"


def tune(sock: socket.socket) -> None:
    """TCP_NODELAY, the short keepalive and the user timeout above, on a cluster connection
    (both ends)."""
    options = [
        (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", None), KEEPALIVE_IDLE_S),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL_S),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_COUNT),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_USER_TIMEOUT", None), USER_TIMEOUT_MS),
    ]
    for level, name, value in options:
        if name is not None:  # Linux has them all; other systems some
            try:
                sock.setsockopt(level, name, value)
            except OSError:
                pass


def allow_zero_window(sock: socket.socket) -> None:
    """Drop the user timeout of a connection that becomes an actor's (both ends): its
    receiver may leave a message unread for as long as a method runs. Keepalive stays."""
    name = getattr(socket, "TCP_USER_TIMEOUT", None)
    if name is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, name, 0)
        except OSError:
            pass


def send(sock: FrameSocket, message: Mapping[str, object]) -> None:
    sock.send(json.dumps(message, separators=(",", ":")).encode())


def recv(sock: FrameSocket, timeout: float | None = None) -> messages.ControlMessage | None:
    """The next message; None at end of stream (or after ``timeout`` seconds with nothing).
    A frame that is not a JSON object, or a message without the fields its op requires (see
    :mod:`parl.cluster.messages`), raises ConnectionError: the peer is out of step."""
    if timeout is not None and not sock.has_buffered_frame():
        if not wait_readable([sock.fileno()], timeout):
            return None
    frame = sock.recv()
    if frame is None:
        return None
    if frame.bodies or frame.fds:
        raise ConnectionError("a control message came with buffers")
    try:
        message = json.loads(frame.meta)
    except ValueError as exc:
        raise ConnectionError(f"a control message is not JSON: {exc}") from None
    if not messages.check(message):  # or MessageError, a ConnectionError: a field is wrong
        raise ConnectionError("a control message has no 'op'")
    return message


def dial(
    address: tuple[str, int], secret: bytes, what: str, max_frame: int = CONTROL_MAX_FRAME
) -> FrameSocket:
    """An authenticated connection to a cluster peer at ``address`` (``what`` names it in
    errors: "the master at host:port")."""
    try:
        sock = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise ClusterError(
            f"cannot reach {what}: {exc}; is the cluster running (`xparl status`) and is the "
            "address right?"
        ) from None
    try:
        tune(sock)
        client_handshake(sock, secret, what)
    except BaseException:
        sock.close()
        raise
    return FrameSocket(sock, max_frame)


def request(
    sock: FrameSocket, message: Mapping[str, object], what: str, timeout: float
) -> messages.ControlMessage:
    """Send ``message`` and wait for the answer; an ``error`` answer raises ClusterError."""
    send(sock, message)
    answer = recv(sock, timeout)
    if answer is None:
        raise ClusterError(f"{what} closed the connection or did not answer within {timeout} s")
    if answer["op"] == "error":
        raise ClusterError(str(answer.get("message", "unknown error")))
    return answer
