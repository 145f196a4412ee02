"""Proxy, future and caller edge cases: forks, special methods, subclasses, static methods,
``preload``, closing under a running call, futures shared by threads or dropped, timeout
messages, remote exception chains, and remote exceptions rebuilt as their own class.

Every actor is closed before the test ends (the autouse leak check in conftest.py)."""

from __future__ import annotations

import copy
import gc
import os
import pickle
import select
import subprocess
import sys
import textwrap
import threading

import cloudpickle
import numpy as np
import pytest

import parl
from parl.wire.caller import CallTimeout
from tests.runtime.actors import (
    AsyncCountdown,
    AsyncIndexed,
    AsyncSampler,
    AsyncSubSampler,
    AsyncTable,
    Countdown,
    Falsy,
    GeneratorIter,
    Indexed,
    Sampler,
    SubAsync,
    SubSampler,
    Table,
    WithStatic,
)
from tests.runtime.conftest import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_script(tmp_path, source: str, timeout: float = 120) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env=env,
    )


# -- helpers the workers import by name --------------------------------------------------------


class NotRebuildable(Exception):
    def __init__(self, a, b):  # cannot be pickled: it holds a lock
        super().__init__(f"{a}-{b}")
        self.lock = threading.Lock()


def raise_with_cause():
    raise ValueError("x") from KeyError("y")


def raise_while_handling():
    try:
        {}["k"]
    except KeyError:
        raise RuntimeError("while handling")  # noqa: B904 - the implicit context is the point


def raise_from_none():
    try:
        {}["k"]
    except KeyError:
        raise RuntimeError("hidden context") from None


def raise_with_unpicklable_cause():
    try:
        raise NotRebuildable(1, 2)
    except NotRebuildable as exc:
        raise ValueError("top") from exc


def module_loaded(name):
    return name in sys.modules


def read_fifo(path):
    with open(path) as f:
        return f.read()


