"""Worker death, output forwarding, and ending workers with the caller, for real."""

from __future__ import annotations

import errno
import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import parl
from parl.remote.context import current
from tests.runtime.actors import AsyncSampler, Capped, Sampler
from tests.runtime.conftest import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- death of a worker ------------------------------------------------------------------------


def test_sys_exit_in_a_method_kills_only_that_actor():
    victim, bystander = Sampler(), Sampler()
    with pytest.raises(parl.ActorDiedError, match="exited with status 3"):
        victim.exit(3)
    with pytest.raises(parl.ActorDiedError):
        victim.add(1, 2)  # later calls raise too
    assert bystander.add(1, 2) == 3


def test_sigkill_of_a_worker_fails_pending_calls_fast(tmp_path):
    victim, bystander = AsyncSampler(), AsyncSampler()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    pid = victim.pid().get()
    pending = [victim.block(str(fifo)) for _ in range(3)]
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    for future in pending:
        with pytest.raises(parl.ActorDiedError, match="SIGKILL"):
            future.get(timeout=10)
    elapsed = time.monotonic() - start
    assert elapsed < 2.0, (
        f"death noticed after {elapsed:.2f} s"
    )  # the promised bound, not a speed test
    with pytest.raises(parl.ActorDiedError):
        victim.add(1, 1).get()
    assert bystander.add(2, 2).get() == 4


def test_crash_inside_a_call():
    victim = Sampler()
    with pytest.raises(parl.ActorDiedError, match="killed by SIGKILL"):
        victim.crash()


def test_max_memory_exceeded():
    capped = Capped()
    assert capped.ok() == "ok"
    with pytest.raises(parl.ActorMemoryError, match="max_memory of 100 MB"):
        capped.allocate(300)
    with pytest.raises(parl.ActorMemoryError):
        capped.ok()


