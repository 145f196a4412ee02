"""The allocator, the link's leases, and the data path through real actors: views of shared
handles stay handles, and the memory of closed and dead actors comes back."""

from __future__ import annotations

import dataclasses
import gc
import os
import pickle
import signal
import subprocess
import sys

import numpy as np
import psutil
import pytest
import torch

import parl
import parl.shm
from parl.shm.allocator import MIN_SEGMENT
from parl.shm.handles import HANDLES
from parl.shm.link import ShmLink
from parl.shm.segment import segment_table
from parl.wire import protocol
from parl.wire.framing import Frame
from tests.runtime.actors import AsyncSampler, Roller, Sampler, Sink, SlowEnd
from tests.runtime.conftest import lasting_new_shm_entries, wait_until

# -- allocator ----------------------------------------------------------------------------------


def test_segments_are_memfds_not_dev_shm_files():
    before = set(os.listdir("/dev/shm"))
    block = segment_table().allocator.block(1 << 20)
    block[:] = 1
    assert not lasting_new_shm_entries(before)
    found = segment_table().find(block.ctypes.data, block.nbytes)
    assert found is not None and found.offset % 4096 == 0
    segment = found.segment
    assert os.readlink(f"/proc/self/fd/{segment.fd}").startswith("/memfd:parl-")


def test_dropped_block_is_reused():
    allocator = segment_table().allocator
    block = allocator.block(3 * 2**20)
    address = block.ctypes.data
    del block
    again = allocator.block(3 * 2**20 + 5)  # same power-of-two size class
    assert again.ctypes.data == address
    bigger = allocator.block(5 * 2**20)
    assert bigger.ctypes.data != address


def test_block_lives_while_any_view_lives():
    allocator = segment_table().allocator
    block = allocator.block(MIN_SEGMENT)
    view = block[10:20].view(np.int16)
    address = block.ctypes.data
    del block
    other = allocator.block(MIN_SEGMENT)
    assert other.ctypes.data != address  # still in use through `view`
    view[:] = 7
    other_address = other.ctypes.data
    del view, other
    gc.collect()
    first, second = allocator.block(MIN_SEGMENT), allocator.block(MIN_SEGMENT)
    assert {first.ctypes.data, second.ctypes.data} == {address, other_address}


def test_small_blocks_share_a_segment_large_ones_have_their_own():
    from parl.shm.allocator import SLAB_SIZE
    from parl.shm.segment import SegmentTable

    table = SegmentTable(cache_bytes=1 << 30)
    small = [table.allocator.block(200_000) for _ in range(100)]
    assert table.stats()["owned"] == 1  # 100 blocks of 256 KiB in one 64 MiB slab
    addresses = sorted(b.ctypes.data for b in small)
    assert all(b - a >= 200_000 for a, b in zip(addresses, addresses[1:], strict=False))
    big = table.allocator.block(SLAB_SIZE)
    assert table.stats()["owned"] == 2
    assert table.stats()["owned_bytes"] == 2 * SLAB_SIZE
    eight = table.allocator.block(8 << 20)  # above the slab limit: a segment of its own size
    assert table.stats()["owned_bytes"] == 2 * SLAB_SIZE + (8 << 20)
    del eight
    del small, big
    gc.collect()
    assert table.stats()["blocks"] == 0 and table.allocator.free_count() == 3
    table.allocator.trim()
    assert table.stats()["owned"] == 0


def test_cache_limit_keeps_the_most_recent_free_segment():
    from parl.shm.segment import SegmentTable

    table = SegmentTable(cache_bytes=2 * 2**20)
    blocks = [table.allocator.block(2**23) for _ in range(3)]  # 8 MiB: segments of their own
    assert table.stats()["owned"] == 3
    last = blocks[-1].ctypes.data
    while blocks:
        blocks.pop(0)  # freed in order: the last one freed is the most recent
    gc.collect()
    assert table.allocator.free_count() == 1  # over the budget, but the last one is kept
    assert table.allocator.block(2**23).ctypes.data == last  # and reused
    table.allocator.trim()