def worker_is_reading(fifo) -> bool:
    """True once a process has the fifo open for reading (the actor is inside the call)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    os.close(fd)
    return True


class BadStrError(Exception):
    def __str__(self):
        raise RuntimeError("str() of this exception fails")


def raise_bad_str():
    raise BadStrError()


class CollectOnLoad:
    """Unpickling it runs the garbage collector (stands for any other thread dropping a future
    while the reader is between 'is this call still wanted' and 'file its result')."""

    def __reduce__(self):
        return (_collect_then_build, ())


def _collect_then_build():
    gc.collect()
    return CollectOnLoad()


# -- forks -------------------------------------------------------------------------------------


def test_forked_child_gets_a_clear_error_and_the_parent_keeps_its_actor():
    actor = Sampler()
    try:
        pending = AsyncSampler()
        future = pending.add(1, 2)  # collected by the parent only
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the pipe, never return into pytest
            try:
                lines = []
                for use in (lambda: actor.add(1, 2), future.get, lambda: actor.buf):
                    try:
                        lines.append(f"returned {use()!r}")
                    except BaseException as exc:  # noqa: BLE001
                        lines.append(f"{type(exc).__name__}: {exc}")
                os.write(write_end, "\n".join(lines).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        ready, _, _ = select.select([read_end], [], [], 30)
        assert ready, "the child hung on its parent's actor"
        report = os.read(read_end, 1 << 16).decode()
        os.close(read_end)
        assert os.waitpid(pid, 0)[1] == 0
        lines = report.splitlines()
        assert len(lines) == 3, report
        for line in lines:
            assert line.startswith("ActorForkedError: "), report
        assert f"belongs to process {os.getpid()}" in lines[0]
        assert f"pid {pid}" in lines[0] and "create the actors" in lines[0]
        # the parent's actors did not notice
        assert actor.add(2, 3) == 5
        assert future.get(timeout=30) == 3
        assert pending.add(3, 4).get(timeout=30) == 7
        parl.close_actor(pending)
    finally:
        parl.close_actor(actor)


def test_forked_child_that_exits_normally_leaves_the_parents_workers_alone(tmp_path):
    """The child's copies of the proxies are collected and its exit runs the finalizers: none
    may stop the parent's worker; the child can still make actors of its own."""
    result = run_script(
        tmp_path,
        """
        import gc, os, sys
        import parl

        @parl.remote_class
        class Counter:
            def add(self, a, b):
                return a + b
            def pid(self):
                return os.getpid()

        actor = Counter()
        worker = actor.pid()
        pid = os.fork()
        if pid == 0:
            try:
                actor.add(1, 2)
            except parl.ActorForkedError as exc:
                print("child error:", type(exc).__name__, flush=True)
            own = Counter()
            print("child own actor:", own.add(2, 3), own.pid() != worker, flush=True)
            del actor
            gc.collect()
            sys.exit(0)  # atexit handlers and finalizers run
        _, status = os.waitpid(pid, 0)
        print("child status:", status, flush=True)
        print("parent:", actor.add(3, 4), actor.pid() == worker, flush=True)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "child error: ActorForkedError",
        "child own actor: 5 True",
        "child status: 0",
        "parent: 7 True",
    ], result.stdout + result.stderr


# -- special methods ---------------------------------------------------------------------------


def test_iter_forwards_dunder_iter_instead_of_indexing():
    table = Table(a=1, b=2)
    try:
        assert list(table) == ["a", "b"]  # KeyError(0) before: indexing, not __iter__
        assert dict(zip(table, [10, 20], strict=True)) == {"a": 10, "b": 20}
        assert len(table) == 2 and "a" in table and "z" not in table
        assert table["b"] == 2 and table("z") == "missing"
        table["c"] = 3
        del table["a"]
        assert sorted(table) == ["b", "c"]
        with pytest.raises(KeyError):
            del table["nope"]
    finally:
        parl.close_actor(table)


def test_wait_false_protocol_dunders_block_and_others_return_futures():
    table = AsyncTable(a=1)
    try:
        assert len(table) == 1  # an int, not a Future
        assert ("a" in table) is True
        assert ("z" in table) is False  # a Future was always truthy
        assert list(table) == ["a"]
        table["b"] = 2  # waits: an error here must not be lost with a dropped future
        with pytest.raises(KeyError):
            del table["nope"]
        item = table["b"]
        assert isinstance(item, parl.Future) and item.get(timeout=30) == 2
        called = table("a")
        assert isinstance(called, parl.Future) and called.get(timeout=30) == 1
    finally:
        parl.close_actor(table)


def test_iter_without_dunder_iter_raises_type_error_at_once():
    for cls in (Indexed, AsyncIndexed):
        actor = cls()
        try:
            with pytest.raises(TypeError, match="not iterable"):
                iter(actor)
            with pytest.raises(TypeError, match="not iterable"):
                3 in actor  # noqa: B015 - no __contains__: would iterate, and so index forever
            got = actor[2]
            assert (got.get(timeout=30) if isinstance(got, parl.Future) else got) == 20
        finally:
            parl.close_actor(actor)


def test_an_actor_with_dunder_next_is_its_own_iterator():
    for cls in (Countdown, AsyncCountdown):
        actor = cls(3)
        try:
            assert iter(actor) is actor
            assert list(actor) == [3, 2, 1]
            assert list(actor) == []
        finally:
            parl.close_actor(actor)


def test_truthiness_is_true_unless_the_class_defines_bool():
    table = AsyncTable()  # empty: len 0, but the proxy stays true
    falsy = Falsy()
    try:
        assert len(table) == 0 and bool(table) is True
        assert bool(falsy) is False  # forwarded, and waited for despite wait=False
    finally:
        parl.close_actor(table)
        parl.close_actor(falsy)


def test_iter_that_returns_a_generator_explains_and_keeps_the_actor():
    actor = GeneratorIter()
    try:
        with pytest.raises(TypeError, match="__iter__"):
            iter(actor)
        assert actor.ok() == "ok"
    finally:
        parl.close_actor(actor)


# -- subclasses of remote classes --------------------------------------------------------------


def test_subclass_of_a_remote_class_runs_in_its_actor():
    actor = SubSampler(4, bonus=1000)
    try:
        assert isinstance(actor, Sampler)
        pid, type_name, class_cell = actor.where()
        assert pid != os.getpid()  # ran in the caller before
        assert (type_name, class_cell) == ("SubSampler", "SubSampler")
        assert actor.add(1, 2) == 1003  # super().add() in the actor
        assert actor.rollout().sum() == 4  # inherited, with the state super().__init__ made
        assert actor.bonus == 1000
        assert issubclass(SubSampler._original, Sampler._original)
    finally:
        parl.close_actor(actor)


def test_subclass_keeps_or_replaces_its_bases_options():
    inherited = SubAsync()
    decorated = AsyncSubSampler()
    try:
        future = inherited.twice(4)
        assert isinstance(future, parl.Future) and future.get(timeout=30) == 8
        assert inherited.add(1, 2).get(timeout=30) == 3
        future = decorated.triple(2)
        assert isinstance(future, parl.Future) and future.get(timeout=30) == 6
        assert decorated.add(1, 2).get(timeout=30) == 3
        assert isinstance(decorated, Sampler)  # still a Sampler
        with pytest.raises(TypeError, match="already a remote class"):
            parl.remote_class(AsyncSubSampler)
    finally:
        parl.close_actor(inherited)
        parl.close_actor(decorated)


def test_subclass_mixing_a_remote_and_a_plain_class_is_refused():
    class Mixin:
        def helper(self):
            return 1

    with pytest.raises(TypeError, match=r"Sampler\._original"):

        class Mixed(Sampler, Mixin):
            pass


def test_subclass_defined_in_main_travels_by_value(tmp_path):
    result = run_script(
        tmp_path,
        """
        import os
        import parl

        @parl.remote_class
        class Base:
            def __init__(self, n):
                self.n = n
            def value(self):
                return self.n

        class Child(Base):
            def __init__(self, n):
                super().__init__(n * 10)
            def value(self):
                return super().value() + 1
            def pid(self):
                return os.getpid()

        child = Child(4)
        print(child.value(), child.pid() != os.getpid(), isinstance(child, Base))
        parl.close_actor(child)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["41", "True", "True"], result.stdout + result.stderr


# -- static and class methods ------------------------------------------------------------------


def test_static_and_class_methods_run_here_on_the_class_and_remotely_on_an_actor():
    assert WithStatic.where("here") == ("here", os.getpid())  # 'int' has no _parl_conn before
    assert WithStatic.limit() == (7, os.getpid())
    assert WithStatic.LIMIT == 7  # class attributes read from the original class
    actor = WithStatic.make(5)  # cls is the proxy class: the factory makes an actor
    try:
        assert isinstance(actor, WithStatic) and actor.get_x() == 5
        tag, pid = actor.where("there")
        assert tag == "there" and pid != os.getpid()
        assert actor.limit()[1] == pid
    finally:
        parl.close_actor(actor)


# -- connect(preload=...) ----------------------------------------------------------------------


def test_preload_takes_one_module_name_as_a_str():
    parl.connect(preload="colorsys", linger=0)
    actor = Sampler()
    try:
        # a module nothing else imports: the fork server preloaded it for the worker
        assert actor.apply(module_loaded, "colorsys") is True
    finally:
        parl.close_actor(actor)
        parl.connect(linger=0)


@pytest.mark.parametrize("bad", [3, ["torch", 3], [""], b"torch"])
def test_preload_of_another_type_is_refused(bad):
    with pytest.raises(TypeError, match="preload must be a module name"):
        parl.connect(preload=bad)


# -- closing an actor while other threads use it -----------------------------------------------


def test_close_while_another_thread_waits_for_a_call_raises_actor_closed(tmp_path):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    actor = Sampler()
    outcome: list[BaseException | object] = []

    def call():
        try:
            outcome.append(actor.apply(read_fifo, fifo))
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    try:
        assert wait_until(lambda: worker_is_reading(fifo), timeout=30)
    finally:
        parl.close_actor(actor)
    thread.join(30)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], parl.ActorClosedError), outcome


