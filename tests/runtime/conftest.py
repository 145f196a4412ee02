"""Fixtures of the runtime tests: every test must leave no worker process and no segment."""

from __future__ import annotations

import gc
import os
import signal
import time

import psutil
import pytest

# A test run started in the background by a non-interactive shell (`cmd &`) inherits SIGINT
# ignored, and Python then leaves it ignored: the Ctrl-C tests would wait forever for a
# KeyboardInterrupt. They test what an interactive program gets, so give it back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.01):
    """Poll ``predicate`` until it is truthy or ``timeout`` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def _children() -> set[int]:
    """Our descendants, less the processes of a Ray that a test module started (its daemons
    and idle workers come and go by themselves); a Ray actor's worker counts."""
    return {
        p.pid for p in psutil.Process().children(recursive=True) if _alive(p) and not _ray_daemon(p)
    }


_RAY_DAEMON_TITLES = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def _ray_daemon(process: psutil.Process) -> bool:
    """A process of Ray's own (gcs_server, raylet, agents, log monitor, idle or starting
    workers), not the worker of an actor (titled ``ray::<Class>``)."""
    try:
        cmdline = process.cmdline()
    except psutil.Error:
        return False
    if not cmdline:
        return False
    if cmdline[0].startswith("ray::"):
        return cmdline[0].split(" ")[0] in _RAY_DAEMON_TITLES
    if any("/site-packages/ray/" in part for part in cmdline):
        return True
    from tests.runtime import rays  # the ray_head fixture's head and what it starts

    try:
        return os.getpgid(process.pid) in rays.HEAD_GROUPS
    except OSError:
        return False


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _shm_entries() -> set[str]:
    """Entries of /dev/shm, less multiprocessing's semaphores (``sem.mp-*``): other processes
    on the machine (and tests that use multiprocessing) make those, parl never does."""
    try:
        return {name for name in os.listdir("/dev/shm") if not name.startswith("sem.mp-")}
    except FileNotFoundError:
        return set()


@pytest.fixture(autouse=True)
def no_leaks():
    import parl

    parl.connect(linger=0)  # the worker pool stops with the last actor: leaks show at once
    before_children = _children()
    before_shm = _shm_entries()
    yield
    gc.collect()
    leftover = wait_until(lambda: not (_children() - before_children), timeout=10.0)
    assert leftover, f"worker processes left behind: {_children() - before_children}"
    new_shm = lasting_new_shm_entries(before_shm)
    assert not new_shm, f"/dev/shm entries left behind: {new_shm}"


def lasting_new_shm_entries(before: set[str], grace: float = 2.0) -> set[str]:
    """Entries of /dev/shm that were not in ``before`` and are still there after ``grace``
    seconds. /dev/shm is the machine's: another test run on it (or any other program) may hold a
    short-lived file there (multiprocessing's arenas, Ray's store) at the moment of a check; a
    leak stays."""
    wait_until(lambda: not (_shm_entries() - before), timeout=grace, interval=0.05)
    return _shm_entries() - before


# -- the cluster carrier ----------------------------------------------------------------------
# Modules that ``use the carrier`` fixture run each test on local workers and on a real
# cluster on loopback (tests/runtime/cluster.py); a test marked ``local_only`` runs locally.


def pytest_configure(config):
    config.addinivalue_line("markers", "local_only: run only on the local carrier")
    config.addinivalue_line(
        "markers", "not_on_ray(reason): a difference of the Ray carrier, listed in the README"
    )


def pytest_generate_tests(metafunc):
    if "carrier" in metafunc.fixturenames:
        local_only = metafunc.definition.get_closest_marker("local_only") is not None
        not_on_ray = metafunc.definition.get_closest_marker("not_on_ray") is not None
        params = ["local"] if local_only else ["local", "tcp"] + ([] if not_on_ray else ["ray"])
        metafunc.parametrize("carrier", params, indirect=True)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    from tests.runtime import cluster as clusters

    started = clusters.start(str(tmp_path_factory.mktemp("cluster-home")))
    previous = os.environ.get("PARL_CLUSTER_SECRET")
    os.environ["PARL_CLUSTER_SECRET"] = clusters.SECRET
    try:
        yield started
    finally:
        if previous is None:
            os.environ.pop("PARL_CLUSTER_SECRET", None)
        else:
            os.environ["PARL_CLUSTER_SECRET"] = previous
        clusters.stop(started)


@pytest.fixture
def carrier(request):
    """``"local"``, ``"tcp"`` (actors of the test go to the loopback cluster) or ``"ray"``
    (they are actors of a local Ray started for the test module)."""
    if request.param == "tcp":
        request.getfixturevalue("on_cluster")
    elif request.param == "ray":
        request.getfixturevalue("on_ray")
    return request.param


@pytest.fixture
def on_cluster(cluster):
    """Actors of the test go to the cluster; after the test, every slot they took is free
    again and no worker is left on the hosts."""
    import parl

    parl.connect(cluster.address, linger=0)
    try:
        yield cluster
    finally:
        gc.collect()
        parl.disconnect()  # closes the test's actors, and the connection to the master
        parl.connect(linger=0)
        assert wait_until(lambda: cluster.used() == 0, timeout=10), "cluster slots still used"
        assert wait_until(lambda: not cluster.workers(), timeout=10), "workers left behind"


@pytest.fixture
def small_cluster(tmp_path, monkeypatch):
    """A cluster of its own (a master and one host agent with one slot), for tests that kill
    a part of it; stopped afterwards, leaving no process and no port behind."""
    import parl
    from tests.runtime import cluster as clusters

    monkeypatch.setenv("PARL_CLUSTER_SECRET", clusters.SECRET)
    cluster = clusters.start(str(tmp_path / "home"), agent_slots=(1,))
    try:
        parl.connect(cluster.address, linger=0)
        yield cluster
    finally:
        gc.collect()
        parl.disconnect()
        parl.connect(linger=0)
        clusters.stop(cluster)


# -- Ray (tests/runtime/rays.py) ---------------------------------------------------------------
from tests.runtime.rays import on_ray, ray_local  # noqa: E402, F401

# -- real sshd processes on loopback for the SSH launcher (tests/runtime/sshd.py) -------------
from tests.runtime.sshd import lab, project, ssh_lab  # noqa: E402, F401
