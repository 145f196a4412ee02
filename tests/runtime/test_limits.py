"""Limits of a caller, an actor and one message: running out of file descriptors
(``ulimit -n``) fails with a clear error and recovers; a caller past select's FD_SETSIZE still
works; a message may carry more descriptors than one ``sendmsg`` takes and more than 65,535
buffers; and the descriptors a caller holds stay flat as actors and their results come and go.

Every actor is closed before the test ends (the autouse leak check in conftest.py)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np

import parl
import parl.shm
from parl.shm.segment import segment_table
from tests.runtime.actors import Sampler
from tests.runtime.conftest import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- helpers the workers import by name --------------------------------------------------------


def many_shared_arrays(count, nbytes):
    return [np.ones(nbytes, np.uint8) for _ in range(count)]


def many_small_arrays(count):
    return [np.zeros(1) for _ in range(count)]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- running out of descriptors ----------------------------------------------------------------


_FD_SCRIPT = r"""
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
import numpy as np
import parl

@parl.remote_class
class M:
    def big(self, i):
        return np.full((5 << 20) // 8, i, np.float64)  # 5 MiB: a segment (a descriptor) each

m = M()
held = []
try:
    for i in range(400):
        held.append(m.big(i))
    print("NO ERROR")
except Exception as e:
    print("ERROR", type(e).__name__, e)
del held
try:
    print("AFTER", m.big(2)[0])
except Exception as e:
    print("AFTER-ERROR", type(e).__name__, e)
parl.close_actor(m)
"""


def test_running_out_of_descriptors_fails_the_call_clearly(tmp_path):
    """Expected (link.py ShmLink.attach has the message for exactly this): holding more received
    segments than ``ulimit -n`` allows fails that call with a clear "ran out of file
    descriptors ... ulimit" error, and the actor works again once arrays are dropped.
    Observed: ``ActorClosedError: ... interrupted in the middle of receiving a message`` and
    the actor is gone. When the kernel truncates SCM_RIGHTS (MSG_CTRUNC), FrameSocket._recv_rest
    (parl/wire/framing.py:166) pops descriptors that never arrived (IndexError on the deque),
    marks the stream broken, and Connection._read_one turns that into a closed actor; the
    clear message in ShmLink.attach is never reached."""
    script = tmp_path / "fd.py"
    script.write_text(_FD_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=REPO,
    ).stdout
    error = next(line for line in out.splitlines() if line.startswith(("ERROR", "NO ERROR")))
    assert "descriptor" in error or "too many open files" in error, out
    assert "AFTER 2.0" in out, out


_CREATE_AT_LIMIT = r"""
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
import parl

@parl.remote_class
class M:
    def ping(self):
        return 1

actors = []
try:
    for i in range(100):
        actors.append(M())
        actors[-1].ping()
    print("NO ERROR")
except Exception as e:
    print("ERROR", type(e).__module__, type(e).__name__, e)
for a in actors:
    parl.close_actor(a)
"""


def test_creating_an_actor_at_the_descriptor_limit_raises_a_clear_error(tmp_path):
    """Expected (as for receiving arrays, parl/shm/segment.py limit_error): a ParlError that
    names the descriptor limit and what to do. Observed: ``OSError: [Errno 24] Too many open
    files`` from ``os.pipe()`` in LocalCarrier._start (parl/local/carrier.py, the socketpair and
    the two pipes are created before the try that closes them)."""
    script = tmp_path / "create.py"
    script.write_text(_CREATE_AT_LIMIT)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=100, cwd=REPO
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith(("ERROR", "NO ERROR")))
    assert "ParlError" in line and "ulimit" in line, line


_DROP_AT_LIMIT = r"""
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
import numpy as np
import parl

@parl.remote_class
class M:
    def big(self, i):
        return np.full((5 << 20) // 8, i, np.float64)
    def ping(self):
        return 1

m = M()
held = []
try:
    for i in range(300):
        held.append(m.big(i))
except Exception as e:
    print("LIMIT", type(e).__name__)
held.clear()
m.ping()  # the releases of the dropped arrays ride the next message to the actor
try:
    open("/etc/hostname").close()
    print("OPEN OK")
except OSError as e:
    print("OPEN FAILED", e)
parl.close_actor(m)
"""


def test_descriptors_of_dropped_arrays_come_back_with_the_next_call(tmp_path):
    """Holding more received arrays than ``ulimit -n`` allows fails with a clear error; once
    they are dropped, the next call to the actor that sent them gives their descriptors back
    (the releases ride that message: documented in docs/guides/shared-memory.md)."""
    script = tmp_path / "drop.py"
    script.write_text(_DROP_AT_LIMIT)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=100, cwd=REPO
    ).stdout
    assert "LIMIT" in out, out
    assert "OPEN OK" in out, out


def test_a_caller_with_more_than_1024_descriptors_creates_and_calls_actors():
    """No select.select (limited to descriptors below FD_SETSIZE, 1024) on the call path:
    every shared segment holds two descriptors (its fd and mmap's dup) and
    carrier._raise_fd_limit raises the limit for exactly that; with select, ~520 live shared
    arrays made creating an actor raise 'ValueError: filedescriptor out of range in select()'.
    Segments hold many blocks each, so the descriptors are opened by hand."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(max(0, 1100 - open_fds()))]
    try:
        assert open_fds() > 1024
        actor = Sampler()
        try:
            assert actor.add(1, 2) == 3
            assert float(actor.rollout()[0]) == 1.0
        finally:
            parl.close_actor(actor)
    finally:
        for fd in fds:
            os.close(fd)


# -- limits of one message ---------------------------------------------------------------------


def test_a_call_may_carry_more_than_250_new_segments():
    """More descriptors than framing's MAX_FDS in one call (260 new segments) still arrive:
    refusing the frame raised a raw ValueError after ShmLink.place had already marked the
    segments as known to the peer."""
    actor = Sampler()
    try:
        arrays = [parl.shm.zeros(16, np.float32) for _ in range(260)]
        assert len(actor.echo(arrays)) == 260
    finally:
        parl.close_actor(actor)
        arrays = None
        gc.collect()
        segment_table().allocator.trim()  # 260 cached segments hold 520 descriptors


def test_an_actor_stays_usable_after_a_call_with_many_segments():
    """After a call with many segments (refused or not), passing one of them again works: had
    the link wrongly believed the worker holds them, it would send a reference without its
    descriptor and the worker would die with KeyError in protocol.decode (outside
    dispatch.serve's try)."""
    actor = Sampler()
    try:
        arrays = [parl.shm.zeros(16, np.float32) for _ in range(260)]
        try:
            actor.echo(arrays)
        except ValueError:
            pass
        assert actor.info(arrays[0])["sum"] == 0.0
    finally:
        parl.close_actor(actor)
        arrays = None
        gc.collect()
        segment_table().allocator.trim()


def test_an_actor_may_return_more_than_250_shared_arrays():
    """300 shared arrays come back and the actor lives on: a reply with too many descriptors
    for one send must not end the worker (the caller saw ActorDiedError for a legal return
    value)."""
    actor = Sampler()
    try:
        result = actor.apply(many_shared_arrays, 300, 1 << 17)
        assert len(result) == 300
        assert actor.add(1, 2) == 3
    finally:
        parl.close_actor(actor)


def test_a_call_may_carry_more_than_65535_buffers():
    """70,000 small arrays as arguments arrive: a buffer count packed as uint16 in
    protocol.py's HEADER raised struct.error at the caller (and, as a return value, killed the
    worker: the next test)."""
    actor = Sampler()
    try:
        arrays = many_small_arrays(70_000)
        assert actor.apply(len, arrays) == 70_000
    finally:
        parl.close_actor(actor)


def test_an_actor_may_return_more_than_65535_arrays():
    actor = Sampler()
    try:
        assert len(actor.apply(many_small_arrays, 70_000)) == 70_000
        assert actor.add(1, 2) == 3
    finally:
        parl.close_actor(actor)


# -- descriptors stay flat ---------------------------------------------------------------------


def test_a_result_view_that_outlives_its_actor_gives_its_segment_back():
    """A result view that outlives its actor gives its segment (two descriptors and its
    memory) back once it goes: ShmLink.close -> SegmentTable.forget cannot unmap a segment while
    a view exists, so something must retry when the view goes."""
    warm = Sampler()
    parl.close_actor(warm)
    gc.collect()
    table = segment_table()
    known = set(table._by_id)
    before = open_fds()
    try:
        for _ in range(5):
            actor = Sampler(1 << 18)  # rollout returns 1 MiB through shared memory
            view = actor.rollout()
            parl.close_actor(actor)
            del actor, view  # the view outlived the actor, now it is gone too
            gc.collect()
        assert wait_until(lambda: open_fds() <= before, timeout=1), (before, open_fds())
    finally:  # unmap what a leak left behind, so that later tests start clean
        for segment_id in set(table._by_id) - known:
            segment = table._by_id[segment_id]
            if not segment.owned:
                table._remove(segment)


def test_create_and_drop_actors_in_a_loop_keeps_descriptors_flat():
    warm = Sampler()
    parl.close_actor(warm)
    gc.collect()
    before = open_fds()
    for i in range(8):
        actor = Sampler(1 << 16)
        view = actor.rollout()
        assert view[0] == 1
        del view  # dropped before the actor
        if i % 2:
            parl.close_actor(actor)
        del actor
        gc.collect()
    assert wait_until(lambda: open_fds() <= before, timeout=5), (before, open_fds())
