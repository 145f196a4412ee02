"""Values stay values: an array received (a return value, or an argument inside the actor) never
changes unless the process holding it writes to it, and such writes never reach another process,
for every size and every order of create / call / forward / close / drop. ``parl.shm`` arrays
are the one exception: shared handles, documented as such."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import parl
import parl.shm
from tests.runtime.actors import Keeper, Saver, Sink
from tests.runtime.conftest import wait_until

pytestmark = pytest.mark.usefixtures("carrier")  # local workers, a TCP cluster and Ray

SMALL, LARGE, HUGE = 1000, 40_000, 700_000  # 8 KB inline; 320 KB in a slab; 5.6 MB alone


@pytest.fixture
def keepers():
    actors = [Keeper(), Keeper()]
    yield actors
    for actor in actors:
        parl.close_actor(actor)


# -- received values through closes, forwards and edits ----------------------------------------


@pytest.mark.not_on_ray("the actor writes into an array it received: read-only on Ray")
def test_result_of_a_closed_actor_is_not_reused():
    for n in (SMALL, 1 << 18):  # inline, and in shared memory
        obs = np.arange(n, dtype=np.float64)
        with Keeper() as k:
            out = k.normalize(obs)
        with Keeper() as k2:
            k2.normalize(np.ones(n))
        np.testing.assert_allclose(out, obs - obs.mean())
        np.testing.assert_array_equal(obs, np.arange(n))  # the caller's argument is untouched


@pytest.mark.not_on_ray("the actor writes into an array it received: read-only on Ray")
def test_a_received_value_changes_only_where_it_is_written(keepers):
    # a snapshot does not follow the actor, inline, in a slab and in a segment of its own
    ps = keepers[0]
    for n in (SMALL, LARGE, 1 << 20):
        key = f"w{n}"
        ps.put(key, np.zeros(n))
        snap = ps.get(key)
        ps.add(key, -1.0)
        assert snap.min() == snap.max() == 0.0, n
        assert ps.digest()[key] == (-1.0, -1.0)
        again, third = ps.get(key), ps.get(key)
        again += 5  # two values received from the same memory are still two values
        assert third.min() == third.max() == -1.0, n
        assert ps.digest()[key] == (-1.0, -1.0)

    # an actor editing its argument changes nobody else
    a, b = keepers
    x = np.full(LARGE, 3.0)
    a.put("x", x)
    b.put("x", a.get("x"))  # forwarded: the same memory, no copy
    a.add("x", 1.0)
    assert x.min() == x.max() == 3.0
    assert b.digest()["x"] == (3.0, 3.0)
    assert a.digest()["x"] == (4.0, 4.0)

    # a received tensor is a value
    t = torch.ones(LARGE, dtype=torch.float64)
    a.put("t", t)
    back = a.get("t")
    back += 1  # a private copy-on-write view: the actor's tensor is unchanged
    assert a.digest()["t"] == (1.0, 1.0)
    assert float(back.min()) == 2.0 and float(t.max()) == 1.0


def test_views_forwarded_to_a_closed_actor_survive_and_are_not_overwritten(keepers):
    a, b = keepers
    a.make("s", LARGE, 7.0)
    view = a.get("s")
    kept = a.get("s")
    b.put("v", view)
    b.put("k", kept)
    parl.close_actor(b)
    del view
    gc.collect()
    out = a.get("s")  # used to raise KeyError: segment not mapped here
    assert out.min() == out.max() == 7.0
    for value in (100.0, 200.0):
        a.make("s", LARGE, value)
        assert a.get("s").min() == value
    assert kept.min() == kept.max() == 7.0


@pytest.mark.local_only  # shared handles are copies off local workers (docs/guides/shared-memory.md)
def test_shm_arrays_are_shared_handles(keepers):
    a, b = keepers
    h = parl.shm.full(LARGE, 1.0, np.float64)
    a.put("h", h)
    b.put("h", a.get("h"))
    a.add("h", 1.0)  # every holder sees it: a handle is shared on purpose
    assert h.min() == 2.0 and b.digest()["h"] == (2.0, 2.0)
    h[:] = 5.0
    assert a.digest()["h"] == (5.0, 5.0) and b.digest()["h"] == (5.0, 5.0)
    assert parl.shm.is_shared(a.get("h"))


@pytest.mark.local_only  # local shared memory
def test_non_contiguous_and_subclass_arrays_go_through_shared_memory(keepers):
    a, _ = keepers
    big = np.arange(4 * LARGE, dtype=np.float64).reshape(2 * LARGE, 2)
    column = big[:, 1]  # strided: numpy would pickle it in band
    a.put("c", column)
    out = a.get("c")
    np.testing.assert_array_equal(out, column)
    assert parl.shm.memory_kind(out) == "value"
    m = np.ones((400, 100)).view(np.matrix)  # asmatrix warns (PendingDeprecationWarning)
    a.put("m", m)
    back = a.get("m")
    assert isinstance(back, np.matrix) and back.shape == (400, 100)
    assert parl.shm.memory_kind(back) == "value"


@pytest.mark.local_only  # local shared memory: the caller reuses a freed block
def test_closed_actor_finishing_never_sees_a_reused_block(tmp_path):
    """Expected (docs/guides/shared-memory.md: a value never changes unless its holder writes to it, for every order
    of closing; a worker ends like a Python program, __del__ runs): the closed actor's __del__
    sees the 1.0s it was given. Observed: it sees 2.0s, the data the caller sent to another
    actor afterwards. close_actor drops the caller's leases at once (link.close) while the
    worker still finishes, so the caller reuses the block under the worker's private view."""
    path = tmp_path / "seen.txt"
    n = 1 << 18  # 2 MiB: a slab block
    sink = Sink()
    saver = Saver(str(path))
    saver.keep(np.full(n, 1.0))
    parl.close_actor(saver)
    for _ in range(20):
        sink.take(np.full(n, 2.0))  # the caller reuses its freed block
    assert wait_until(lambda: path.exists() and path.read_text(), timeout=10)
    parl.close_actor(sink)
    assert path.read_text() == "1.0 1.0"


