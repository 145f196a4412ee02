"""The cluster secret, the handshake, and frames from peers that do not hold the secret.

The unpickling proof: ``Evil`` pickles to a call of ``open(path, "w")``, so unpickling it
anywhere creates the file. A peer with the right secret that sends it to an actor makes the
file appear (the positive control); a peer without it never does.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parl.cluster import auth, control
from parl.errors import AuthenticationError
from parl.wire.framing import PREFIX, FrameSocket, FrameTooLarge
from parl.wire.protocol import INIT, InlineLink, encode
from tests.runtime.cluster import SECRET
from tests.runtime.conftest import wait_until


class Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


# -- the secret -------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(auth.SECRET_ENV, raising=False)
    return tmp_path


def test_secret_file_is_created_private_and_read_back(home):
    secret = auth.load_secret(create=True)
    path = home / ".parl" / "cluster_secret"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(path.parent).st_mode & 0o777 == 0o700
    assert len(secret) >= 32 and auth.load_secret() == secret


def test_secret_readable_by_others_is_refused(home):
    auth.load_secret(create=True)
    path = home / ".parl" / "cluster_secret"
    os.chmod(path, 0o644)
    with pytest.raises(AuthenticationError, match=f"run `chmod 600 {path}`"):
        auth.load_secret()


def test_no_secret_names_the_file_and_the_variable(home):
    with pytest.raises(AuthenticationError, match="cluster_secret does not exist and PARL_CLUS"):
        auth.load_secret()


def test_environment_variable_wins_and_must_be_long(home, monkeypatch):
    auth.load_secret(create=True)
    monkeypatch.setenv(auth.SECRET_ENV, "x" * 20)
    assert auth.load_secret() == b"x" * 20
    monkeypatch.setenv(auth.SECRET_ENV, "short")
    with pytest.raises(AuthenticationError, match="too short"):
        auth.load_secret()


def test_xparl_start_refuses_a_secret_others_can_read(home):
    from parl.cluster.cli import main

    auth.load_secret(create=True)
    os.chmod(home / ".parl" / "cluster_secret", 0o640)
    assert main(["start", "--port", "1", "--cpu_num", "0"]) == 1  # nothing started


# -- the handshake ------------------------------------------------------------------------------


def _pair():
    a, b = socket.socketpair()
    return a, b


def test_handshake_accepts_the_same_secret_and_refuses_another():
    import threading

    for client_secret, ok in ((b"s" * 32, True), (b"t" * 32, False)):
        server_end, client_end = _pair()
        result = {}

        def serve(server_end=server_end, result=result):
            result["ok"] = auth.serve_handshake(server_end, b"s" * 32)
            if not result["ok"]:
                server_end.close()  # what the server does: no answer at all

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            if ok:
                auth.client_handshake(client_end, client_secret, "peer")
            else:
                with pytest.raises(AuthenticationError, match="refused"):
                    auth.client_handshake(client_end, client_secret, "peer")
        finally:
            thread.join()
            server_end.close()
            client_end.close()
        assert result["ok"] is ok


def test_handshake_has_a_deadline():
    server_end, client_end = _pair()
    try:
        assert auth.serve_handshake(server_end, b"s" * 32, timeout=0.2) is False  # silent peer
    finally:
        server_end.close()
        client_end.close()


# -- frames from untrusted peers against a real cluster -------------------------------------------


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True when the peer closed the connection (after whatever it sent)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def _evil_frame(path: str) -> bytes:
    meta, bodies, _ = encode(INIT, 1, Evil(path), InlineLink())
    assert not bodies
    return PREFIX.pack(len(meta), 0, 0) + meta


@pytest.mark.parametrize("secret", [None, b"wrong-secret-0123456789"], ids=["none", "wrong"])
@pytest.mark.parametrize("target", ["master", "agent"])
def test_a_peer_without_the_secret_never_gets_anything_unpickled(cluster, tmp_path, secret, target):
    marker = tmp_path / "unpickled"
    port = cluster.port if target == "master" else cluster.agent_ports[0]
    sock = _connect(port)
    try:
        if secret is not None:
            with pytest.raises(AuthenticationError):
                auth.client_handshake(sock, secret, "the cluster")
        try:
            for data in (_evil_frame(str(marker)), pickle.dumps(Evil(str(marker)))):
                sock.sendall(data)
        except OSError:
            pass  # already closed by the server
        assert _closed_by_peer(sock)
    finally:
        sock.close()
    assert not marker.exists()
    assert cluster.used() == 0 and len(cluster.status()["hosts"]) == 2  # still serving


def test_the_same_payload_from_a_peer_with_the_secret_is_unpickled(cluster, tmp_path):
    """The positive control of the test above: the payload does create the file."""
    marker = tmp_path / "unpickled"
    sock, caller = _actor_connection(cluster)
    try:
        sock.sock.sendall(_evil_frame(str(marker)))
        assert wait_until(marker.exists, timeout=10)
    finally:
        sock.close()
        caller.close()
    assert wait_until(lambda: cluster.used() == 0, timeout=10)


def _actor_connection(cluster) -> tuple[FrameSocket, FrameSocket]:
    """An actor started by hand on the first host agent: its raw, authenticated connection,
    and the caller's control connection."""
    where = ("127.0.0.1", cluster.agent_ports[0])
    secret = SECRET.encode()
    caller = control.dial(where, secret, "agent")
    cid = os.urandom(8).hex()  # an id of its own: the agent refuses one still connected
    control.request(caller, {"op": "caller", "client": cid, "forward": False}, "agent", 10)
    sock = control.dial(where, secret, "agent", control.ACTOR_MAX_FRAME)
    answer = control.request(
        sock, {"op": "actor", "client": cid, "token": None, "label": "Raw"}, "agent", 30
    )
    assert answer["op"] == "started"
    return sock, caller


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(min_size=0, max_size=300), authenticated=st.booleans())
def test_random_bytes_never_crash_the_master_or_an_agent(cluster, data, authenticated):
    for port in (cluster.port, cluster.agent_ports[1]):
        sock = _connect(port)
        try:
            if authenticated:
                auth.client_handshake(sock, SECRET.encode(), "the cluster")
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            assert _closed_by_peer(sock)
        finally:
            sock.close()
    assert len(cluster.status()["hosts"]) == 2


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    meta_len=st.integers(min_value=control.CONTROL_MAX_FRAME + 1, max_value=2**64 - 1),
    body_count=st.integers(min_value=0, max_value=2**32 - 1),
    cut=st.integers(min_value=0, max_value=PREFIX.size + 7),
)
def test_oversized_and_truncated_frames_close_only_that_connection(
    cluster, meta_len, body_count, cut
):
    frame = PREFIX.pack(meta_len, body_count, 0) + struct.pack("<Q", 2**40)
    for data in (frame, frame[:cut]):  # announced too large; cut short, then closed
        sock = _connect(cluster.agent_ports[0])
        try:
            auth.client_handshake(sock, SECRET.encode(), "the cluster")
            sock.sendall(data)
            if data is not frame:
                sock.shutdown(socket.SHUT_WR)
            assert _closed_by_peer(sock)
        finally:
            sock.close()
    assert len(cluster.status()["hosts"]) == 2


