"""What every worker starts with: its own random streams, one intra-op thread (or its class's
num_threads), and the fork server's objects frozen out of its collections."""

from __future__ import annotations

import gc

import pytest

import parl
from tests.runtime.actors import Draws, ThreeThreads


@pytest.mark.parametrize("preload", [[], ["torch", "numpy.random"]])
def test_every_worker_draws_its_own_random_numbers_and_has_one_intra_op_thread(
    preload, monkeypatch
):
    """With the generators imported by the fork server (``preload``), every worker inherited
    the same state: the identical ``torch.rand(1)`` and ``np.random.rand()``. torch imported by
    the fork server, or later by the actor (then torch alone would cap OMP_NUM_THREADS at the
    number of cores: 3 is more than this machine may have), leaves a worker one intra-op thread
    unless its class says. numpy's OpenBLAS was loaded by the fork server: the environment is
    too late for it, and its matrix products still use ``num_threads``. The fork server's
    objects are left out of a worker's collections: they are never garbage; collecting them
    would copy their pages into every worker (and make each worker's end slow)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    parl.connect(linger=0, preload=preload)
    with Draws() as first, Draws() as second, ThreeThreads() as three:
        a, b = first.draws(), second.draws()
        for stream, name in enumerate(["random", "numpy", "torch"]):
            assert a[stream] != b[stream], (name, a, b)
        assert second.threads() == (1, "1")
        assert three.threads() == (3, "3")
        python_threads, before, after = first.threads_with_numpy()
        assert python_threads == before == after  # one thread: no pool, now or later
        assert three.threads_with_numpy()[2] > after
        assert first.apply(gc.get_freeze_count) > 1000


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
