"""Reproductions (fixed since) from the second review of issue 6 (attacking the fixes of the first review).

Every test here fails on the code it was written against; each docstring says what is expected
and what was observed."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import parl
import parl.shm
from parl.shm.segment import segment_table
from tests.runtime.conftest import wait_until

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@parl.remote_class
class _Filler:
    def fill(self, x, value):
        x[...] = value

    def pid(self):
        return os.getpid()

    def keep(self, x):
        self.x = x


def test_reversed_view_of_a_handle_stays_shared():
    """Expected (README: a view of a handle is a handle too; an actor writing into it writes
    into ``buf``): after ``fill(buf[::-1], 3.0)`` buf holds 3.0. Observed: buf stays 0.0; the
    reversed view was silently copied into a value, the actor's writes are lost.
    _strided_handle (parl/wire/serialization.py, ``any(stride < 0 ...)``) gives up on negative
    strides instead of computing the lowest address of the extent."""
    buf = parl.shm.zeros((64, 8), np.float32)
    actor = _Filler()
    try:
        actor.fill(buf[::-1], 3.0)
        actor.fill(buf[::-2, 1], 4.0)
    finally:
        parl.close_actor(actor)
    assert buf[::2, 0].min() == 3.0, buf[:2]
    assert buf[1::2, 1].min() == 4.0, buf[:2]


def test_bfloat16_strided_view_of_a_handle_stays_shared():
    """Expected (README: ``torch.from_numpy(buf)[:, 1]`` is a handle too): a bfloat16 view of
    an int16 handle, column 1, filled by the actor, is seen in buf. Observed: buf unchanged.
    _reduce_tensor (parl/wire/serialization.py) calls ``tensor.contiguous()`` (a copy) for
    the dtypes numpy lacks before viewing them as integers."""
    torch = pytest.importorskip("torch")
    buf = parl.shm.zeros((256, 8), np.int16)
    column = torch.from_numpy(buf).view(torch.bfloat16)[:, 1]
    actor = _Filler()
    try:
        actor.fill(column, 1.0)
    finally:
        parl.close_actor(actor)
    assert (buf[:, 1] != 0).all(), buf[:2]


@parl.remote_class
class _BuiltinRaiser:
    def stop(self):
        raise StopIteration(42)

    def syntax(self):
        compile("x = (", "cfg.py", "exec")

    def decode(self):
        b"\xff".decode("utf-8")

    def returned_exit(self):
        return SystemExit(3)


def test_builtin_exception_fields_are_kept():
    """Expected (as with pickle before the fix, and as raised locally): StopIteration(42).value
    == 42, SyntaxError has its lineno/msg, UnicodeDecodeError its reason, a returned
    SystemExit(3) its code. Observed: value None, lineno None and str() 'None', reason None and
    str() '', code None. _rebuild_exception (parl/wire/serialization.py) skips __init__ also for
    builtin exceptions whose fields are set by their C __init__ (StopIteration, SystemExit,
    SyntaxError, UnicodeError...): a regression of the custom-__init__ fix."""
    with _BuiltinRaiser() as actor:
        with pytest.raises(StopIteration) as stop:
            actor.stop()
        with pytest.raises(SyntaxError) as syntax:
            actor.syntax()
        with pytest.raises(UnicodeDecodeError) as decode:
            actor.decode()
        code = actor.returned_exit().code
    assert stop.value.value == 42
    assert syntax.value.lineno == 1 and syntax.value.filename == "cfg.py"
    assert decode.value.reason == "invalid start byte"
    assert code == 3


class _SlottedError(Exception):
    __slots__ = ("code",)

    def __init__(self, code):
        super().__init__(f"code {code}")
        self.code = code


class _MissingConfig(FileNotFoundError):
    def __init__(self, path):
        super().__init__(2, "config missing", path)


@parl.remote_class
class _UserRaiser:
    def slotted(self):
        raise _SlottedError(4)

    def missing(self):
        raise _MissingConfig("/etc/app.cfg")


def test_slotted_exception_keeps_its_attributes():
    """Expected: ``except _SlottedError as e: e.code`` is 4. Observed: AttributeError: the
    exception is rebuilt without __init__ from ``args`` and ``__dict__`` only
    (parl/wire/serialization.py _reduce_exception), and a __slots__ attribute is in neither."""
    with _UserRaiser() as actor:
        with pytest.raises(_SlottedError) as info:
            actor.slotted()
    assert info.value.code == 4


def test_oserror_subclass_with_custom_init_is_caught_by_its_base():
    """Expected (README: custom-__init__ exceptions are caught by their class): an
    ``except FileNotFoundError`` / ``except _MissingConfig`` catches it, filename kept.
    Observed: parl.RemoteError "__main__._MissingConfig: [Errno 2] ...". _reduce_exception
    (parl/wire/serialization.py) leaves every class with a __reduce__ of its own (all OSError
    subclasses) to pickle, which calls ``cls(errno, strerror, filename)``; and a method
    *returning* such an exception fails its whole reply."""
    with _UserRaiser() as actor:
        with pytest.raises(_MissingConfig) as info:
            actor.missing()
    assert info.value.filename == "/etc/app.cfg"


@parl.remote_class
class _SlowEnd:
    def keep(self, x):
        self.x = x

    def pid(self):
        return os.getpid()

    def __del__(self):
        time.sleep(0.3)


def _ended(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_memory_lent_to_closed_actors_returns_while_idle():
    """Expected (README: memory lent to a closed actor stays lent until its process has
    ended): once the workers have ended, the caller's blocks are free (``blocks`` 0) and 1 GiB
    lent to 4 closed actors goes back (beyond the 512 MiB cache). Observed: all 4 blocks (and
    ~1 GiB of RSS) stay held for as long as the caller makes no further call or close:
    release_parked (parl/shm/link.py) only runs from ShmLink.place and ShmLink.close, nothing
    polls the parked leases (not even SegmentTable.stats)."""
    actors = [_SlowEnd() for _ in range(4)]
    pids = [a.pid() for a in actors]
    for a in actors:
        a.keep(np.ones((256 << 20) // 8))
    for a in actors:
        parl.close_actor(a)
    del actors
    gc.collect()
    assert wait_until(lambda: all(_ended(p) for p in pids), timeout=15)
    assert wait_until(lambda: segment_table().stats()["blocks"] == 0, timeout=3), (
        segment_table().stats()
    )


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
    files`` from ``os.pipe()`` in LocalCarrier._start (parl/shm/carrier.py, the socketpair and
    the two pipes are created before the try that closes them)."""
    script = tmp_path / "create.py"
    script.write_text(_CREATE_AT_LIMIT)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=100, cwd=_ROOT
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
    (the releases ride that message: documented in the README)."""
    script = tmp_path / "drop.py"
    script.write_text(_DROP_AT_LIMIT)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=100, cwd=_ROOT
    ).stdout
    assert "LIMIT" in out, out
    assert "OPEN OK" in out, out