def test_an_oversized_frame_on_an_actor_connection_ends_that_worker_only(cluster):
    sock, caller = _actor_connection(cluster)
    try:
        sock.sock.sendall(PREFIX.pack(control.ACTOR_MAX_FRAME + 1, 0, 0))
        assert _closed_by_peer(sock.sock)  # the worker dropped the connection and ended
    finally:
        sock.close()
        caller.close()
    assert wait_until(lambda: cluster.used() == 0, timeout=10)  # its slot is back


# -- max_frame in FrameSocket -----------------------------------------------------------------


def test_frame_socket_refuses_to_receive_or_send_over_max_frame():
    a, b = socket.socketpair()
    left, right = FrameSocket(a, max_frame=1000), FrameSocket(b, max_frame=1000)
    try:
        with pytest.raises(ValueError, match="larger than this connection's max_frame of 1000"):
            left.send(b"m", [bytes(1000)])
        left.send(b"m", [bytes(999)])  # the limit counts meta and bodies
        assert bytes(right.recv().bodies[0]) == bytes(999)
        a.sendall(PREFIX.pack(10, 1, 0) + struct.pack("<Q", 2**62))
        with pytest.raises(FrameTooLarge):
            right.recv()
        assert right.broken
    finally:
        left.close()
        right.close()
