"""A local Ray for the tests: one per test module that asks for it, shut down at its end.

Without Ray installed, the Ray tests are skipped with the install hint, except under
``CI=true`` (``.ci/run`` installs the ``ray`` extra), where that is a failure.
"""

from __future__ import annotations

import gc
import os

import psutil
import pytest

from tests.runtime.conftest import wait_until

NUM_CPUS = 4  # logical: test_wait_get holds 3 actors at once (the machine has 2 cores)


def require_ray():
    """The ``ray`` module, or a skip (a failure under CI=true) naming the install command."""
    try:
        import ray
    except ImportError:
        from parl.ray import INSTALL_HINT

        message = f"Ray is not installed: {INSTALL_HINT}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return ray


@pytest.fixture(scope="module")
def ray_local():
    """``ray.init(num_cpus=4, include_dashboard=False)`` in this process; at the end of the
    module, ``ray.shutdown()`` and a check that every process Ray started has ended."""
    ray = require_ray()
    if ray.is_initialized():
        pytest.fail("a Ray from an earlier test is still initialised in this process")
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # e.g. the SSH lab's
    ray.init(num_cpus=NUM_CPUS, include_dashboard=False, logging_level="warning")
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
        parl.disconnect()  # kills the test's actors; leaves the module's Ray running
        parl.connect(linger=0)
        assert wait_until(lambda: not actor_workers(), timeout=10), "Ray actors left behind"


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


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