def test_closing_a_busy_actor_stops_its_worker(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    actor = AsyncSampler()
    pid = actor.pid().get()
    pending = actor.block(str(fifo))  # busy until someone opens the FIFO: nobody will
    parl.close_actor(actor)
    assert wait_until(lambda: gone(pid))
    with pytest.raises(parl.ActorClosedError):
        pending.get(timeout=5)


def test_call_on_a_closed_actor():
    actor = Sampler()
    method = actor.add
    parl.close_actor(actor)
    with pytest.raises(parl.ActorClosedError, match="was closed"):
        method(1, 2)
    with pytest.raises(parl.ActorClosedError):
        _ = actor.buf
    parl.close_actor(actor)  # idempotent


@pytest.mark.parametrize("cls", [Sampler, AsyncSampler])
def test_destroy_ends_the_actor_once_and_later_calls_say_it_was_closed(cls):
    actor = cls()
    pid = actor.pid() if cls is Sampler else actor.pid().get()
    actor.destroy()
    assert wait_until(lambda: gone(pid))
    with pytest.raises(parl.ActorClosedError, match="was closed"):
        actor.add(1, 2)
    actor.destroy()  # idempotent


def test_a_class_with_its_own_destroy_method_keeps_it():
    from tests.runtime.actors import OwnDestroy

    actor = OwnDestroy()
    assert actor.destroy() == "the class's own"
    parl.close_actor(actor)


def test_ctrl_c_while_waiting_leaves_the_actor_usable(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    actor = Sampler()
    with pytest.raises(KeyboardInterrupt):
        actor.interrupt_caller_then_block(os.getpid(), str(fifo))
    assert actor._parl_conn.outstanding() == 0  # the abandoned reply will be dropped
    deadline = time.monotonic() + 60
    while True:  # the actor opens the FIFO to read (never waiting here forever for it)
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            assert exc.errno == errno.ENXIO and time.monotonic() < deadline, "actor never read"
            time.sleep(0.05)
    with os.fdopen(fd, "w") as f:
        f.write("late")
    assert actor.add(1, 2) == 3  # the late reply of the interrupted call is not taken for this


# -- output -----------------------------------------------------------------------------------


def test_print_is_forwarded_with_a_prefix(capsys):
    actor = Sampler()
    pid = actor.pid()
    assert actor.speak("hello stdout")
    assert actor.speak("hello stderr", err=True)
    out, err = "", ""

    def seen():
        nonlocal out, err
        captured = capsys.readouterr()
        out += captured.out
        err += captured.err
        return "hello stdout" in out and "hello stderr" in err

    assert wait_until(seen, timeout=10)
    assert f"(Sampler pid={pid}) hello stdout\n" in out
    assert f"(Sampler pid={pid}) hello stderr\n" in err
    assert actor.add(1, 2) == 3  # the protocol channel is untouched


def test_prints_that_look_like_protocol_data_cannot_corrupt_it():
    actor = Sampler()
    for _ in range(20):
        assert actor.speak("\x00\x00\x00\x10" * 100)
    assert actor.add(20, 22) == 42


# -- lifecycle --------------------------------------------------------------------------------


def test_deleting_the_proxy_ends_the_worker():
    actor = Sampler()
    pid = actor.pid()
    del actor
    gc.collect()
    assert wait_until(lambda: gone(pid))


@pytest.mark.fresh_pool
def test_no_process_runs_when_no_actor_exists():
    # what earlier tests of this process left running on purpose (a shared Ray, the SSH lab)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    actors = [Sampler() for _ in range(3)]
    server = current().carrier.server_pid
    assert server is not None and not gone(server)
    del actors
    gc.collect()
    assert current().carrier.server_pid is None
    assert wait_until(lambda: gone(server))
    assert wait_until(
        lambda: not {p.pid for p in psutil.Process().children(recursive=True)} - before
    )


def test_worker_pool_lingers_after_the_last_actor():
    parl.connect(linger=60)
    first = Sampler()
    server = current().carrier.server_pid
    del first
    gc.collect()
    assert current().carrier.live_actors == 0
    second = Sampler()  # no new fork server: the lingering one serves it
    assert current().carrier.server_pid == server
    del second
    gc.collect()
    assert not gone(server)
    parl.disconnect()
    assert wait_until(lambda: gone(server))

    parl.connect(linger=0.05)
    third = Sampler()
    server = current().carrier.server_pid
    del third
    gc.collect()
    assert wait_until(lambda: gone(server))  # stops by itself once the linger is over


def test_output_can_be_turned_off():
    parl.connect(forward_output=False, linger=0)
    actor = Sampler()
    assert actor.apply(lambda: os.readlink("/proc/self/fd/1")) == "/dev/null"
    assert actor.speak("nobody hears this")


def test_actor_as_a_context_manager():
    with Sampler() as actor:
        pid = actor.pid()
        assert actor.add(1, 2) == 3
    with pytest.raises(parl.ActorClosedError):
        actor.add(1, 2)
    assert wait_until(lambda: gone(pid))


def test_actors_can_have_actors():
    from tests.runtime.actors import Boss

    boss = Boss(3)
    assert boss.run() == (0 + 1 + 2) * (1 << 18)
    leaves = [int(p) for p in boss.pids()]
    parl.close_actor(boss)
    assert wait_until(lambda: all(gone(p) for p in leaves))  # they end with their owner


def test_future_keeps_its_actor_alive():
    future = AsyncSampler().add(20, 22)  # the proxy is dropped at once
    assert future.get(timeout=30) == 42


def run_script(body: str, tmp_path, **kwargs) -> subprocess.Popen:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        **kwargs,
    )


SCRIPT_WITH_ACTORS = """
    import os, sys
    import numpy as np
    import parl
    from parl.remote.context import current

    @parl.remote_class
    class Worker:
        def __init__(self, scale):
            self.scale = scale
        def pid(self):
            return os.getpid()
        def work(self, fn, x):
            return fn(x) * self.scale
        def big(self):
            return np.ones(1 << 20)

    workers = [Worker(i) for i in range(3)]
    assert [w.work(lambda v: v + 1, 1) for w in workers] == [0, 2, 4]
    kept = [w.big() for w in workers]
    print(" ".join(str(w.pid()) for w in workers), current().carrier.server_pid, flush=True)
    {tail}
"""


def test_caller_killed_with_sigkill_leaves_nothing(tmp_path):
    proc = run_script(
        SCRIPT_WITH_ACTORS.format(tail="sys.stdin.read()"), tmp_path, stdin=subprocess.PIPE
    )
    line = proc.stdout.readline()
    pids = [int(p) for p in line.split()]
    assert len(pids) == 4, (line, proc.stderr.read() if proc.poll() is not None else "")
    proc.kill()
    proc.wait()
    assert wait_until(lambda: all(gone(p) for p in pids), timeout=5.0), [
        p for p in pids if not gone(p)
    ]
    proc.stdin.close()
    proc.stdout.close()
    proc.stderr.close()


def test_interpreter_exit_ends_workers_and_flushes_output(tmp_path):
    """The script's actors are of a class of its __main__ module and get lambdas: they work."""
    body = textwrap.dedent(SCRIPT_WITH_ACTORS.format(tail="pass")) + textwrap.dedent(
        """
    @parl.remote_class
    class Talker:
        def talk(self):
            print("last words")
    Talker().talk()
    """
    )
    proc = run_script(body, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    pids = [int(p) for p in out.splitlines()[0].split()]
    assert len(pids) == 4  # three workers and the fork server
    assert "last words" in out
    assert wait_until(lambda: all(gone(p) for p in pids), timeout=5.0)


SCRIPT_HOLDING_RESULTS_AT_EXIT = """
    import os
    import numpy as np
    import torch
    import parl
    from parl.remote.context import current

    @parl.remote_class(wait=False)
    class Source:
        def pid(self):
            return os.getpid()
        def array(self, n):
            return np.ones(n, np.float32)
        def tensor(self, n):
            return torch.ones(n)
        def both(self, n):
            return {"a": np.zeros(n), "t": torch.zeros(n, dtype=torch.float64)}
        def keep(self, value):
            self.kept = value  # the caller's shared memory, held by the actor at exit
            return value

    source = Source()
    N = 1 << 19  # 2 MiB of float32: shared memory, not inline
    first = source.array(N).get()
    tensor = source.tensor(N).get()
    in_list = [source.array(N).get() for _ in range(2)]
    in_dict = {"x": source.both(N).get(), "y": source.tensor(N).get()}

    class Holder:
        pass

    cycle = Holder()
    cycle.me = cycle
    cycle.data = source.array(N).get()
    echoed = source.keep(np.full(N, 3.0, np.float32)).get()
    handle = parl.shm.zeros(N)
    echoed_handle = source.keep(handle).get()
    pending = source.array(N)  # never collected
    part = first[10:]
    pids = [source.pid().get(), current().carrier.server_pid]
    print(" ".join(map(str, pids)), flush=True)
"""


def memfds_of(pids: set[int]) -> list[str]:
    """Descriptors, in any process of this user, of shared-memory segments that ``pids``
    made (named ``parl-<pid>``)."""
    names = {f"/memfd:parl-{pid}" for pid in pids}
    found = []
    for proc in psutil.process_iter():
        try:
            fds = os.listdir(f"/proc/{proc.pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
            except OSError:
                continue
            if target.split(" ")[0] in names:
                found.append(f"{proc.pid}: {target}")
    return found


def test_results_held_at_exit_are_released_quietly(tmp_path):
    """Large results (arrays, tensors, in globals, containers and a cycle, a future never
    collected, memory the actors keep) alive when the interpreter exits: no 'Exception
    ignored', and no process or shared-memory segment outlives the program."""
    proc = run_script(SCRIPT_HOLDING_RESULTS_AT_EXIT, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    pids = {int(p) for p in out.split()}
    assert len(pids) == 2  # the worker and the fork server
    assert wait_until(lambda: all(gone(p) for p in pids), timeout=5.0)
    assert memfds_of(pids | {proc.pid}) == []


def test_forked_child_gets_its_own_runtime(tmp_path):
    body = """
    import os, parl

    @parl.remote_class
    class A:
        def pid(self):
            return os.getpid()

    a = A()
    parent_worker = a.pid()
    child = os.fork()
    if child == 0:
        b = A()
        ok = b.pid() not in (parent_worker, os.getpid())
        os._exit(0 if ok else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert a.pid() == parent_worker
    print("ok")
    """
    proc = run_script(body, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip() == "ok"