def test_calls_racing_with_close_raise_only_actor_closed():
    """Threads that submit, wait and poll futures while the actor closes see ActorClosedError,
    never a raw OSError (EBADF) or an internal error."""
    keeper = Sampler()  # keeps the worker pool up between rounds
    try:
        for _ in range(20):
            _race_calls_with_close()
    finally:
        parl.close_actor(keeper)


def _race_calls_with_close() -> None:
    sync, futures = Sampler(), AsyncSampler()
    errors: list[BaseException] = []
    calls = [0]

    def hammer(use):
        try:
            while True:
                use()
                calls[0] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def poll_future():
        future = futures.add(1, 2)
        while future.empty():
            pass
        future.get()

    uses = [lambda: sync.add(1, 2), lambda: futures.add(1, 2).get(), poll_future]
    threads = [threading.Thread(target=hammer, args=(use,)) for use in uses * 2]
    for thread in threads:
        thread.start()
    wait_until(lambda: calls[0] >= 30, timeout=30)
    parl.close_actor(sync)
    parl.close_actor(futures)
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads)
    assert len(errors) == len(threads)
    bad = [e for e in errors if not isinstance(e, parl.ActorClosedError)]
    assert not bad, [f"{type(e).__name__}: {e}" for e in bad]


# -- futures -----------------------------------------------------------------------------------


