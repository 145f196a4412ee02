"""Fixtures of the runtime tests: every test must leave no worker process and no segment."""

from __future__ import annotations

import gc
import os
import time

import psutil
import pytest


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.01):
    """Poll ``predicate`` until it is truthy or ``timeout`` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if _alive(p)}


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
    new_shm = _shm_entries() - before_shm
    assert not new_shm, f"/dev/shm entries left behind: {new_shm}"
