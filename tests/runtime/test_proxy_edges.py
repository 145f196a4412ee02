"""Proxy, future and caller edge cases: forks, ``preload``, closing under a running call,
timeout messages and remote exception chains.

Every actor is closed before the test ends (the autouse leak check in conftest.py)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import threading

import pytest

import parl
from parl.wire.caller import CallTimeout
from tests.runtime.actors import AsyncSampler, Sampler
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
    def __init__(self, a, b):  # pickles, but cannot be rebuilt from its args
        super().__init__(f"{a}-{b}")


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

