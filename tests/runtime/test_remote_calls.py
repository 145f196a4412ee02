"""Calls, attributes, exceptions and futures on real actors of each carrier, and ``parl.wait``
and ``parl.get`` over futures of many actors: which future is done first, timeouts, order of
results, remote errors, a dead actor's future and bad arguments."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import parl
from parl.remote.future import FutureEmpty
from tests.runtime.actors import AsyncHiding, AsyncSampler, CustomError, Hiding, Sampler

pytestmark = pytest.mark.usefixtures("carrier")  # on local workers, a cluster and Ray


@pytest.fixture
def sampler():
    actor = Sampler(8)
    yield actor
    parl.close_actor(actor)


@pytest.mark.not_on_ray("arrays arrive read-only on Ray: rollout() writes into buf")
def test_the_readme_example_calls_methods_and_sets_attributes(sampler):
    assert sampler.add(1, 2) == 3
    np.testing.assert_array_equal(sampler.buf, np.zeros(8, np.float32))
    sampler.buf = np.ones(4)
    np.testing.assert_array_equal(sampler.buf, np.ones(4))
    np.testing.assert_array_equal(sampler.rollout(), np.full(4, 2.0))


@pytest.mark.local_only  # no actor: the same on every carrier
def test_proxy_class_is_built_once_from_the_methods_and_keeps_the_original():
    assert {"add", "rollout", "apply"} <= set(vars(Sampler))  # stubs made at decoration
    assert Sampler.add.__doc__ == Sampler._original.add.__doc__
    assert isinstance(Sampler.__dict__.get("size"), type(None))  # a property: forwarded as data
    assert Sampler._original.__name__ == "Sampler"
    assert Sampler._original(2).add(2, 3) == 5  # the plain class, in this process
    assert Sampler.__name__ == "Sampler"


@pytest.mark.local_only
def test_workers_are_forked_by_the_fork_server_not_by_the_caller(sampler):
    import psutil

    from parl.remote.context import current

    worker = psutil.Process(sampler.pid())
    assert worker.ppid() == current().carrier.server_pid != os.getpid()


@pytest.mark.local_only
def test_actor_sees_the_callers_environment_and_folder(monkeypatch, tmp_path):
    keep = Sampler()  # the fork server is already running when the variable is set
    monkeypatch.setenv("PARL_TEST_MARKER", "set-later")
    monkeypatch.chdir(tmp_path)
    actor = Sampler()
    assert actor.getenv("PARL_TEST_MARKER") == "set-later"
    assert actor.getcwd() == str(tmp_path)
    assert keep.getenv("PARL_TEST_MARKER") is None


def test_a_sync_actor_answers_calls_attributes_and_errors_in_order(sampler):
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    from parl.remote.exceptions import RemoteSerializeError

    assert sampler.pid() != os.getpid()  # the actor runs in another process

    # properties and dynamic methods
    assert sampler.size == 8
    method = sampler.append  # a bound method of the actor, fetched like an attribute
    assert method(5) == 1

    # calls run in order
    results = [sampler.append(i) for i in range(50)]
    assert results == list(range(2, 52))
    assert sampler.log == [5, *range(50)]

    # an unknown method raises AttributeError
    with pytest.raises(AttributeError, match="no_such_method"):
        sampler.no_such_method()
    assert sampler.add(1, 1) == 2

    # a remote exception keeps its type and traceback; the actor stays usable
    with pytest.raises(CustomError, match="boom") as info:
        sampler.raise_custom("boom")
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "Remote traceback" in notes and "raise_custom" in notes
    assert "raise CustomError(message)" in info.value.remote_traceback
    assert sampler.add(2, 2) == 4

    # an exception that cannot be rebuilt becomes a RemoteError
    with pytest.raises(parl.RemoteError, match="UnpicklableError") as info:
        sampler.raise_unpicklable()
    assert "raise_unpicklable" in info.value.remote_traceback
    assert sampler.add(1, 2) == 3

    # an unpicklable return value is a TypeError
    with pytest.raises(TypeError, match="return value of return_unpicklable") as raised:
        sampler.return_unpicklable()
    assert isinstance(raised.value, RemoteSerializeError)  # what PARL code catches
    assert sampler.add(1, 2) == 3

    # lambdas and closures as arguments
    k = 7
    assert sampler.apply(lambda x: x * k, 6) == 42

    def closure(a, b):
        return a - b + k

    assert sampler.apply(closure, 10, 3) == 14

    # many threads share one actor
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: sampler.add(i, i), range(400)))
    assert results == [2 * i for i in range(400)]

    # the proxy cannot be pickled
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(sampler)


def test_instance_attributes_hide_methods_and_init_errors_raise_at_creation():
    from tests.runtime.actors import FailsInInit

    with pytest.raises(CustomError, match="bad config"):
        FailsInInit("bad config")

    actor = Hiding(19)  # __init__ sets self.total, and the class has a method total()
    assert actor.total == 19
    with pytest.raises(TypeError, match="not callable"):
        actor.total(1, 2)  # as in Python: the attribute is an int
    assert actor.count() == 100
    assert actor.label() == "static"
    # attributes set later by the caller or a method hide methods until deleted
    actor.count = 5  # set by the caller
    assert actor.count == 5
    actor.label = "hidden too"  # a static method, hidden by an attribute of the instance
    assert actor.label == "hidden too"
    actor.drop_count()
    assert actor.count() == 100  # deleted in the actor: the method again
    actor.set_count(7)  # set by a method of the actor
    assert actor.count == 7
    parl.close_actor(actor)

    # a wait=False actor reads hiding attributes at once
    actor = AsyncHiding(19)
    assert actor.total == 19  # an attribute: its value, not a future
    assert actor.count().get() == 100
    actor.set_count(8).get()
    assert actor.count == 8
    actor.drop_count()  # its future is dropped: the names its reply brings still count
    assert actor.total == 19  # read after that reply
    assert actor.count().get() == 100
    parl.close_actor(actor)


def test_futures_results_errors_timeouts_and_pipelined_requests(tmp_path):
    actor = AsyncSampler()
    future = actor.add(1, 2)
    assert isinstance(future, parl.Future)
    assert future.get() == 3
    assert future.get() == 3  # a second get returns the same result
    futures = [actor.step() for _ in range(200)]
    assert [f.get() for f in futures] == list(range(1, 201))

    # dropped futures do not block later calls
    for _ in range(100):
        actor.step()  # futures dropped at once
    assert actor.step().get() == 301

    # a future's exception, raised by every get; the actor stays usable
    failing = actor.fail()
    with pytest.raises(ValueError, match="async failure"):
        failing.get()
    with pytest.raises(ValueError):
        failing.get()
    assert actor.add(2, 3).get() == 5

    # timeout, empty and get_nowait
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    blocked = actor.block(str(fifo))
    assert blocked.empty()
    with pytest.raises(FutureEmpty):
        blocked.get_nowait()
    with pytest.raises(TimeoutError):
        blocked.get(timeout=0.05)
    with pytest.raises(FutureEmpty):
        blocked.get(block=False)
    with open(fifo, "w") as f:
        f.write("released")
    assert blocked.get(timeout=10) == "released"
    assert not blocked.empty()
    assert blocked.get_nowait() == "released"

    # more queued requests and replies than the socket holds: the sender drains replies
    payload = np.ones(20_000, np.float64)  # 160 KB each way
    small = np.ones(8_000, np.float64)  # 64 KB: inline
    futures = [actor.add(small, i) for i in range(300)]
    futures += [actor.add(payload, 1) for _ in range(20)]
    for i, f in enumerate(futures[:300]):
        assert f.get(timeout=60)[0] == 1 + i
    for f in futures[300:]:
        assert f.get(timeout=60)[0] == 2
    parl.close_actor(actor)


def test_classes_defined_inside_a_function_run_at_the_same_time(tmp_path):
    @parl.remote_class
    class Local:
        def __init__(self, base):
            self.base = base

        def plus(self, x):
            return self.base + x

    actor = Local(10)
    assert actor.plus(5) == 15

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    @parl.remote_class(wait=False)
    class Party:
        def meet(self, path, role):
            with open(path, "w" if role == "writer" else "r") as f:
                if role == "writer":
                    f.write("hello")
                    return "sent"
                return f.read()

    reader, writer = Party(), Party()
    got = reader.meet(str(fifo), "reader")  # blocks until the writer opens the FIFO
    sent = writer.meet(str(fifo), "writer")
    assert sent.get(timeout=30) == "sent"
    assert got.get(timeout=30) == "hello"


@pytest.mark.local_only
def test_parls_import_paths_give_this_packages_exceptions_and_futures(tmp_path):
    from parl.remote import exceptions
    from parl.remote.client import connect, disconnect
    from parl.remote.future_mode import FutureObject
    from parl.remote.future_mode.future_object import FutureObject as SameFutureObject

    assert FutureObject is SameFutureObject is parl.Future
    assert (connect, disconnect) == (parl.connect, parl.disconnect)
    assert exceptions.RemoteError is exceptions.FutureFunctionError is parl.RemoteError
    assert issubclass(exceptions.RemoteSerializeError, parl.errors.SerializationError)
    assert issubclass(exceptions.RemoteDeserializeError, parl.RemoteError)
    assert issubclass(exceptions.ResourceError, parl.ClusterError)
    assert issubclass(exceptions.FutureGetRepeatedlyError, parl.ParlError)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    actor = AsyncSampler()
    blocked = actor.block(str(fifo))
    with pytest.raises(exceptions.FutureObjectEmpty):  # also a TimeoutError
        blocked.get(timeout=0.05)
    with pytest.raises(exceptions.FutureObjectEmpty):
        blocked.get_nowait()
    with open(fifo, "w") as f:
        f.write("released")
    assert blocked.get(timeout=10) == "released"
    with pytest.raises(exceptions.RemoteAttributeError, match="no_such_attribute"):
        _ = actor.no_such_attribute
    with pytest.raises(exceptions.RemoteSerializeError, match="argument"):
        actor.add((i for i in range(2)), 1)  # a generator cannot be pickled
    parl.close_actor(actor)


# -- parl.wait and parl.get over futures of several actors ----------------------------------


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
    with open(never, "w") as f:  # it answers after all: its actor ends without a stop_timeout
        f.write("late")
    assert other.get(timeout=10) == "late"