# -- the property: any order of operations -----------------------------------------------------

SIZES = st.sampled_from([SMALL, LARGE, HUGE])
ACTOR = st.integers(0, 2)
OPS = st.one_of(
    st.tuples(st.just("create"), ACTOR),
    st.tuples(st.just("close"), ACTOR),
    st.tuples(st.just("send"), ACTOR, SIZES),
    st.tuples(st.just("make"), ACTOR, SIZES),
    st.tuples(st.just("get"), ACTOR),
    st.tuples(st.just("forward"), ACTOR, st.integers(0, 20)),
    st.tuples(st.just("actor_add"), ACTOR),
    st.tuples(st.just("caller_add"), st.integers(0, 20)),
    st.tuples(st.just("drop"), st.integers(0, 20)),
    st.tuples(st.just("actor_drop"), ACTOR),
)


class _World:
    """The system under test and its model: every array holds one constant value."""

    def __init__(self) -> None:
        self.actors: list[Keeper | None] = [None, None, None]
        self.model: list[dict[str, float]] = [{}, {}, {}]
        self.held: list[tuple[np.ndarray, float]] = []
        self.counter = 0

    def value(self) -> float:
        self.counter += 1
        return float(self.counter)

    def key(self, i: int) -> str | None:
        return sorted(self.model[i])[-1] if self.model[i] else None

    def run(self, op: tuple) -> None:
        kind, *args = op
        if kind == "create":
            (i,) = args
            if self.actors[i] is None:
                self.actors[i], self.model[i] = Keeper(), {}
            return
        if kind in ("caller_add", "drop"):
            if self.held:
                h = args[0] % len(self.held)
                array, expected = self.held[h]
                if kind == "caller_add":
                    array += 0.5
                    self.held[h] = (array, expected + 0.5)
                else:
                    del self.held[h], array
                    gc.collect()
            return
        i = args[0]
        actor = self.actors[i]
        if actor is None:
            return
        key = self.key(i)
        if kind == "close":
            parl.close_actor(actor)
            self.actors[i], self.model[i] = None, {}
        elif kind == "send":
            value, new_key = self.value(), f"k{self.counter}"
            array = np.full(args[1], value)
            actor.put(new_key, array)
            array += 1000  # the caller's later writes never reach the actor
            self.model[i][new_key] = value
        elif kind == "make":
            value, new_key = self.value(), f"k{self.counter}"
            actor.make(new_key, args[1], value)
            self.model[i][new_key] = value
        elif kind == "forward" and self.held:
            array, expected = self.held[args[1] % len(self.held)]
            new_key = f"k{self.value()}"
            actor.put(new_key, array)
            self.model[i][new_key] = expected
        elif kind == "get" and key is not None:
            self.held.append((actor.get(key), self.model[i][key]))
        elif kind == "actor_add" and key is not None:
            actor.add(key, 0.25)
            self.model[i][key] += 0.25
        elif kind == "actor_drop" and key is not None:
            actor.drop(key)
            del self.model[i][key]

    def check(self) -> None:
        for array, expected in self.held:
            assert array.min() == array.max() == expected
        for actor, model in zip(self.actors, self.model, strict=True):
            if actor is not None:
                assert actor.digest() == {k: (v, v) for k, v in model.items()}

    def close(self) -> None:
        for actor in self.actors:
            if actor is not None:
                parl.close_actor(actor)


@pytest.mark.local_only  # local shared-memory reuse, hundreds of calls
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(OPS, min_size=1, max_size=30))
@pytest.mark.slow  # a stress run
def test_every_held_array_keeps_its_value(ops):
    world = _World()
    try:
        world.run(("create", 0))
        for op in ops:
            world.run(op)
            world.check()
    finally:
        world.close()
        world.held.clear()
        gc.collect()


# -- many held arrays ----------------------------------------------------------------------------


def _many(count, nbytes):
    return [np.full(nbytes, i % 251, np.uint8) for i in range(count)]


def _open_fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


@pytest.mark.local_only  # local descriptors
def test_a_thousand_held_200kb_arrays_share_a_few_descriptors():
    from tests.runtime.actors import Sampler

    actor = Sampler()
    try:
        before = _open_fds()
        held = actor.apply(_many, 1000, 200_000)
        assert len(held) == 1000
        assert all(int(a[0]) == i % 251 and int(a[-1]) == i % 251 for i, a in enumerate(held))
        assert all(parl.shm.memory_kind(a) == "value" for a in held[:10])
        assert _open_fds() - before < 40  # 1000 blocks of 256 KiB: four 64 MiB segments
    finally:
        parl.close_actor(actor)


@pytest.mark.local_only  # local shared memory
@pytest.mark.slow  # a stress run
def test_tens_of_thousands_of_held_arrays():
    from tests.runtime.actors import Sampler

    parl.connect(linger=0, shm_threshold=4096)
    try:
        actor = Sampler()
        try:
            held = actor.apply(_many, 25_000, 4096)  # far more than a default 1,024 descriptors
            assert len(held) == 25_000
            assert parl.shm.memory_kind(held[-1]) == "value"
            assert all(int(a[100]) == i % 251 for i, a in enumerate(held))
            assert actor.add(1, 2) == 3
            del held
            gc.collect()
            assert actor.add(1, 2) == 3  # carries 25,000 releases
        finally:
            parl.close_actor(actor)
    finally:
        parl.connect(linger=0)
