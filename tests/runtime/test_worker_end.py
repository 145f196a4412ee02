"""Workers end like Python programs: ``__del__``, atexit handlers and flushed files, bounded."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import time

import pytest

import parl
from tests.runtime.actors import AsyncWriter, Sampler, Scalars, Stubborn, Writer
from tests.runtime.conftest import wait_until
from tests.runtime.test_lifecycle import gone, run_script


def lines_in(path) -> int:
    with open(path) as f:
        return len(f.read().splitlines())


def assert_finished_cleanly(folder, pid) -> None:
    """What the worker's clean end leaves: every line, and the markers of its pid."""
    assert lines_in(folder / "lines.txt") == 100
    assert (folder / "del").read_text() == f"{pid}\n"  # the instance's __del__
    assert (folder / "atexit").read_text() == f"{pid}\n"  # an atexit handler of the actor


def close_with(how: str, actor) -> None:
    if how == "close_actor":
        parl.close_actor(actor)
    elif how == "with":
        with actor:
            pass
    else:
        assert how == "gc"
        del actor
        gc.collect()


def test_a_closed_actor_finishes_its_work(tmp_path):
    """Closed by close_actor, by leaving a ``with`` block, or by being collected."""
    parl.connect(linger=0, stop_timeout=30)  # a forced end would show as a 30 s wait
    for how in ("close_actor", "with", "gc"):
        folder = tmp_path / how
        folder.mkdir()
        actor = Writer(str(folder))
        pid = actor.pid()
        actor.write(100)  # buffered in the worker, never flushed by the actor itself
        close_with(how, actor)
        del actor
        assert wait_until(lambda p=pid: gone(p), timeout=10), how
        assert_finished_cleanly(folder, pid)


def test_program_exit_waits_for_workers_to_finish(tmp_path):
    body = f"""
    import os, sys
    from tests.runtime.actors import Writer

    folders = [os.path.join({str(tmp_path)!r}, str(i)) for i in range(3)]
    writers = []
    for folder in folders:
        os.mkdir(folder)
        writers.append(Writer(folder))
        writers[-1].write(100)
    print(" ".join(str(w.pid()) for w in writers), flush=True)
    """  # the script ends with its actors alive: interpreter exit closes them
    proc = run_script(body, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    pids = [int(p) for p in out.split()]
    for i, pid in enumerate(pids):  # complete as soon as the caller has exited
        assert_finished_cleanly(tmp_path / str(i), pid)


def test_caller_killed_with_sigkill_still_lets_an_idle_worker_finish(tmp_path):
    body = f"""
    import os, sys
    from tests.runtime.actors import Writer

    writer = Writer({str(tmp_path)!r})
    writer.write(100)
    print(writer.pid(), flush=True)
    sys.stdin.read()
    """
    proc = run_script(body, tmp_path, stdin=subprocess.PIPE)
    pid = int(proc.stdout.readline())
    proc.kill()
    proc.wait()
    assert wait_until(lambda: gone(pid), timeout=5)
    assert_finished_cleanly(tmp_path, pid)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stream.close()


@pytest.mark.parametrize("method", ["busy", "busy_in_finalizers"])
def test_closing_a_busy_actor_interrupts_it_and_still_finishes(tmp_path, method, capsys):
    parl.connect(linger=0, stop_timeout=30)
    actor = AsyncWriter(str(tmp_path))
    actor.write(100).get()
    pid = actor.pid().get()
    pending = getattr(actor, method)()  # never returns by itself
    assert wait_until((tmp_path / "busy").exists)
    start = time.monotonic()
    parl.close_actor(actor)
    assert wait_until(lambda: gone(pid), timeout=10)
    assert time.monotonic() - start < 10  # well inside stop_timeout: not the forced end
    assert (tmp_path / "finally").read_text() == f"{pid}\n"  # the method's finally ran
    assert_finished_cleanly(tmp_path, pid)
    with pytest.raises(parl.ActorClosedError):
        pending.get(timeout=5)
    assert "ActorClosing" not in capsys.readouterr().err  # no "Exception ignored in ..."


def test_a_worker_that_does_not_finish_is_killed_after_stop_timeout():
    parl.connect(linger=0, stop_timeout=0.5)
    actor = Stubborn()
    pid = actor.pid()
    start = time.monotonic()
    parl.close_actor(actor)  # its __del__ never returns
    assert wait_until(lambda: gone(pid), timeout=10)
    elapsed = time.monotonic() - start
    assert 0.4 < elapsed < 5, elapsed


def test_a_worker_that_does_not_finish_is_killed_while_other_actors_live():
    parl.connect(linger=0, stop_timeout=0.5)
    bystander = Sampler()
    actor = Stubborn()
    pid = actor.pid()
    parl.close_actor(actor)  # the fork server stays (bystander): it must kill the worker
    assert wait_until(lambda: gone(pid), timeout=5)
    assert bystander.add(1, 2) == 3
    parl.close_actor(bystander)


def test_summary_scalars_written_in_an_actor_are_all_readable(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    actor = Scalars()
    pid = actor.pid()
    actor.write(str(tmp_path), 100)  # parl.utils.summary closes its writer at exit
    parl.close_actor(actor)
    assert wait_until(lambda: gone(pid), timeout=10)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [e.value for e in events.Scalars("train/value")] == [float(i) for i in range(100)]


def test_the_fork_servers_exit_handlers_do_not_run_in_workers(tmp_path, monkeypatch):
    log = tmp_path / "exits.log"
    monkeypatch.setenv("PARL_TEST_EXIT_LOG", str(log))
    parl.connect(linger=0, preload=["tests.runtime.exit_marker"])
    actors = [Sampler() for _ in range(2)]
    pids = [a.pid() for a in actors]
    for actor in actors:
        parl.close_actor(actor)  # the last one stops the fork server too
    assert wait_until(lambda: all(gone(p) for p in pids))
    logged = [int(p) for p in log.read_text().split()] if log.exists() else []
    assert not set(logged) & set(pids), "a worker ran an exit handler of the fork server"
    assert len(logged) == 1  # the fork server's own, at its own exit


@pytest.mark.parametrize(
    ("bad", "error"),
    [(float("nan"), ValueError), (float("inf"), ValueError), (-1, ValueError), ("5", TypeError),
     (True, TypeError)],
)  # fmt: skip
def test_stop_timeout_must_be_a_finite_number(bad, error):
    with pytest.raises(error, match="stop_timeout must be a finite number of seconds >= 0"):
        parl.connect(stop_timeout=bad)


def test_sigterm_of_an_idle_worker_is_a_clean_finish(tmp_path):
    """What the fork server sends when its caller is gone: the worker finishes cleanly."""
    actor = Writer(str(tmp_path))
    actor.write(100)
    pid = actor.pid()
    os.kill(pid, signal.SIGTERM)
    with pytest.raises(parl.ActorDiedError, match="exited with status 0"):
        actor.write(1)
    assert wait_until(lambda: gone(pid))
    assert_finished_cleanly(tmp_path, pid)
    parl.close_actor(actor)


def fork_then_terminate() -> int | None:
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    child.start()
    child.terminate()
    child.join(10)
    return child.exitcode


def test_processes_an_actor_forks_keep_the_default_sigterm():
    with Sampler() as actor:
        assert actor.apply(fork_then_terminate) == -signal.SIGTERM