def test_using_a_future_as_its_value_says_to_call_get_first():
    """Arithmetic, comparison, len, indexing, iteration, numbers and numpy on a parl.Future
    are TypeErrors that say what it is and what to call; equality, hashing and truth stay
    those of an object, so futures still work as dict keys, set members and in ``if``."""
    actor = AsyncSampler()
    future = actor.add(1, 2)
    uses = {
        "future + 1": lambda: future + 1,
        "1 + future": lambda: 1 + future,
        "future * 2": lambda: future * 2,
        "-future": lambda: -future,
        "future < 3": lambda: future < 3,
        "len": lambda: len(future),
        "future[0]": lambda: future[0],
        "list": lambda: list(future),
        "in": lambda: 3 in future,
        "float": lambda: float(future),
        "range": lambda: range(future),
        "np.asarray": lambda: np.asarray(future),
        "array + future": lambda: np.ones(2) + future,
        "format": lambda: f"{future:.2f}",
    }
    for name, use in uses.items():
        with pytest.raises(TypeError, match=r"parl\.Future: .* call \.get\(\) on it") as info:
            use()
        assert "parl.get(futures)" in str(info.value), name
    with pytest.raises(AttributeError, match=r"no attribute 'shape': .* call \.get\(\)"):
        future.shape  # noqa: B018
    assert not hasattr(future, "__array_interface__")
    other = actor.add(3, 4)
    assert bool(future) and (future or None) is future
    assert {future: "a", other: "b"}[other] == "b" and future in {future} and future != other
    assert str(future).startswith("<parl.Future call") and f"{future}" == repr(future)
    assert future.get(timeout=30) + 1 == 4 and parl.get([future, other]) == [3, 7]


def test_a_copied_future_is_itself_and_pickling_one_says_to_send_its_value():
    """``copy.copy`` and ``copy.deepcopy`` (of a future or of a dict holding it) give the
    future itself: a second object for the same call would drop the call when collected. A
    future cannot travel to another process: pickling it is a TypeError naming the fix."""
    actor = AsyncSampler()
    future = actor.add(1, 2)
    assert copy.copy(future) is future and copy.deepcopy({"f": future})["f"] is future
    for dump in (pickle.dumps, cloudpickle.dumps):
        with pytest.raises(TypeError, match=r"parl\.Future cannot be pickled: .* call \.get\(\)"):
            dump(future)
    gc.collect()
    assert parl.get([future]) == [3] and copy.copy(future).get() == 3


def test_future_timeout_message_shows_the_timeout_as_given(tmp_path):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    actor = AsyncSampler()
    try:
        future = actor.block(fifo)
        for timeout in (0.1, 0.05, 0):
            with pytest.raises(CallTimeout) as info:
                future.get(timeout=timeout)
            assert str(info.value).endswith(f"within {timeout} s"), str(info.value)
            assert isinstance(info.value, TimeoutError)
        with open(fifo, "w") as f:
            f.write("done")
        assert future.get(timeout=30) == "done"
    finally:
        parl.close_actor(actor)


def test_a_future_waited_on_by_two_threads_gives_both_its_result(tmp_path):
    """Both waiters and every later get() see the result: the second waiter must not get
    ValueError('already collected') from caller.py:_wait, nor future.py:get store it in
    ``_error`` for later calls."""
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


