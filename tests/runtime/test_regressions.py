"""Adversarial checks of the runtime found in review.

Tests named ``test_bug_*`` show a bug and fail until it is fixed; the others are checks that
hold. Every actor is closed before the test ends (the autouse leak check in conftest.py).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import parl
import parl.shm
from parl.shm.segment import segment_table
from tests.runtime.actors import AsyncSampler, Sampler
from tests.runtime.conftest import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- helpers the workers import by name (this module is importable as tests.runtime.*) --------


class BadStrError(Exception):
    def __str__(self):
        raise RuntimeError("str() of this exception fails")


def raise_bad_str():
    raise BadStrError()


def many_shared_arrays(count, nbytes):
    return [np.ones(nbytes, np.uint8) for _ in range(count)]


def many_small_arrays(count):
    return [np.zeros(1) for _ in range(count)]


class CollectOnLoad:
    """Unpickling it runs the garbage collector (stands for any other thread dropping a future
    while the reader is between 'is this call still wanted' and 'file its result')."""

    def __reduce__(self):
        return (_collect_then_build, ())


def _collect_then_build():
    gc.collect()
    return CollectOnLoad()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- futures and threads ----------------------------------------------------------------------


def test_regression_future_get_from_two_threads_poisons_the_future(tmp_path):
    """caller.py:_wait raises ValueError('already collected') in the second waiter, and
    future.py:get stores it in ``_error``, so even later get() calls raise."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    actor = AsyncSampler()
    try:
        future = actor.block(str(fifo))
        outcomes: list[tuple[str, object]] = []

        def getter():
            try:
                outcomes.append(("ok", future.get(timeout=20)))
            except BaseException as exc:  # noqa: BLE001
                outcomes.append(("error", exc))

        threads = [threading.Thread(target=getter) for _ in range(2)]
        for t in threads:
            t.start()
        with open(fifo, "w") as f:
            f.write("go")
        for t in threads:
            t.join(30)
        assert outcomes == [("ok", "go"), ("ok", "go")]
        assert future.get() == "go"
    finally:
        parl.close_actor(actor)


def test_regression_future_dropped_while_its_reply_is_decoded_leaks_the_result():
    """caller.py:_read_one checks that the call is pending *before* unpickling the payload
    and files the result after it; a future dropped in between (another thread, or a GC run
    during unpickling as here) leaves its result (and any shared-memory lease) in
    ``_results`` for the connection's lifetime."""
    actor = AsyncSampler()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        future = actor.add((CollectOnLoad(), np.ones(1 << 16)), ())
        cycle: list = [future]
        cycle.append(cycle)
        del future, cycle  # garbage now, but only a collection will find it
        assert actor.step().get(timeout=20) == 1  # reads the dropped call's reply first
        assert actor._parl_conn.outstanding() == 0
    finally:
        if gc_was_enabled:
            gc.enable()
        parl.close_actor(actor)


def test_threads_mixing_sync_futures_empty_and_shared_replies_on_one_actor():
    actor = AsyncSampler()
    errors: list[str] = []

    def worker(k):
        try:
            for i in range(60):
                f = actor.add(k, i)
                if i % 3 == 0:
                    assert wait_until(lambda f=f: not f.empty(), timeout=20)
                    assert f.get_nowait() == k + i
                elif i % 3 == 1:
                    assert f.get(timeout=20) == k + i
                else:
                    g = actor.big(1 << 16)  # 256 KiB: through shared memory
                    assert f.get() == k + i
                    assert g.get().shape == (1 << 16,)
        except BaseException as exc:  # noqa: BLE001
            errors.append(repr(exc))

    try:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        conn = actor._parl_conn
        assert conn.outstanding() == 0
        actor.step().get()  # carries the releases of the views dropped above
        assert conn._link.lease_count() == 0
    finally:
        parl.close_actor(actor)


# -- limits of one message --------------------------------------------------------------------


def test_regression_more_than_250_new_segments_in_one_call():
    """framing.py:74 refuses a frame with more than MAX_FDS descriptors: the call raises a raw
    ValueError after ShmLink.place has already marked the segments as known to the peer."""
    actor = Sampler()
    try:
        arrays = [parl.shm.zeros(16, np.float32) for _ in range(260)]
        assert len(actor.echo(arrays)) == 260
    finally:
        parl.close_actor(actor)
        arrays = None
        gc.collect()
        segment_table().allocator.trim()  # 260 cached segments hold 520 descriptors


def test_regression_refused_call_with_many_segments_then_kills_the_actor():
    """After the refused call above, the link believes the worker has the segments; passing
    one of them again sends a reference without its descriptor and the worker dies with
    KeyError in protocol.decode (outside dispatch.serve's try)."""
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


