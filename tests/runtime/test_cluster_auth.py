"""The cluster secret, the handshake, frames from peers that do not hold the secret, and control
messages from peers that do but lie (a bad slot count, another caller's id).

The unpickling proof: ``Evil`` pickles to a call of ``open(path, "w")``, so unpickling it
anywhere creates the file. A peer with the right secret that sends it to an actor makes the
file appear (the positive control); a peer without it never does.
"""

from __future__ import annotations

import gc
import os
import pickle
import socket
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parl.cluster import auth, control
from parl.errors import AuthenticationError
from parl.wire.framing import PREFIX, FrameSocket, FrameTooLarge
from parl.wire.protocol import INIT, InlineLink, encode
from tests.runtime.actors import Sampler
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


@pytest.mark.parametrize(
    "args",
    [
        ["start", "--port", "80100", "--cpu_num", "0"],
        ["start", "--port", "http", "--cpu_num", "0"],
        ["connect", "--address", "localhost:80100"],
        ["connect", "--address", "localhost"],
    ],
)
def test_xparl_refuses_a_bad_port_before_writing_anything(home, tmp_path, args):
    """The port is checked while the command line is read: no secret, no log, no process."""
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, HOME=str(home))
    env.pop(auth.SECRET_ENV, None)
    done = subprocess.run(
        [sys.executable, "-m", "parl.cluster.cli", *args],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    flag = "--port" if args[0] == "start" else "--address"
    assert f"argument {flag}:" in done.stderr and "8010" in done.stderr, done.stderr
    assert "secret" not in done.stderr
    assert not (home / ".parl").exists(), list((home / ".parl").rglob("*"))
    assert list(work.iterdir()) == []


@pytest.fixture
def parl_folder(home):
    """``~/.parl`` made, private, with nothing in it."""
    os.makedirs(home / ".parl", mode=0o700)
    return home / ".parl"


def test_a_secret_that_is_a_symlink_is_refused_with_a_clear_error(
    home, parl_folder, tmp_path_factory
):
    """Seen: ``xparl start`` (and ``parl.connect``) with ~/.parl/cluster_secret a symlink
    died with a raw ``OSError: [Errno 40] Too many levels of symbolic links`` traceback.
    Expected: an AuthenticationError that names the file (xparl prints it on one line)."""
    target = tmp_path_factory.mktemp("elsewhere") / "secret"
    target.write_text("0123456789abcdef0123456789abcdef\n")
    os.chmod(target, 0o600)
    os.symlink(target, home / ".parl" / "cluster_secret")
    with pytest.raises(AuthenticationError, match="cluster_secret"):
        auth.load_secret()


def test_a_secret_that_is_a_directory_is_refused_with_a_clear_error(home, parl_folder):
    """Seen: a directory at ~/.parl/cluster_secret (mode 0700 passes the mode check) gave
    ``IsADirectoryError`` from deep inside ``load_secret``. Expected: AuthenticationError."""
    os.mkdir(home / ".parl" / "cluster_secret", 0o700)
    with pytest.raises(AuthenticationError, match="not a plain file"):
        auth.load_secret()


def test_a_secret_that_is_a_fifo_does_not_hang(home, parl_folder):
    """Seen: a FIFO at ~/.parl/cluster_secret made ``xparl start`` and ``parl.connect``
    block forever in ``open``. Expected: an AuthenticationError at once."""
    os.mkfifo(home / ".parl" / "cluster_secret", 0o600)
    code = (
        "from parl.cluster import auth\n"
        "try:\n    auth.load_secret()\n"
        "except auth.AuthenticationError as exc:\n    print('refused:', exc)\n"
    )
    env = dict(os.environ, HOME=str(home))
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("load_secret blocked on a FIFO")
    assert "refused:" in done.stdout and "not a plain file" in done.stdout, done


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


# -- hostile control messages from a peer that holds the secret --------------------------------


@pytest.mark.parametrize("slots", [-3, 0, 2.5, "4"])
def test_a_host_with_a_slot_count_below_one_is_refused(cluster, slots):
    """Seen: a ``register`` with ``slots: -3`` joined the cluster, and the master's totals
    (``xparl status``, the "no free slot" error) counted negative slots. Expected: refused."""
    sock = control.dial(("127.0.0.1", cluster.port), SECRET.encode(), "master")
    try:
        hello = {"op": "register", "host": "127.0.0.1", "port": 9, "hostname": "x"}
        control.send(sock, {**hello, "slots": slots})
        answer = control.recv(sock, 5)
        assert answer is None or answer["op"] == "error", answer
    finally:
        sock.close()
    assert wait_until(lambda: len(cluster.status()["hosts"]) == 2, timeout=15)
    assert sorted(h["slots"] for h in cluster.status()["hosts"]) == [2, 3]


def test_another_callers_id_cannot_take_its_actors_down(on_cluster):
    """Seen: a second control connection to a host agent that gave the id of a connected
    caller (ids are listed by the agent's ``host`` status) took its place, and when it closed,
    the agent stopped the *first* caller's actors. Expected: the agent refuses an id that is
    already connected; the first caller's actor keeps working."""
    actor = Sampler()
    pid = actor.pid()
    agents = [("127.0.0.1", port) for port in on_cluster.agent_ports]
    cid = None
    for where in agents:
        sock = control.dial(where, SECRET.encode(), "agent")
        try:
            actors = control.request(sock, {"op": "host"}, "agent", 10)["actors"]
        finally:
            sock.close()
        mine = [a for a in actors if a["pid"] == pid]
        if mine:
            cid = mine[0]["client"]
            break
    assert cid is not None
    other = control.dial(where, SECRET.encode(), "agent")
    try:
        control.send(other, {"op": "caller", "client": cid, "forward": True})
        answer = control.recv(other, 10)
        assert answer is None or answer["op"] == "error", answer
    finally:
        other.close()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # a second: the agent has seen the close by then
        assert actor.add(1, 2) == 3
    del actor
    gc.collect()


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
