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


# The local worker pool (the fork server) stays warm from one test to the next: starting it
# costs about a quarter of a second, which hundreds of tests paid twice (start and stop). A test
# of the pool's own life cycle is marked ``fresh_pool`` and gets one that starts with its first
# actor and stops with its last, as a program's does.
WARM_LINGER_S = 600.0
_warm: list[object] = []  # the warm context of this process, if it is still the current one


def _local_context(fresh: bool) -> object:
    """Make the local context current: the warm one, or a fresh one that does not linger."""
    import parl
    from parl.remote import context

    if not fresh and _warm and _warm[0] is context.current():
        return _warm[0]
    if _warm and not _warm[0].carrier.live_actors:  # type: ignore[attr-defined]
        _warm[0].carrier.close()  # replaced by a test's connect: do not let it linger
    parl.connect(linger=0 if fresh else WARM_LINGER_S)
    current = context.current()
    _warm[:] = [] if fresh else [current]
    return current


def _idle_pool(current: object) -> set[int]:
    """The fork server of the warm context while no actor of it lives: not a leak."""
    from parl.remote import context

    carrier = current.carrier  # type: ignore[attr-defined]
    if current is not context.current() or carrier.live_actors or carrier.server_pid is None:
        return set()
    return {carrier.server_pid}


@pytest.fixture(autouse=True)
def by_value_modules_restored():
    """A test whose folder is not this project (``monkeypatch.chdir``) makes the cluster and
    Ray carriers send the test modules by value, process-wide; later tests must not see it."""
    from parl.wire import classes

    before = classes.by_value_modules()
    yield
    for name in classes.by_value_modules() - before:
        classes.send_by_reference(name)


_frozen: list[bool] = []  # whether the objects of the imports were moved out of gc's way


def _freeze_imports() -> None:
    """Before the first test, move every object that exists then (modules, classes, functions
    of torch, numpy, parl and the test modules: they live as long as the process) to gc's
    permanent generation. Each test ends with a full collection; it then scans the objects
    made since, not the hundreds of thousands of the imports, which took most of its time."""
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen.append(True)


@pytest.fixture(autouse=True)
def no_leaks(request):
    _freeze_imports()
    current = _local_context(fresh=request.node.get_closest_marker("fresh_pool") is not None)
    before_children = _children()
    before_shm = _shm_entries()
    yield
    gc.collect()

    def left() -> set[int]:
        return _children() - before_children - _idle_pool(current)

    assert wait_until(lambda: not left(), timeout=10.0), f"processes left behind: {left()}"
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
        "markers", "not_on_ray(reason): a difference of the Ray carrier, listed in the Ray guide"
    )


def pytest_collection_modifyitems(items):
    """Within each module, the local runs first, then those on the cluster, then on Ray: each
    switch of carrier costs a (re)start of the local pool or a connection, and a module's tests
    do not depend on their order."""
    order = {"local": 0, "tcp": 1, "ray": 2}

    def key(item):
        callspec = getattr(item, "callspec", None)
        carrier = callspec.params.get("carrier", "local") if callspec is not None else "local"
        return (item.fspath, order.get(carrier, 0))

    position = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (key(item), position[id(item)]))


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
    try:
        with clusters.secret_in_environment():
            yield started
    finally:
        clusters.stop(started)


@pytest.fixture
def carrier(request):
    """``"local"``, ``"tcp"`` (actors of the test go to the loopback cluster) or ``"ray"``
    (they are actors of the local Ray that the test process shares, tests/runtime/rays.py)."""
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


# -- real sshd processes on loopback for the SSH launcher (tests/runtime/sshd.py) -------------
from tests.runtime.sshd import lab, project, ssh_lab  # noqa: E402, F401
