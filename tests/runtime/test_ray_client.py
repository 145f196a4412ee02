"""Ray Client: ``parl.connect("ray://host:port")`` against a real Ray head started by the test
(``ray start --head --block`` on loopback, its own temp folder), driven from a fresh
interpreter as a user's script would be. The head is ended through its process group, never
with ``ray stop`` (which would stop every Ray of this user on the machine)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import psutil
import pytest

from tests.runtime.conftest import wait_until
from tests.runtime.rays import require_ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def ray_head():
    require_ray()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's sockets live under it
    gcs, client = _free_port(), _free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    command = [
        os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head", "--block",
        "--node-ip-address", "127.0.0.1", "--port", str(gcs),
        "--ray-client-server-port", str(client), "--num-cpus", "2",
        "--include-dashboard", "false", "--disable-usage-stats",
        "--temp-dir", temp,
    ]  # fmt: skip
    head = subprocess.Popen(
        command, env=env, start_new_session=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert wait_until(lambda: _listening(client) or head.poll() is not None, timeout=90)
        assert head.poll() is None, head.stdout.read() if head.stdout else ""
        yield f"ray://127.0.0.1:{client}", env
    finally:
        members = [p for p in psutil.process_iter() if _in_group(p, head.pid)]
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        gone = wait_until(lambda: not [p for p in members if _alive(p)], timeout=30)
        if not gone:
            for process in members:
                if _alive(process):
                    process.kill()
        shutil.rmtree(temp, ignore_errors=True)
        assert gone, f"Ray head processes left behind: {[p for p in members if _alive(p)]}"


def _in_group(process: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(process.pid) == pgid
    except (ProcessLookupError, PermissionError):
        return False


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


CLIENT_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import parl

    @parl.remote_class(wait=False)
    class Worker:
        def double(self, a):
            return a * 2

        def fail(self):
            raise KeyError("missing key")

        def shout(self, text):
            print(text, flush=True)
            return True

    parl.connect(sys.argv[1])
    worker = Worker()
    big = np.arange(4_000_000, dtype=np.float32)  # 16 MB: through the object store
    futures = [worker.double(big), worker.double(np.ones(3))]
    out = parl.get(futures)
    assert np.array_equal(out[0], big * 2) and out[1].tolist() == [2.0, 2.0, 2.0]
    try:
        worker.fail().get()
    except KeyError as exc:
        print("KEYERROR", exc)
    assert worker.shout("hello through ray client").get()
    parl.close_actor(worker)
    parl.disconnect()
    print("CLIENT DONE")
    """
)


def test_actors_through_ray_client(ray_head, tmp_path):
    address, env = ray_head
    (tmp_path / "client.py").write_text(CLIENT_SCRIPT)
    done = subprocess.run(
        [sys.executable, "client.py", address], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=240,
    )  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "KEYERROR 'missing key'" in done.stdout
    assert "CLIENT DONE" in done.stdout
    assert "hello through ray client" in log  # the actor's print came back
