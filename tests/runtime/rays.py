"""The Ray of the tests: one Ray head per test process (an xdist worker), started by the first
test that asks for it and ended at the end of the run. This process joins it (``ray_local``,
``on_ray``); scripts of the tests join it through ``RAY_ADDRESS`` or Ray Client
(``ray_head``): a Ray costs seconds of CPU to start and a little all the while it runs.

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

NUM_CPUS = 2  # logical: test_ray_backend's resource tests hold them
POLL_S = 0.05  # waits on actor_workers(): a scan of this process's descendants costs ms of CPU


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
def ray_local(ray_head):
    """This process joined to the run's Ray head (``ray.init(address=...)``), shared by every
    test of the run on Ray (``on_ray`` checks after each that none of its actors is left);
    ``ray.shutdown()`` at the end, before the head is ended."""
    ray = require_ray()
    if ray.is_initialized():
        pytest.fail("a Ray from an earlier test is still initialised in this process")
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # as the head: no token to present
    ray.init(address=ray_head.gcs, logging_level="warning")
    try:
        yield ray
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved


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
        assert wait_until(lambda: not actor_workers(), timeout=30, interval=POLL_S), (
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


# `ray start --block` takes about 30 s to end on SIGTERM here: the head is ended by SIGKILL to
# its process group (its driver in this process has shut down first); its files are in its own
# temp folder, removed below


# Ray starts an idle worker per CPU when the first driver joins, for tasks of that driver's
# environment; an actor of parl ships its code (a runtime_env of its own), so it never runs in
# one of them: they would only compete with the tests for the CPUs.
NO_IDLE_WORKERS = {"RAY_prestart_worker_first_driver": "0"}


@pytest.fixture(scope="session")
def ray_head():
    """The Ray head of this test process (``ray start --head --block`` on loopback, NUM_CPUS
    CPUs, its own temp folder), for every test of the run on Ray; ended through its process
    group at the end of the run (so that no process of it outlives the run), never with
    ``ray stop`` (which stops every Ray of this user)."""
    require_ray()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's sockets live under it
    gcs, client = _free_port(), _free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", **NO_IDLE_WORKERS)
    client_env = dict(env, RAY_ADDRESS=f"127.0.0.1:{gcs}")
    command = [
        os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head", "--block",
        "--node-ip-address", "127.0.0.1", "--port", str(gcs),
        "--ray-client-server-port", str(client), "--num-cpus", str(NUM_CPUS),
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
