"""Reproductions found while reviewing issue 6 ("the runtime keeps its promises"), fixed since.

Each docstring says what the README promises and what happened before the fix."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import psutil
import pytest

import parl
import parl.shm
from tests.runtime.conftest import wait_until


@parl.remote_class
class _Saver:
    """Keeps its argument; its __del__ (run when the worker ends) records what it holds."""

    def __init__(self, path):
        self.path = path
        self.x = None

    def keep(self, x):
        self.x = x

    def __del__(self):
        time.sleep(0.5)  # a slow flush / checkpoint at the end
        with open(self.path, "w") as f:
            f.write(f"{self.x.min()} {self.x.max()}")


@parl.remote_class
class _Sink:
    def take(self, x):
        return float(x[0])

    def fill(self, x, value):
        x[...] = value

    def pid(self):
        return os.getpid()

    def make(self, n, value):
        return np.full(n, value)


def test_closed_actor_finishing_never_sees_a_reused_block(tmp_path):
    """Expected (README: a value never changes unless its holder writes to it, for every order
    of closing; a worker ends like a Python program, __del__ runs): the closed actor's __del__
    sees the 1.0s it was given. Observed: it sees 2.0s, the data the caller sent to another
    actor afterwards. close_actor drops the caller's leases at once (link.close) while the
    worker still finishes, so the caller reuses the block under the worker's private view."""
    path = tmp_path / "seen.txt"
    n = 1 << 18  # 2 MiB: a slab block
    sink = _Sink()
    saver = _Saver(str(path))
    saver.keep(np.full(n, 1.0))
    parl.close_actor(saver)
    for _ in range(20):
        sink.take(np.full(n, 2.0))  # the caller reuses its freed block
    assert wait_until(lambda: path.exists() and path.read_text(), timeout=10)
    parl.close_actor(sink)
    assert path.read_text() == "1.0 1.0"


def _zombie(pid):
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
    dead = _Sink()
    dead_pid = dead.pid()
    first = dead.make(n, 1.0)
    os.kill(dead_pid, signal.SIGKILL)
    assert wait_until(lambda: not psutil.pid_exists(dead_pid) or _zombie(dead_pid), timeout=10)
    del first
    fresh = None
    for _ in range(20):
        _set_next_pid(dead_pid)
        fresh = _Sink()
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


def test_strided_view_of_a_shared_handle_stays_shared():
    """Expected (parl/shm/link.py: a handle is "an array made with parl.shm (or a view of
    one)"; README: passed by handle whatever its size): an actor filling ``buf[:, 0]`` writes
    into ``buf``, as it does for ``buf[0]``. Observed: a non-contiguous view is copied into a
    value (_reduce_array stages a copy before ShmLink.place can see it is a handle), so the
    actor's writes are lost without a word; e.g. a rollout buffer with a column per actor."""
    buf = parl.shm.zeros((1024, 4), np.float32)
    sink = _Sink()
    try:
        sink.fill(buf[3], 1.0)  # a contiguous row: shared
        assert buf[3].min() == 1.0
        sink.fill(buf[:, 0], 2.0)  # a column: copied
        assert buf[:, 0].min() == 2.0, f"column after the actor filled it: {buf[:4, 0]}"
    finally:
        parl.close_actor(sink)


class _CodedError(Exception):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


@parl.remote_class
class _Raiser:
    def fail(self):
        try:
            raise KeyError("inner")
        except KeyError as exc:
            raise _CodedError(7, "bad") from exc


def test_exception_with_custom_init_is_caught_by_its_class():
    """Expected (README: classes of the main script stay the same classes, ``except MyError``
    catches what an actor raises): ``except _CodedError`` catches it with ``.code == 7``.
    Observed: a parl.RemoteError, because pickle rebuilds an exception as ``cls(*args)`` and
    this __init__ takes two arguments (the README's "RemoteError when the exception cannot be
    rebuilt" fallback, parl/wire/failure.py _link). The very common custom-__init__ pattern
    therefore escapes ``except``; rebuilding with ``cls.__new__`` + ``args`` + ``__dict__``
    would keep it."""
    with _Raiser() as actor:
        with pytest.raises(_CodedError) as info:
            actor.fail()
    assert info.value.code == 7
    assert isinstance(info.value.__cause__, KeyError)


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
    import subprocess
    import sys

    script = tmp_path / "fd.py"
    script.write_text(_FD_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    ).stdout
    error = next(line for line in out.splitlines() if line.startswith(("ERROR", "NO ERROR")))
    assert "descriptor" in error or "too many open files" in error, out
    assert "AFTER 2.0" in out, out


def test_strided_torch_view_of_a_shared_handle_stays_shared():
    import torch

    buf = parl.shm.zeros((512, 3), np.float32)
    column = torch.from_numpy(buf)[:, 1]  # a strided tensor over the handle
    sink = _Sink()
    try:
        sink.fill(column, 5.0)
        assert buf[:, 1].min() == buf[:, 1].max() == 5.0
        assert buf[:, 0].max() == 0.0 and buf[:, 2].max() == 0.0  # its neighbours untouched
        values = np.zeros((512, 3), np.float32)  # not a handle: the column is a value
        sink.fill(values[:, 1], 5.0)
        assert values.max() == 0.0
    finally:
        parl.close_actor(sink)
