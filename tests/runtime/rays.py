"""A local Ray for the tests: one per test process (an xdist worker), started by the first test
that asks for it and shut down at the end of the run; and a Ray head (``ray_head``) for the
one module that drives Ray Client from a user's script.

Without Ray installed, the Ray tests are skipped with the install hint, except under
``CI=true`` (``.ci/run`` installs the ``ray`` extra), where that is a failure.
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from typing import NamedTuple

import psutil
import pytest

from tests.runtime.conftest import wait_until

NUM_CPUS = 2  # logical: test_ray_backend's resource tests hold them; Ray starts a worker per CPU


def require_ray():
    """The ``ray`` module, or a skip (a failure under CI=true) naming the install command."""
    try:
        import ray
    except ImportError:
        from parl.ray import install_hint

        message = f"Ray is not installed: {install_hint()}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return ray


@pytest.fixture(scope="session")
def ray_local():
    """``ray.init(num_cpus=NUM_CPUS, include_dashboard=False)`` in this process, shared by every test
    of the run on Ray (``on_ray`` checks after each that none of its actors is left); at the
    end, ``ray.shutdown()`` and a check that every process Ray started has ended."""
    ray = require_ray()
    if ray.is_initialized():
        pytest.fail("a Ray from an earlier test is still initialised in this process")
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # e.g. the SSH lab's
    # address="local": a new Ray of its own even when another one runs on this machine (a
    # plain ray.init() joins the last `ray start` head it finds)
    ray.init(address="local", num_cpus=NUM_CPUS, include_dashboard=False, logging_level="warning")
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    try:
        yield ray
    finally:
        ray.shutdown()
        left = wait_until(lambda: not [p for p in started if _running(p)], timeout=20)
        assert left, f"Ray processes left behind: {[p for p in started if _running(p)]}"


@pytest.fixture
def on_ray(ray_local):
    """Actors of the test are Ray actors; after it, none is left (no worker of an actor)."""
    import parl

    parl.connect("ray")
    try:
        yield ray_local
    finally:
        gc.collect()
        parl.disconnect()  # kills the test's actors; leaves the shared Ray running
        parl.connect(linger=0)
        assert wait_until(lambda: not actor_workers(), timeout=30), (
            f"Ray actors left behind: {[_title(p) for p in actor_workers()]}"
        )


def actor_workers() -> list[psutil.Process]:
    """Live processes titled ``ray::ParlActor...``: the workers of this project's actors."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.cmdline()[:1] and process.cmdline()[0].startswith("ray::ParlActor"):
                if process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process)
        except psutil.Error:
            pass
    return found


def _title(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:80]}"
    except psutil.Error:
        return str(process.pid)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


HEAD_GROUPS: set[int] = set()  # process groups of ray_head's heads: not leaks of a test


class RayHead(NamedTuple):
    gcs: str  # host:port, what RAY_ADDRESS takes
    client: str  # ray://host:port (Ray Client)
    env: dict[str, str]  # environment for its clients: RAY_ADDRESS, no token auth


# `ray start --block` takes about 30 s to end on SIGTERM here; its processes die as fast on
# SIGKILL (the group), and its files are in its own temp folder, removed below
HEAD_STOP_S = 3.0


@pytest.fixture(scope="module")
def ray_head():
    """A Ray head of its own (``ray start --head --block`` on loopback, 2 CPUs, its own temp
    folder), shared by a module's tests that drive Ray from user scripts; ended through its
    process group at the end of the module (so that no process of it outlives the module),
    never with ``ray stop`` (which stops every Ray of this user)."""
    require_ray()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's sockets live under it
    gcs, client = _free_port(), _free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    client_env = dict(env, RAY_ADDRESS=f"127.0.0.1:{gcs}")
    command = [
        os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head", "--block",
        "--node-ip-address", "127.0.0.1", "--port", str(gcs),
        "--ray-client-server-port", str(client), "--num-cpus", "2",
        "--include-dashboard", "false", "--disable-usage-stats",
        "--temp-dir", temp,
    ]  # fmt: skip
    log_path = os.path.join(temp, "head.log")  # a file: a pipe nobody reads would fill up
    with open(log_path, "w") as log:
        head = subprocess.Popen(
            command, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
        )
    HEAD_GROUPS.add(head.pid)  # its own process group (start_new_session)
    try:
        assert wait_until(lambda: _listening(client) or head.poll() is not None, timeout=90)
        assert head.poll() is None, open(log_path).read()
        yield RayHead(f"127.0.0.1:{gcs}", f"ray://127.0.0.1:{client}", client_env)
    finally:
        members = [p for p in psutil.process_iter() if _in_group(p, head.pid)]
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=HEAD_STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        gone = wait_until(lambda: not [p for p in members if _running(p)], timeout=30)
        if not gone:
            for process in members:
                if _running(process):
                    process.kill()
        shutil.rmtree(temp, ignore_errors=True)
        assert gone, f"Ray head processes left behind: {[p for p in members if _running(p)]}"


def _in_group(process: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(process.pid) == pgid
    except (ProcessLookupError, PermissionError):
        return False