def test_regression_actor_returning_more_than_250_shared_arrays_dies():
    """dispatch.py:95 sock.send raises ValueError (too many descriptors) in the worker, which
    ends it: the caller sees ActorDiedError for a legal return value."""
    actor = Sampler()
    try:
        result = actor.apply(many_shared_arrays, 300, 1 << 17)
        assert len(result) == 300
        assert actor.add(1, 2) == 3
    finally:
        parl.close_actor(actor)


def test_regression_more_than_65535_buffers_in_one_message():
    """protocol.py HEADER packs the buffer count as uint16: 70,000 small arrays as arguments
    raise struct.error at the caller, and as a return value kill the worker."""
    actor = Sampler()
    try:
        arrays = many_small_arrays(70_000)
        assert actor.apply(len, arrays) == 70_000
    finally:
        parl.close_actor(actor)


def test_regression_actor_returning_more_than_65535_arrays_dies():
    actor = Sampler()
    try:
        assert len(actor.apply(many_small_arrays, 70_000)) == 70_000
        assert actor.add(1, 2) == 3
    finally:
        parl.close_actor(actor)


def test_regression_select_fails_once_the_caller_has_more_than_1024_descriptors():
    """caller.py, framing.py, pool.py, carrier.py use select.select, limited to descriptors
    below FD_SETSIZE (1024), while every shared segment holds two descriptors (its fd and
    mmap's dup) and carrier._raise_fd_limit raises the limit for exactly that: with ~520 live
    shared arrays, creating an actor raises 'ValueError: filedescriptor out of range in
    select()'. Segments now hold many blocks each, so the descriptors are opened by hand."""
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


# -- exceptions -------------------------------------------------------------------------------


def test_regression_exception_whose_str_fails_kills_the_actor():
    """dispatch.py failure_of calls str(exc) unguarded: the worker dies instead of reporting."""
    actor = Sampler()
    try:
        with pytest.raises(BadStrError):
            actor.apply(raise_bad_str)
        assert actor.add(1, 2) == 3
    finally:
        parl.close_actor(actor)


# -- leaks ------------------------------------------------------------------------------------


def test_regression_result_view_that_outlives_its_actor_leaks_its_segment():
    """ShmLink.close -> SegmentTable.forget cannot unmap a segment while a view exists, and
    nothing retries when the view goes: every such result leaks two descriptors and its whole
    segment of memory for the life of the caller."""
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
    finally:  # unmap what the bug left behind, so that later tests start clean
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


# -- interrupted calls ------------------------------------------------------------------------


def test_regression_interrupt_in_the_middle_of_a_send_hangs_every_later_call(tmp_path):
    """caller.py submit: a KeyboardInterrupt inside FrameSocket.send after part of the frame
    went out leaves the stream desynchronised; the worker waits for the rest of the frame and
    every later call hangs (no error), instead of failing with a parl error."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    actor = AsyncSampler()
    main = threading.main_thread()
    assert threading.current_thread() is main

    def sending_started() -> bool:
        frame = sys._current_frames().get(main.ident)
        while frame is not None:
            code = frame.f_code
            if code.co_name == "_send_parts" and code.co_filename.endswith("framing.py"):
                return frame.f_locals["self"]._sending  # part of the frame is out
            frame = frame.f_back
        return False

    def interrupter():
        if wait_until(sending_started, timeout=20):
            signal.pthread_kill(main.ident, signal.SIGINT)

    try:
        blocked = actor.block(str(fifo))  # the worker reads nothing until the fifo opens
        thread = threading.Thread(target=interrupter)
        thread.start()
        with pytest.raises(KeyboardInterrupt):
            actor.add(b"x" * (32 << 20), b"")  # in-band: far more than the socket buffer
        thread.join()
        # the stream is out of step: the connection is closed, and says so at once
        with pytest.raises(parl.ActorClosedError, match="interrupted in the middle"):
            actor.add(1, 2).get(timeout=2)
        with pytest.raises(parl.ActorClosedError):
            blocked.get(timeout=2)
    finally:
        parl.close_actor(actor)


# -- values -----------------------------------------------------------------------------------


def test_regression_instance_of_a_main_class_as_an_argument(tmp_path):
    """README: classes defined in __main__ travel by value. Plain pickle saves an *instance*
    of such a class by reference without failing, so the by-value path is never tried and the
    worker cannot find __main__.Point."""
    script = tmp_path / "main_class.py"
    script.write_text(
        textwrap.dedent(
            """
            import parl

            class Point:
                def __init__(self, x):
                    self.x = x

            @parl.remote_class
            class Doubler:
                def double(self, p):
                    return p.x * 2

            if __name__ == "__main__":
                parl.connect(linger=0)
                with Doubler() as d:
                    print("result", d.double(Point(21)))
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    assert "result 42" in proc.stdout, proc.stderr[-2000:]


