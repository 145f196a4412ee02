"""``parl.wait`` and ``parl.get`` over futures of many actors: which future is done first, timeouts,
order of results, remote errors, a dead actor's future and bad arguments, on one group of
three actors per carrier."""

from __future__ import annotations

import os
import signal
import time

import pytest

import parl
from tests.runtime.actors import AsyncSampler

pytestmark = pytest.mark.usefixtures("carrier")  # on local workers, a cluster and Ray


@pytest.fixture
def actors():
    group = [AsyncSampler() for _ in range(3)]
    yield group
    for actor in group:
        parl.close_actor(actor)


def test_wait_and_get_over_futures_of_several_actors(actors, tmp_path, carrier):
    # wait returns the actor that answers first, then the next one
    fifos = [tmp_path / f"f{i}" for i in range(2)]
    for fifo in fifos:
        os.mkfifo(fifo)
    blocked = [actors[i].block(str(fifos[i])) for i in range(2)]
    quick = actors[2].add(1, 2)
    futures = [*blocked, quick]
    done, pending = parl.wait(futures, num_returns=1, timeout=10)
    assert done == [quick] and pending == blocked
    assert quick.get() == 3

    # a timeout returns what is done, after waiting the whole timeout
    start = time.monotonic()
    done, pending = parl.wait([blocked[0], quick], num_returns=2, timeout=0.3)
    assert time.monotonic() - start >= 0.29
    assert done == [quick] and pending == [blocked[0]]
    with pytest.raises(parl.GetTimeoutError, match="1 of 2 futures still pending after 0.2 s"):
        parl.get([blocked[0], quick], timeout=0.2)

    with open(fifos[1], "w") as f:  # now the second blocked actor answers
        f.write("second")
    done, pending = parl.wait(blocked, num_returns=1, timeout=10)
    assert done == [blocked[1]] and pending == [blocked[0]]
    with open(fifos[0], "w") as f:
        f.write("first")
    assert parl.get(futures, timeout=10) == ["first", "second", 3]  # in the input's order

    # many futures on many actors come back in order
    many = [actors[i % 3].add(i, 1) for i in range(300)]
    assert parl.get(many) == [i + 1 for i in range(300)]
    done, pending = parl.wait(many, num_returns=300)
    assert len(done) == 300 and pending == []

    # a remote error is done, and get raises it; one future: its result
    failing = [actors[0].add(1, 1), actors[1].fail(), actors[2].add(2, 2)]
    done, _ = parl.wait(failing, num_returns=3, timeout=10)
    assert len(done) == 3
    with pytest.raises(ValueError, match="async failure"):
        parl.get(failing)
    assert parl.get(actors[0].add(5, 5)) == 10

    # bad arguments are named
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

    # a dead actor's future is done with its error, before one that never answers
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