def test_a_future_dropped_while_its_reply_is_decoded_leaves_no_result_behind():
    """caller.py:_read_one checks that the call is pending *before* unpickling the payload
    and files the result after it; a future dropped in between (another thread, or a GC run
    during unpickling as here) must not leave its result (and any shared-memory lease) in
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


# -- remote exception chains -------------------------------------------------------------------


def test_remote_exception_keeps_its_cause():
    actor = Sampler()
    try:
        with pytest.raises(ValueError) as info:
            actor.apply(raise_with_cause)
        assert info.value.args == ("x",)
        cause = info.value.__cause__
        assert type(cause) is KeyError and cause.args == ("y",)
        assert info.value.__suppress_context__ is True
        assert "raise_with_cause" in info.value.remote_traceback
        assert actor.add(1, 2) == 3
    finally:
        parl.close_actor(actor)


def test_remote_exception_keeps_its_context_and_suppression():
    actor = Sampler()
    try:
        with pytest.raises(RuntimeError, match="while handling") as info:
            actor.apply(raise_while_handling)
        assert info.value.__cause__ is None
        assert type(info.value.__context__) is KeyError
        assert info.value.__suppress_context__ is False
        assert 'in raise_while_handling\n    {}["k"]' in info.value.__context__.remote_traceback
        with pytest.raises(RuntimeError, match="hidden context") as info:
            actor.apply(raise_from_none)
        assert info.value.__cause__ is None and info.value.__suppress_context__ is True
        assert type(info.value.__context__) is KeyError  # kept, as Python keeps it
    finally:
        parl.close_actor(actor)


def test_unpicklable_cause_arrives_as_remote_error():
    actor = Sampler()
    try:
        with pytest.raises(ValueError) as info:
            actor.apply(raise_with_unpicklable_cause)
        assert info.value.args == ("top",)
        cause = info.value.__cause__
        assert isinstance(cause, parl.RemoteError)
        assert cause.type_name.endswith("test_proxy_edges.NotRebuildable")
        assert "1-2" in str(cause) and "raise_with_unpicklable_cause" in cause.remote_traceback
    finally:
        parl.close_actor(actor)


# -- remote exceptions rebuilt as their own class ----------------------------------------------


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
    """Expected (docs/guides/actors.md: classes of the main script stay the same classes, ``except MyError``
    catches what an actor raises): ``except _CodedError`` catches it with ``.code == 7``.
    Observed: a parl.RemoteError, because pickle rebuilds an exception as ``cls(*args)`` and
    this __init__ takes two arguments (the actors guide's "RemoteError when the exception cannot be
    rebuilt" fallback, parl/wire/failure.py _link). The very common custom-__init__ pattern
    therefore escapes ``except``; rebuilding with ``cls.__new__`` + ``args`` + ``__dict__``
    would keep it."""
    with _Raiser() as actor:
        with pytest.raises(_CodedError) as info:
            actor.fail()
    assert info.value.code == 7
    assert isinstance(info.value.__cause__, KeyError)


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
    (parl/wire/serialization.py reduce_exception), and a __slots__ attribute is in neither."""
    with _UserRaiser() as actor:
        with pytest.raises(_SlottedError) as info:
            actor.slotted()
    assert info.value.code == 4


def test_oserror_subclass_with_custom_init_is_caught_by_its_base():
    """Expected (docs/guides/actors.md: custom-__init__ exceptions are caught by their class): an
    ``except FileNotFoundError`` / ``except _MissingConfig`` catches it, filename kept.
    Observed: parl.RemoteError "__main__._MissingConfig: [Errno 2] ...". reduce_exception
    (parl/wire/serialization.py) leaves every class with a __reduce__ of its own (all OSError
    subclasses) to pickle, which calls ``cls(errno, strerror, filename)``; and a method
    *returning* such an exception fails its whole reply."""
    with _UserRaiser() as actor:
        with pytest.raises(_MissingConfig) as info:
            actor.missing()
    assert info.value.filename == "/etc/app.cfg"


def test_an_exception_whose_str_fails_reaches_the_caller_and_the_actor_lives():
    """dispatch.py's failure_of calls str(exc): unguarded, the worker died instead of
    reporting."""
    actor = Sampler()
    try:
        with pytest.raises(BadStrError):
            actor.apply(raise_bad_str)
        assert actor.add(1, 2) == 3
    finally:
        parl.close_actor(actor)