def test_explicit_shared_arrays():
    a = parl.shm.zeros((3, 4), np.float64)
    assert a.shape == (3, 4) and a.dtype == np.float64 and not a.any()
    assert parl.shm.is_shared(a) and parl.shm.is_shared(a[1:])
    assert not parl.shm.is_shared(np.zeros(3))
    b = parl.shm.copy([[1, 2], [3, 4]])
    np.testing.assert_array_equal(b, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(parl.shm.full(3, 2.5), [2.5, 2.5, 2.5])
    with pytest.raises(TypeError, match="plain data"):
        parl.shm.empty(3, object)
    with pytest.raises(ValueError, match="non-negative"):
        parl.shm.empty((-1, 2))


# -- link and leases, in one process ----------------------------------------------------------


def _deliver(message, receiver_link):
    meta, bodies, fds = message
    dup = [os.dup(fd) for fd in fds]  # what SCM_RIGHTS would have given the peer
    return protocol.decode(
        Frame(bytearray(meta), [bytearray(b) for b in bodies], dup), receiver_link
    )


def test_large_buffers_are_shared_small_ones_inline():
    table = segment_table()
    sender, receiver = ShmLink(table, threshold=1 << 16), ShmLink(table, threshold=1 << 16)
    big, small = np.arange(1 << 16, dtype=np.float32), np.arange(10, dtype=np.float32)
    incoming = _deliver(protocol.encode(protocol.CALL, 7, (big, small), sender), receiver)
    assert incoming.call_id == 7 and incoming.kind == protocol.CALL
    out_big, out_small = incoming.payload()
    np.testing.assert_array_equal(out_big, big)
    np.testing.assert_array_equal(out_small, small)
    assert parl.shm.memory_kind(out_big) == "value" and parl.shm.memory_kind(out_small) is None
    assert not parl.shm.is_shared(out_big)
    assert sender.lease_count() == 1
    del out_big, incoming
    gc.collect()
    releases = receiver.take_releases()
    assert len(releases) == 1
    sender.release(releases)
    assert sender.lease_count() == 0


def test_shared_arrays_cross_by_handle_at_any_size():
    table = segment_table()
    sender, receiver = ShmLink(table), ShmLink(table)
    handle = parl.shm.zeros(4)
    out = _deliver(protocol.encode(protocol.RESULT, 1, handle, sender), receiver).payload()
    out[:] = 3  # writes land in the caller's array: it is the same memory
    np.testing.assert_array_equal(handle, [3, 3, 3, 3])


def test_inline_link_refuses_descriptors():
    link = protocol.InlineLink()
    meta, bodies, fds = protocol.encode(protocol.CALL, 1, np.ones(1 << 20), link)
    assert fds == [] and len(bodies) == 1
    out = protocol.decode(Frame(bytearray(meta), [bytearray(b) for b in bodies], []), link)
    np.testing.assert_array_equal(out.payload(), np.ones(1 << 20))


def test_pickle_buffer_raw_of_fortran_array_is_shared():
    table = segment_table()
    sender, receiver = ShmLink(table, threshold=0), ShmLink(table, threshold=0)
    f = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    out = _deliver(protocol.encode(protocol.RESULT, 1, f, sender), receiver).payload()
    np.testing.assert_array_equal(out, f)
    assert pickle.loads(pickle.dumps(out)).shape == (3, 4)


# -- through real actors ----------------------------------------------------------------------


@pytest.fixture
def sampler():
    actor = Sampler(1 << 20)
    yield actor
    parl.close_actor(actor)


def test_returned_large_array_is_a_shared_view(sampler):
    out = sampler.rollout()
    assert out.shape == (1 << 20,) and out.dtype == np.float32
    assert parl.shm.memory_kind(out) == "value" and not out.flags.owndata
    assert not parl.shm.is_shared(out)
    np.testing.assert_array_equal(out[:3], [1, 1, 1])
    out[0] = 5  # writable, and a private copy of the actor's state
    assert sampler.rollout()[0] == 2


def test_large_argument_arrives_as_a_view(sampler):
    info = sampler.info(np.ones((1024, 512), np.float32))
    assert info == {
        "shared": False,
        "kind": "value",
        "owndata": False,
        "writeable": True,
        "sum": 524288.0,
        "dtype": "float32",
        "shape": (1024, 512),
    }
    small = sampler.info(np.ones(4, np.int64))
    assert small["kind"] is None and small["sum"] == 4


def test_return_segments_are_reused(sampler):
    table = segment_table()
    out = sampler.rollout()
    for _ in range(20):
        out = sampler.rollout()
    assert float(out[0]) == 21
    del out
    sampler.add(0, 0)  # carries the release of the last view
    peer_segments = table.stats()["segments"] - table.stats()["owned"]
    assert peer_segments <= 3


def test_argument_blocks_are_reused(sampler):
    table = segment_table()
    a = np.ones(1 << 20, np.float32)
    for _ in range(10):
        assert sampler.info(a)["sum"] == 1 << 20
    assert table.stats()["owned"] - table.stats()["free"] <= 2


def test_explicit_handle_is_written_in_place(sampler):
    buf = parl.shm.zeros((256, 1024), np.float32)
    sampler.fill(buf, 4.0)
    assert float(buf.sum()) == 4.0 * buf.size
    sampler.keep(buf[10:20])
    assert sampler.kept_is_shared()
    back = sampler.get_kept()  # the same memory comes back, no copy
    assert back.ctypes.data == buf[10:20].ctypes.data


def test_view_survives_the_actor(sampler):
    out = sampler.rollout()
    parl.close_actor(sampler)
    assert float(out.sum()) == out.size


def test_view_from_one_actor_goes_to_another_without_copy(sampler):
    other = Sampler(4)
    try:
        out = sampler.rollout()
        info = other.info(out)
        assert info["kind"] == "value" and info["sum"] == out.size
    finally:
        parl.close_actor(other)


def test_torch_tensors_cross_shared(sampler):
    t = torch.ones(512, 512)
    info = sampler.tensor_info(t)
    assert info == {
        "type": "Tensor",
        "dtype": "torch.float32",
        "sum": 262144.0,
        "requires_grad": False,
    }
    back = sampler.echo(torch.arange(100_000, dtype=torch.int64))
    assert isinstance(back, torch.Tensor) and int(back[-1]) == 99_999
    p = sampler.echo(torch.nn.Parameter(torch.zeros(3)))
    assert isinstance(p, torch.nn.Parameter)


def test_replies_of_dropped_futures_release_their_memory():
    from tests.runtime.actors import AsyncSampler

    table = segment_table()
    actor = AsyncSampler()
    counts = []
    for _ in range(3):
        for _ in range(30):
            actor.big(1 << 18)  # 1 MiB results nobody collects, all queued at once
        last = actor.big(1 << 18).get()
        assert float(last.sum()) == 1 << 18
        del last
        counts.append(table.stats()["segments"])
    # the first round needs a segment per reply in flight; later rounds reuse them, because
    # the dropped replies' leases went back to the actor
    assert counts[2] == counts[1] == counts[0]


def test_leases_come_back_when_views_are_dropped(sampler):
    conn = sampler._parl_conn
    results = [sampler.rollout() for _ in range(5)]
    del results
    sampler.add(1, 1)  # our releases ride this request; the actor frees the blocks
    assert wait_until(lambda: sampler.add(1, 1) == 2)
    # the actor holds no lease for us any more: a new rollout reuses a freed segment
    before = segment_table().stats()["segments"]
    out = sampler.rollout()
    assert segment_table().stats()["segments"] == before
    assert conn.label.startswith("Sampler pid=")
    del out


def test_a_block_dropped_inside_the_allocators_lock_does_not_deadlock():
    """A block's finalizer may run while its own thread holds the allocator's lock (a garbage
    collection inside the allocator frees a block in a cycle): it must queue, not wait."""
    import threading

    from parl.shm.segment import SegmentTable

    table = SegmentTable()
    holder = {"block": table.allocator.block(1 << 20)}
    address = holder["block"].ctypes.data

    def drop_under_lock():
        with table.allocator._lock:
            del holder["block"]  # the finalizer runs right here

    thread = threading.Thread(target=drop_under_lock, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "the finalizer waited for a lock its own thread holds"
    assert table.allocator.block(1 << 20).ctypes.data == address  # filed, then reused
    table.close_all()


# -- views of shared handles -------------------------------------------------------------------


def test_strided_view_of_a_shared_handle_stays_shared():
    """Expected (parl/shm/link.py: a handle is "an array made with parl.shm (or a view of
    one)"; docs/guides/shared-memory.md: passed by handle whatever its size): an actor filling ``buf[:, 0]`` writes
    into ``buf``, as it does for ``buf[0]``. Observed: a non-contiguous view is copied into a
    value (_reduce_array stages a copy before ShmLink.place can see it is a handle), so the
    actor's writes are lost without a word; e.g. a rollout buffer with a column per actor."""
    buf = parl.shm.zeros((1024, 4), np.float32)
    sink = Sink()
    try:
        sink.fill(buf[3], 1.0)  # a contiguous row: shared
        assert buf[3].min() == 1.0
        sink.fill(buf[:, 0], 2.0)  # a column: copied
        assert buf[:, 0].min() == 2.0, f"column after the actor filled it: {buf[:4, 0]}"
    finally:
        parl.close_actor(sink)


def test_strided_torch_view_of_a_shared_handle_stays_shared():
    import torch

    buf = parl.shm.zeros((512, 3), np.float32)
    column = torch.from_numpy(buf)[:, 1]  # a strided tensor over the handle
    sink = Sink()
    try:
        sink.fill(column, 5.0)
        assert buf[:, 1].min() == buf[:, 1].max() == 5.0
        assert buf[:, 0].max() == 0.0 and buf[:, 2].max() == 0.0  # its neighbours untouched
        values = np.zeros((512, 3), np.float32)  # not a handle: the column is a value
        sink.fill(values[:, 1], 5.0)
        assert values.max() == 0.0
    finally:
        parl.close_actor(sink)


def test_reversed_view_of_a_handle_stays_shared():
    """Expected (docs/guides/shared-memory.md: a view of a handle is a handle too; an actor writing into it writes
    into ``buf``): after ``fill(buf[::-1], 3.0)`` buf holds 3.0. Observed: buf stays 0.0; the
    reversed view was silently copied into a value, the actor's writes are lost.
    _strided_handle (parl/wire/serialization.py, ``any(stride < 0 ...)``) gives up on negative
    strides instead of computing the lowest address of the extent."""
    buf = parl.shm.zeros((64, 8), np.float32)
    actor = Sink()
    try:
        actor.fill(buf[::-1], 3.0)
        actor.fill(buf[::-2, 1], 4.0)
    finally:
        parl.close_actor(actor)
    assert buf[::2, 0].min() == 3.0, buf[:2]
    assert buf[1::2, 1].min() == 4.0, buf[:2]


def test_bfloat16_strided_view_of_a_handle_stays_shared():
    """Expected (docs/guides/shared-memory.md: ``torch.from_numpy(buf)[:, 1]`` is a handle too): a bfloat16 view of
    an int16 handle, column 1, filled by the actor, is seen in buf. Observed: buf unchanged.
    _reduce_tensor (parl/wire/serialization.py) calls ``tensor.contiguous()`` (a copy) for
    the dtypes numpy lacks before viewing them as integers."""
    torch = pytest.importorskip("torch")
    buf = parl.shm.zeros((256, 8), np.int16)
    column = torch.from_numpy(buf).view(torch.bfloat16)[:, 1]
    actor = Sink()
    try:
        actor.fill(column, 1.0)
    finally:
        parl.close_actor(actor)
    assert (buf[:, 1] != 0).all(), buf[:2]


# -- shared handles where memory cannot be shared ---------------------------------------------
# An actor on a cluster, on SSH hosts (test_ssh_launch.py) or on Ray cannot map this process's
# memory: a handle sent there would arrive as a copy and the actor's writes would be lost (the
# the guide's rollout buffer would sum to 0.0). It is refused before anything is sent, with
# what to do instead, and the actor stays usable; local workers share it.


@dataclasses.dataclass
class Batch:
    obs: np.ndarray
    steps: int = 0


HANDLE_INSIDE = [  # a value holding a parl.shm array, and where the refusal says it is
    (lambda buf: {"obs": buf}, "the dict['obs'] (a numpy.ndarray)"),
    (lambda buf: {"runs": [np.ones(3), buf[3]]}, "the dict['runs'][1] (a numpy.ndarray)"),
    (lambda buf: {"column": buf[:, 1]}, "the dict['column'] (a numpy.ndarray)"),
    (lambda buf: {"reversed": buf[::-1]}, "the dict['reversed'] (a numpy.ndarray)"),
    (lambda buf: {"t": torch.from_numpy(buf)[:, 1]}, "the dict['t'] (a torch.Tensor)"),
    (lambda buf: {"batch": Batch(buf)}, "the dict['batch'].obs (a numpy.ndarray)"),
]


def test_shared_handles_are_shared_with_local_workers_and_refused_elsewhere(carrier):
    """The guide's rollout buffer; a handle inside a value (a dict, a list, a strided or reversed
    view, a torch view, a dataclass); a handle an actor returns; a handle to a wait=False
    actor (refused at the call, not the get); a handle as a constructor argument or an
    attribute. Each refusal names where the handle is, and the actor stays usable."""
    roller = Roller()

    # the readme's rollout buffer
    buf = parl.shm.zeros(4000, np.float64)
    if carrier == "local":
        assert roller.rollout_into(buf) == 4000
        assert float(buf.sum()) == 7_998_000.0
    else:
        with pytest.raises(parl.SharedHandleError) as info:
            roller.rollout_into(buf)
        message = str(info.value)
        assert message.startswith(
            "argument 'buf' of Roller.rollout_into() is or holds a parl.shm array: parl.shm "
            "arrays are shared only between a process and its local worker processes"
        ), message
        assert "send a copy (np.array(a))" in message and "return them from the method" in message
        assert isinstance(info.value, TypeError)  # PARL's RemoteSerializeError catches it
        assert not buf.any()
        # read-only use, as the message says: a copy of one's own; the actor is still usable
        assert roller.total({"obs": np.array(buf) + 1}) == 4000.0
    del buf

    # a handle inside a value
    for make, where in HANDLE_INSIDE:
        buf = parl.shm.full((100, 4), 1.0, np.float64)
        data = make(buf)
        if carrier == "local":
            roller.fill_all(data, 9.0)
            assert buf.max() == 9.0, where  # the actor wrote into buf
        else:
            with pytest.raises(parl.SharedHandleError) as info:
                roller.fill_all(data, 9.0)
            assert (
                f"argument 'data' of Roller.fill_all() is or holds a parl.shm array at {where}:"
                in str(info.value)
            )
            assert buf.min() == buf.max() == 1.0
            assert roller.total({"obs": np.ones(3)}) == 3.0
        del data, buf

    # a handle an actor returns
    if carrier == "local":
        made = roller.make_shared(5)
        assert parl.shm.is_shared(made)
        made[:] = 1.0  # the actor's own array
        assert float(roller.made.sum()) == 5.0
        del made
    else:
        with pytest.raises(
            parl.SharedHandleError,
            match=r"^the return value of make_shared\(\) is or holds a parl.shm array",
        ):
            roller.make_shared(5)
        with pytest.raises(
            parl.SharedHandleError, match=r"^attribute 'made' is or holds a parl.shm"
        ):
            roller.made  # noqa: B018 - read over the wire
        with pytest.raises(
            parl.SharedHandleError, match=r"^the return value of make_nested\(\) is or holds a parl"
        ):
            roller.make_nested(3)
        assert roller.total({"obs": np.ones(2)}) == 2.0  # still usable

    # a handle to a wait=False actor is refused at the call, not the get
    actor = AsyncSampler()
    buf = parl.shm.full(3, 2.0, np.float64)
    if carrier == "local":
        np.testing.assert_array_equal(actor.add(buf, 1.0).get(), [3.0, 3.0, 3.0])
    else:
        with pytest.raises(
            parl.SharedHandleError, match=r"^argument 'a' of AsyncSampler.add\(\) is"
        ):
            actor.add(buf, 1.0)
        np.testing.assert_array_equal(actor.add(np.array(buf), 1.0).get(), [3.0, 3.0, 3.0])
    del buf

    # a handle as a constructor argument or attribute
    buf = parl.shm.zeros(8, np.float32)
    if carrier == "local":
        own = Roller(buf)
        own.fill_own(2.0)
        own.buf = buf[:4]
        own.fill_own(3.0)
        np.testing.assert_array_equal(buf, [3, 3, 3, 3, 2, 2, 2, 2])
        return
    with pytest.raises(
        parl.SharedHandleError,
        match=r"^argument 'buf' of Roller.__init__\(\) is or holds a parl.shm",
    ):
        Roller(buf)
    own = Roller(np.array(buf))  # a copy of one's own
    with pytest.raises(
        parl.SharedHandleError,
        match=r"^the value for attribute 'buf' of Roller is or holds a parl.shm array: ",
    ):
        own.buf = buf
    np.testing.assert_array_equal(own.buf, np.zeros(8))  # it kept its copy


def test_the_tcp_carriers_link_refuses_handles_and_their_views():
    link = protocol.InlineLink(HANDLES)
    buf = parl.shm.zeros((64, 4), np.float32)
    for value in (buf, buf[3], buf[:, 1], buf[::-1], torch.from_numpy(buf)[:, 2], [1, {"b": buf}]):
        with pytest.raises(parl.SharedHandleError, match="parl.shm arrays are shared only"):
            protocol.encode(protocol.CALL, 1, value, link)
    meta, bodies, fds = protocol.encode(protocol.CALL, 2, np.array(buf[:, 1]), link)
    out = protocol.decode(Frame(bytearray(meta), [bytearray(b) for b in bodies], []), link)
    np.testing.assert_array_equal(out.payload(), np.zeros(64, np.float32))


def test_a_process_that_never_made_a_handle_skips_the_search():
    """Carriers without shared memory look for handles only where one ever lived."""
    code = (
        "import numpy as np, parl.shm.handles as h; from parl.shm.link import ShmLink; "
        "from parl.shm.segment import segment_table; from parl.wire import protocol; "
        "protocol.encode(1, 1, np.ones(1 << 20), ShmLink(segment_table(), 0)); "
        "assert not h.handles_here(); buf = parl.shm.zeros(3); "
        "assert h.handles_here() and h.holds_handle([buf]) and not h.holds_handle([np.ones(3)])"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import parl.shm; " + code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


# -- memory of closed and dead actors ----------------------------------------------------------


def _ended(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _set_next_pid(pid):
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid - 1))


@pytest.mark.skipif(
    not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK), reason="needs root to force pid reuse"
)
def test_segment_ids_stay_unique_when_a_dead_actors_pid_is_reused():
    """Expected: a value from a new actor holds what that actor sent (2.0). Observed: it holds
    the data of a dead actor whose proxy is still held (1.0), when the new worker got the dead
    one's pid (pid_max is 32768 here, so pids wrap in long runs; forced here through
    ns_last_pid). Segment ids are ``(pid << 32) | counter`` (parl/shm/segment.py,
    SegmentTable.new_segment), and SegmentTable.attach closes the new descriptor of an id it
    already knows. The dead actor's link still holds its segments, as nobody called it again."""
    n = 1 << 18
    dead = Sink()
    dead_pid = dead.pid()
    first = dead.make(n, 1.0)
    os.kill(dead_pid, signal.SIGKILL)
    assert wait_until(lambda: not psutil.pid_exists(dead_pid) or _ended(dead_pid), timeout=10)
    del first
    fresh = None
    for _ in range(20):
        _set_next_pid(dead_pid)
        fresh = Sink()
        if fresh.pid() == dead_pid:
            break
        parl.close_actor(fresh)
    assert fresh.pid() == dead_pid, "could not force pid reuse"
    try:
        got = fresh.make(n, 2.0)
        assert (got.min(), got.max()) == (2.0, 2.0)
    finally:
        parl.close_actor(fresh)
        parl.close_actor(dead)


@pytest.mark.slow  # a stress run
def test_memory_lent_to_closed_actors_returns_while_idle():
    """Expected (docs/guides/shared-memory.md: memory lent to a closed actor stays lent until its process has
    ended): once the workers have ended, the caller's blocks are free (``blocks`` 0): the
    32 MiB blocks (each a segment of its own) lent to 4 closed actors go back. Observed: all 4
    blocks stay held for as long as the caller makes no further call or close:
    release_parked (parl/shm/link.py) only runs from ShmLink.place and ShmLink.close, nothing
    polls the parked leases (not even SegmentTable.stats)."""
    actors = [SlowEnd() for _ in range(4)]
    pids = [a.pid() for a in actors]
    for a in actors:
        a.keep(np.ones((32 << 20) // 8))  # above MAX_SLOT: a segment of its own
    for a in actors:
        parl.close_actor(a)
    del actors
    gc.collect()
    assert wait_until(lambda: all(_ended(p) for p in pids), timeout=15)
    assert wait_until(lambda: segment_table().stats()["blocks"] == 0, timeout=3), (
        segment_table().stats()
    )
