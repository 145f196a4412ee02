"""What every worker starts with: its own random streams, and one intra-op thread."""

from __future__ import annotations

import gc

import pytest

import parl
from tests.runtime.actors import Draws, ThreeThreads


@pytest.mark.parametrize("preload", [[], ["torch", "numpy.random"]])
def test_every_worker_draws_its_own_random_numbers(preload):
    """With the generators imported by the fork server (``preload``), every worker inherited
    the same state: the identical ``torch.rand(1)`` and ``np.random.rand()``."""
    parl.connect(linger=0, preload=preload)
    with Draws() as first, Draws() as second:
        a, b = first.draws(), second.draws()
    for stream, name in enumerate(["random", "numpy", "torch"]):
        assert a[stream] != b[stream], (name, a, b)


@pytest.mark.parametrize("preload", [[], ["torch"]])
def test_a_worker_has_one_intra_op_thread_unless_its_class_says(preload, monkeypatch):
    """torch imported by the fork server, or later by the actor (then torch alone would cap
    OMP_NUM_THREADS at the number of cores: 3 is more than this machine may have)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    parl.connect(linger=0, preload=preload)
    with Draws() as default, ThreeThreads() as three:
        assert default.threads() == (1, "1")
        assert three.threads() == (3, "3")


def test_the_callers_omp_num_threads_applies_unless_the_class_says(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    parl.connect(linger=0)
    with Draws() as default, ThreeThreads() as three:
        assert default.threads() == (2, "2")
        assert three.threads() == (3, "3")


@pytest.mark.parametrize("bad", [0, -2])
def test_num_threads_must_be_positive(bad):
    with pytest.raises(
        ValueError, match=rf"num_threads must be a positive int \(threads per worker\), got {bad}"
    ):
        parl.remote_class(num_threads=bad)


@pytest.mark.parametrize("bad", ["4", 2.0, True, None.__class__])
def test_num_threads_must_be_an_int(bad):
    with pytest.raises(TypeError, match="num_threads must be a positive int"):
        parl.remote_class(num_threads=bad)


def test_numpy_matrix_products_use_num_threads():
    """numpy's OpenBLAS was loaded by the fork server: the environment is too late for it."""
    parl.connect(linger=0)
    with Draws() as default, ThreeThreads() as three:
        python_threads, before, after = default.threads_with_numpy()
        assert python_threads == before == after  # one thread: no pool, now or later
        assert three.threads_with_numpy()[2] > after


def test_the_fork_servers_objects_are_left_out_of_a_workers_collections():
    """They are never garbage; collecting them would copy their pages into every worker (and
    make each worker's end slow)."""
    with Draws() as actor:
        assert actor.apply(gc.get_freeze_count) > 1000
