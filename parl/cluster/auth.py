"""The cluster secret, and the handshake that proves both ends of a TCP connection hold it.

The secret is read from ``PARL_CLUSTER_SECRET`` or from ``~/.parl/cluster_secret`` (mode 0600;
``xparl start`` creates it). It never appears on a command line or in a log.

The handshake runs on the raw socket, before any frame is parsed or anything unpickled. Every
message has a fixed length, so a peer cannot make this side allocate anything::

    server -> client   MAGIC | server nonce (32 random bytes)
    client -> server   HMAC(secret, "C" | server nonce | client nonce) | client nonce
    server -> client   HMAC(secret, "S" | client nonce | server nonce)

Each side checks the other's digest with ``hmac.compare_digest``; the server closes a
connection whose digest is wrong without answering, and the whole exchange has a deadline.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import stat
import time

from parl.errors import AuthenticationError

SECRET_ENV = "PARL_CLUSTER_SECRET"
MAGIC = b"PARL-CLUSTER-1\n"
NONCE_SIZE = 32
DIGEST_SIZE = hashlib.sha256().digest_size
HANDSHAKE_TIMEOUT_S = 5.0
_MIN_SECRET = 16


def secret_path() -> str:
    return os.path.join(os.path.expanduser("~"), ".parl", "cluster_secret")


def load_secret(create: bool = False) -> bytes:
    """The cluster secret: ``PARL_CLUSTER_SECRET``, else the secret file (created with mode
    0600 when ``create`` and missing). Refuses a file that other users can read."""
    value = os.environ.get(SECRET_ENV)
    if value:
        if len(value) < _MIN_SECRET:
            raise AuthenticationError(
                f"{SECRET_ENV} is too short ({len(value)} characters): use at least "
                f"{_MIN_SECRET} random characters (e.g. the content of ~/.parl/cluster_secret)"
            )
        return value.encode()
    path = secret_path()
    try:
        # no symlink; O_NONBLOCK: a FIFO put there does not block this open
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        if create:
            return _create(path)
        raise AuthenticationError(
            f"no cluster secret here: {path} does not exist and {SECRET_ENV} is not set. "
            f"Copy the file from the machine that ran `xparl start` (keep it mode 0600: "
            f"`chmod 600 {path}`), or set {SECRET_ENV} to its content"
        ) from None
    except OSError as exc:  # ELOOP: a symlink; EACCES; ...
        raise AuthenticationError(
            f"cannot use the cluster secret {path}: {exc.strerror}; it must be a plain file "
            f"(not a symlink) of yours with mode 0600"
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise AuthenticationError(
            f"the cluster secret {path} is not a plain file; delete it and run "
            "`xparl start` again to create a new one"
        )
    with os.fdopen(fd, "rb") as file:
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise AuthenticationError(
                f"the cluster secret {path} can be read by other users (mode "
                f"{stat.S_IMODE(mode):o}); run `chmod 600 {path}`"
            )
        secret = file.read().strip()
    if len(secret) < _MIN_SECRET:
        raise AuthenticationError(
            f"the cluster secret {path} is too short ({len(secret)} bytes): delete it and run "
            "`xparl start` again to create a new one"
        )
    return secret


def _create(path: str) -> bytes:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    secret = secrets.token_hex(32).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it meanwhile
        return load_secret()
    with os.fdopen(fd, "wb") as file:
        file.write(secret + b"\n")
    return secret


def _digest(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret, role + first + second, hashlib.sha256).digest()


def serve_handshake(
    sock: socket.socket, secret: bytes, timeout: float = HANDSHAKE_TIMEOUT_S
) -> bool:
    """The server's side: True when the peer proved it holds ``secret``. On False the caller
    closes the socket; nothing the peer sent has been interpreted beyond a digest compare."""
    deadline = time.monotonic() + timeout
    ours = secrets.token_bytes(NONCE_SIZE)
    try:
        _send(sock, MAGIC + ours, deadline)
        answer = _recv_exactly(sock, DIGEST_SIZE + NONCE_SIZE, deadline)
        if answer is None:
            return False
        digest, theirs = answer[:DIGEST_SIZE], answer[DIGEST_SIZE:]
        if not hmac.compare_digest(digest, _digest(secret, b"C", ours, theirs)):
            return False
        _send(sock, _digest(secret, b"S", theirs, ours), deadline)
    except OSError:  # includes timeouts
        return False
    finally:
        _restore_blocking(sock)
    return True


def client_handshake(
    sock: socket.socket, secret: bytes, peer: str, timeout: float = HANDSHAKE_TIMEOUT_S
) -> None:
    """The client's side; raises AuthenticationError naming ``peer`` when either end fails."""
    deadline = time.monotonic() + timeout
    try:
        hello = _recv_exactly(sock, len(MAGIC) + NONCE_SIZE, deadline)
        if hello is None or not hello.startswith(MAGIC):
            raise AuthenticationError(
                f"{peer} is not a parl cluster (it did not greet like one); check the address "
                "and port (`xparl status` lists this user's clusters)"
            )
        theirs = hello[len(MAGIC) :]
        ours = secrets.token_bytes(NONCE_SIZE)
        _send(sock, _digest(secret, b"C", theirs, ours) + ours, deadline)
        proof = _recv_exactly(sock, DIGEST_SIZE, deadline)
    except OSError as exc:
        raise AuthenticationError(f"authentication with {peer} failed: {exc}") from exc
    finally:
        _restore_blocking(sock)
    if proof is None:
        raise AuthenticationError(
            f"{peer} refused this machine's cluster secret: use the same secret as the master "
            f"(copy its ~/.parl/cluster_secret here, mode 0600, or set {SECRET_ENV})"
        )
    if not hmac.compare_digest(proof, _digest(secret, b"S", ours, theirs)):
        raise AuthenticationError(
            f"{peer} does not know this machine's cluster secret: it is another cluster, or "
            "something else answers at that address"
        )


def _send(sock: socket.socket, data: bytes, deadline: float) -> None:
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    sock.sendall(data)


def _recv_exactly(sock: socket.socket, n: int, deadline: float) -> bytes | None:
    """``n`` bytes, or None when the peer closed first. Raises TimeoutError past ``deadline``."""
    data = bytearray()
    while len(data) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the handshake took too long")
        sock.settimeout(remaining)
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _restore_blocking(sock: socket.socket) -> None:
    try:
        sock.settimeout(None)
    except OSError:
        pass