def test_arrays_of_every_layout_and_dtype_round_trip():
    n = 1 << 16
    cases = {
        "empty": np.zeros(0),
        "empty-2d": np.zeros((0, 5), np.float32),
        "0-d": np.array(3.5),
        "strided": np.arange(4 * n, dtype=np.float64)[::3],
        "reversed": np.arange(n, dtype=np.float64)[::-1],
        "fortran": np.asfortranarray(np.arange(2 * n, dtype=np.float64).reshape(512, -1)),
        "broadcast": np.broadcast_to(np.arange(8.0), (n, 8)),
        "bool": np.ones(4 * n, bool),
        "complex": np.arange(n) * (1 + 2j),
        "structured": np.zeros(n, dtype=[("a", "i4"), ("b", "f8", (2,))]),
        "unicode": np.array(["hello", "w"] * n),
        "datetime": np.arange(n).astype("datetime64[s]"),
        "float16": np.ones(n, np.float16),
        "read-only": np.frombuffer(b"\x01" * (4 * n), np.uint8),
        "object": np.array([1, "a", None], object),
    }
    actor = Sampler()
    try:
        for name, value in cases.items():
            back = actor.echo(value)
            assert back.dtype == value.dtype and back.shape == value.shape, name
            if value.dtype != object:
                assert np.array_equal(back, value), name
            else:
                assert back.tolist() == value.tolist(), name
        same = np.arange(1 << 16, dtype=np.float64)
        pair = actor.echo((same, same))
        assert pair[0] is pair[1]  # one buffer, identity kept
        shared = parl.shm.zeros(1 << 10)
        alias = actor.echo(shared)
        alias[3] = 7.0
        assert shared[3] == 7.0  # a shared array comes back as a view of itself
        del pair, alias
    finally:
        parl.close_actor(actor)


def test_torch_tensors_of_unusual_dtypes_round_trip():
    torch = pytest.importorskip("torch")
    n = 1 << 16
    cases = {
        "bfloat16": torch.ones(n, dtype=torch.bfloat16),
        "float8_e4m3fn": torch.ones(n).to(torch.float8_e4m3fn),
        "float8_e5m2": torch.ones(n).to(torch.float8_e5m2),
        "uint16": torch.ones(n, dtype=torch.uint16),
        "uint32": torch.ones(n, dtype=torch.uint32),
        "bool": torch.ones(n, dtype=torch.bool),
        "conj": torch.ones(n, dtype=torch.complex64).conj(),
        "transposed": torch.arange(4.0 * n).reshape(4, -1).t(),
        "empty": torch.zeros(0, 3),
        "0-d": torch.tensor(2.0),
        "strided-int8": torch.ones(8, dtype=torch.int8)[::2],
        "parameter": torch.nn.Parameter(torch.ones(n)),
        "requires-grad": torch.ones(n, requires_grad=True),
    }
    actor = Sampler()
    try:
        for name, value in cases.items():
            back = actor.echo(value)
            assert type(back) is type(value), name
            assert back.dtype == value.dtype and back.shape == value.shape, name
            assert back.requires_grad == value.requires_grad, name
            if value.dtype.itemsize == 1 and value.dtype.is_floating_point:
                assert torch.equal(back.view(torch.uint8), value.view(torch.uint8)), name
            else:
                assert torch.equal(back.detach(), value.detach().resolve_conj()), name
    finally:
        parl.close_actor(actor)


def test_regression_torch_dtypes_numpy_lacks_besides_bfloat16_and_float8():
    """serialization.py _VIEW_AS_INT covers bfloat16 and two float8 types only; for complex32
    and the *fnuz float8 types _reduce_tensor falls back to torch's own pickling, which cannot
    load them (AttributeError: UntypedStorage has no attribute 'dtype')."""
    torch = pytest.importorskip("torch")
    import warnings

    names = ["complex32", "float8_e4m3fnuz", "float8_e5m2fnuz"]
    actor = Sampler()
    failures = {}
    try:
        for name in names:
            dtype = getattr(torch, name, None)
            if dtype is None:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = torch.zeros(1 << 10).to(dtype)
            try:
                back = actor.echo(value)
                assert back.dtype == value.dtype and back.shape == value.shape
            except Exception as exc:  # noqa: BLE001
                failures[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        assert failures == {}
    finally:
        parl.close_actor(actor)
