"""Calls, attributes, exceptions and futures on real local actors."""

from __future__ import annotations

import os

import numpy as np
import pytest

import parl
from parl.remote.future import FutureEmpty
from tests.runtime.actors import AsyncHiding, AsyncSampler, CustomError, Hiding, Sampler

pytestmark = pytest.mark.usefixtures("carrier")  # on local workers and on a cluster


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


def test_actor_runs_in_another_process(sampler):
    assert sampler.pid() != os.getpid()


def test_proxy_class_is_built_once_from_the_methods():
    assert {"add", "rollout", "apply"} <= set(vars(Sampler))  # stubs made at decoration
    assert Sampler.add.__doc__ == Sampler._original.add.__doc__
    assert isinstance(Sampler.__dict__.get("size"), type(None))  # a property: forwarded as data


@pytest.mark.local_only
def test_workers_are_forked_by_the_fork_server_not_by_the_caller(sampler):
    import psutil

    from parl.remote.context import current

    worker = psutil.Process(sampler.pid())
    assert worker.ppid() == current().carrier.server_pid != os.getpid()


def test_original_class_is_kept():
    assert Sampler._original.__name__ == "Sampler"
    assert Sampler._original(2).add(2, 3) == 5  # the plain class, in this process
    assert Sampler.__name__ == "Sampler"


@pytest.mark.local_only
def test_actor_sees_the_callers_environment_and_folder(monkeypatch, tmp_path):
    keep = Sampler()  # the fork server is already running when the variable is set
    monkeypatch.setenv("PARL_TEST_MARKER", "set-later")
    monkeypatch.chdir(tmp_path)
    actor = Sampler()
    assert actor.getenv("PARL_TEST_MARKER") == "set-later"
    assert actor.getcwd() == str(tmp_path)
    assert keep.getenv("PARL_TEST_MARKER") is None


def test_properties_and_dynamic_methods(sampler):
    assert sampler.size == 8
    method = sampler.append  # a bound method of the actor, fetched like an attribute
    assert method(5) == 1


def test_calls_run_in_order(sampler):
    results = [sampler.append(i) for i in range(50)]
    assert results == list(range(1, 51))
    assert sampler.log == list(range(50))


def test_unknown_method_raises_attribute_error(sampler):
    with pytest.raises(AttributeError, match="no_such_method"):
        sampler.no_such_method()
    assert sampler.add(1, 1) == 2


def test_remote_exception_keeps_its_type_and_traceback(sampler):
    with pytest.raises(CustomError, match="boom") as info:
        sampler.raise_custom("boom")
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "Remote traceback" in notes and "raise_custom" in notes
    assert "raise CustomError(message)" in info.value.remote_traceback
    assert sampler.add(2, 2) == 4  # still usable


def test_exception_that_cannot_be_rebuilt_becomes_remote_error(sampler):
    with pytest.raises(parl.RemoteError, match="UnpicklableError") as info:
        sampler.raise_unpicklable()
    assert "raise_unpicklable" in info.value.remote_traceback
    assert sampler.add(1, 2) == 3


def test_unpicklable_return_value_is_a_type_error(sampler):
    from parl.remote.exceptions import RemoteSerializeError

    with pytest.raises(TypeError, match="return value of return_unpicklable") as raised:
        sampler.return_unpicklable()
    assert isinstance(raised.value, RemoteSerializeError)  # what PARL code catches
    assert sampler.add(1, 2) == 3


def test_lambdas_and_closures_as_arguments(sampler):
    k = 7
    assert sampler.apply(lambda x: x * k, 6) == 42

    def closure(a, b):
        return a - b + k

    assert sampler.apply(closure, 10, 3) == 14


def test_exception_in_init_raises_at_creation():
    from tests.runtime.actors import FailsInInit

    with pytest.raises(CustomError, match="bad config"):
        FailsInInit("bad config")


def test_an_instance_attribute_hides_the_method_of_the_same_name():
    actor = Hiding(19)  # __init__ sets self.total, and the class has a method total()
    assert actor.total == 19
    with pytest.raises(TypeError, match="not callable"):
        actor.total(1, 2)  # as in Python: the attribute is an int
    assert actor.count() == 100
    assert actor.label() == "static"
    parl.close_actor(actor)


def test_attributes_set_later_by_the_caller_or_a_method_hide_methods_until_deleted():
    actor = Hiding(0)
    actor.count = 5  # set by the caller
    assert actor.count == 5
    actor.label = "hidden too"  # a static method, hidden by an attribute of the instance
    assert actor.label == "hidden too"
    actor.drop_count()
    assert actor.count() == 100  # deleted in the actor: the method again
    actor.set_count(7)  # set by a method of the actor
    assert actor.count == 7
    parl.close_actor(actor)


def test_a_wait_false_actor_reads_hiding_attributes_at_once():
    actor = AsyncHiding(19)
    assert actor.total == 19  # an attribute: its value, not a future
    assert actor.count().get() == 100
    actor.set_count(8).get()
    assert actor.count == 8
    actor.drop_count()  # its future is dropped: the names its reply brings still count
    assert actor.total == 19  # read after that reply
    assert actor.count().get() == 100
    parl.close_actor(actor)


def test_futures():
    actor = AsyncSampler()
    future = actor.add(1, 2)
    assert isinstance(future, parl.Future)
    assert future.get() == 3
    assert future.get() == 3  # a second get returns the same result
    futures = [actor.step() for _ in range(200)]
    assert [f.get() for f in futures] == list(range(1, 201))


def test_future_exception_and_actor_stays_usable():
    actor = AsyncSampler()
    failing = actor.fail()
    with pytest.raises(ValueError, match="async failure"):
        failing.get()
    with pytest.raises(ValueError):
        failing.get()
    assert actor.add(2, 3).get() == 5


def test_future_timeout_empty_and_get_nowait(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    actor = AsyncSampler()
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


def test_dropped_futures_do_not_block_later_calls():
    actor = AsyncSampler()
    for _ in range(100):
        actor.step()  # futures dropped at once
    assert actor.step().get() == 101


def test_two_actors_run_at_the_same_time(tmp_path):
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


def test_many_threads_share_one_actor(sampler):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: sampler.add(i, i), range(400)))
    assert results == [2 * i for i in range(400)]


def test_pipelined_large_requests_do_not_deadlock():
    """More queued requests and replies than the socket holds: the sender drains replies."""
    actor = AsyncSampler()
    payload = np.ones(20_000, np.float64)  # 160 KB inline each way... under the threshold? no
    small = np.ones(8_000, np.float64)  # 64 KB: inline
    futures = [actor.add(small, i) for i in range(300)]
    futures += [actor.add(payload, 1) for _ in range(20)]
    for i, f in enumerate(futures[:300]):
        assert f.get(timeout=60)[0] == 1 + i
    for f in futures[300:]:
        assert f.get(timeout=60)[0] == 2


def test_class_defined_inside_a_function():
    @parl.remote_class
    class Local:
        def __init__(self, base):
            self.base = base

        def plus(self, x):
            return self.base + x

    actor = Local(10)
    assert actor.plus(5) == 15


def test_actor_proxy_cannot_be_pickled(sampler):
    import pickle

    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(sampler)
