"""``parl.wait`` and ``parl.get`` over futures of many actors."""

from __future__ import annotations

import os
import signal
import time

import pytest

import parl
from tests.runtime.actors import AsyncSampler

pytestmark = pytest.mark.usefixtures("carrier")  # on local workers and on a cluster


@pytest.fixture
def actors():
    group = [AsyncSampler() for _ in range(3)]
    yield group
    for actor in group:
        parl.close_actor(actor)


def test_wait_returns_the_actor_that_answers_first(actors, tmp_path):
    fifos = [tmp_path / f"f{i}" for i in range(2)]
    for fifo in fifos:
        os.mkfifo(fifo)
    blocked = [actors[i].block(str(fifos[i])) for i in range(2)]
    quick = actors[2].add(1, 2)
    futures = [*blocked, quick]
    done, pending = parl.wait(futures, num_returns=1, timeout=10)
    assert done == [quick] and pending == blocked
    assert quick.get() == 3
    with open(fifos[1], "w") as f:  # now the second blocked actor answers
        f.write("second")
    done, pending = parl.wait(blocked, num_returns=1, timeout=10)
    assert done == [blocked[1]] and pending == [blocked[0]]
    with open(fifos[0], "w") as f:
        f.write("first")
    assert parl.get(futures, timeout=10) == ["first", "second", 3]  # in the input's order


def test_wait_timeout_returns_what_is_done(actors, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    blocked = actors[0].block(str(fifo))
    quick = actors[1].add(2, 2)
    start = time.monotonic()
    done, pending = parl.wait([blocked, quick], num_returns=2, timeout=0.3)
    assert time.monotonic() - start >= 0.29
    assert done == [quick] and pending == [blocked]
    with pytest.raises(parl.GetTimeoutError, match="1 of 2 futures still pending after 0.2 s"):
        parl.get([blocked, quick], timeout=0.2)
    with open(fifo, "w") as f:
        f.write("x")
    assert blocked.get(timeout=10) == "x"


def test_many_futures_on_many_actors_in_order(actors):
    futures = [actors[i % 3].add(i, 1) for i in range(300)]
    assert parl.get(futures) == [i + 1 for i in range(300)]
    done, pending = parl.wait(futures, num_returns=300)
    assert len(done) == 300 and pending == []


def test_a_dead_actor_is_done_with_its_error(actors, tmp_path, carrier):
    fifo, never = tmp_path / "fifo", tmp_path / "never"
    os.mkfifo(fifo)
    os.mkfifo(never)
    pid = actors[0].pid().get()
    doomed = actors[0].block(str(fifo))
    other = actors[1].block(str(never))  # never answers
    os.kill(pid, signal.SIGKILL)
    done, pending = parl.wait([other, doomed], num_returns=1, timeout=10)
    assert done == [doomed] and pending == [other]
    # Ray does not tell how its worker ended (docs/guides/ray.md): the error says it died
    with pytest.raises(parl.ActorDiedError, match="died" if carrier == "ray" else "SIGKILL"):
        parl.get([doomed], timeout=10)


def test_remote_errors_are_raised_by_get(actors):
    futures = [actors[0].add(1, 1), actors[1].fail(), actors[2].add(2, 2)]
    done, _ = parl.wait(futures, num_returns=3, timeout=10)
    assert len(done) == 3
    with pytest.raises(ValueError, match="async failure"):
        parl.get(futures)
    assert parl.get(actors[0].add(5, 5)) == 10  # one future: its result


def test_bad_arguments_are_named(actors):
    future = actors[0].add(1, 1)
    with pytest.raises(TypeError, match="list of futures"):
        parl.wait(future)
    with pytest.raises(TypeError, match="item 1 is a int"):
        parl.get([future, 3])
    with pytest.raises(ValueError, match="num_returns must be an int between 0 and"):
        parl.wait([future], num_returns=2)
    with pytest.raises(TypeError, match=r"num_returns must be an int between .*got 1.0 \(float\)"):
        parl.wait([future], num_returns=1.0)
    with pytest.raises(ValueError, match="timeout must be"):
        parl.wait([future], timeout=-1)
    assert future.get() == 2
