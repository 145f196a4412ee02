"""Fixtures and settings of the whole suite: isolation of parallel test workers.

Under pytest-xdist (``-n 2``) each worker is a process of its own; everything a test writes to
a shared place is made per worker here. ``HOME`` points to a folder of the worker's own, since
``xparl`` keeps its clusters' registry, secret and code cache under ``~/.parl`` and
``xparl stop`` without a port stops every cluster listed there. Temporary folders
(``tmp_path``) and ports (the OS's free-port choice) are per worker already; leak checks count
the worker's own child processes.

The inner loop for day-to-day work is ``pytest -n 2 -m "not slow" tests``. Besides the tests
marked ``slow`` by hand (learning runs, the example scripts), every run on Ray (the ``ray``
carrier and the Ray modules) and every test of the SSH lab (``ssh``) counts as slow: each starts
a Ray or sshd processes of its own.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tests.runtime.rays import on_ray, ray_head, ray_local
from tests.timing import pytest_addoption, pytest_runtest_logreport, pytest_terminal_summary

# the Ray fixtures are the whole run's (tests/runtime and tests/rl): one Ray head per process
__all__ = ["on_ray", "pytest_addoption", "pytest_runtest_logreport", "pytest_terminal_summary",
           "ray_head", "ray_local"]  # fmt: skip

# Every Ray the tests start stays on loopback: on Linux, Ray rewrites a client's 127.0.0.1 to
# the machine's outward address and starts a local Ray's node there, which sends test traffic
# off loopback (and fails where only loopback is open). Ray reads this when it is imported.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

_WORKER_HOME: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _WORKER_HOME
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None and _WORKER_HOME is None:
        _WORKER_HOME = tempfile.mkdtemp(prefix=f"parl-tests-home-{worker}-")
        os.environ["HOME"] = _WORKER_HOME


# Training to a score belongs to the records of scripts/quality.py; the suite keeps at most this
# many such guards, each named ``test_threshold_...`` and marked ``threshold``.
MAX_THRESHOLD_TESTS = 5


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    check_threshold_guards(items)
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_ray = callspec is not None and callspec.params.get("carrier") == "ray"
        if on_ray or item.get_closest_marker("ssh") is not None:
            item.add_marker(pytest.mark.slow)


def check_threshold_guards(items: list[pytest.Item]) -> None:
    """Refuse a suite whose tests that train to a score are more than the allowed few, or are
    not named and marked as such."""
    guards = [item for item in items if item.get_closest_marker("threshold") is not None]
    marked = {id(item) for item in guards}
    for item in items:
        if item.name.startswith("test_threshold_") != (id(item) in marked):
            raise pytest.UsageError(
                f"{item.nodeid}: a test that trains to a score is named test_threshold_... and "
                "marked @pytest.mark.threshold, both or neither"
            )
    if len(guards) > MAX_THRESHOLD_TESTS:
        raise pytest.UsageError(
            f"{len(guards)} tests train to a score, at most {MAX_THRESHOLD_TESTS} may: move a "
            "learning run to a scripts/quality.py record (docs/development.md, the time budget): "
            + ", ".join(item.nodeid for item in guards)
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    if _WORKER_HOME is not None:
        shutil.rmtree(_WORKER_HOME, ignore_errors=True)
