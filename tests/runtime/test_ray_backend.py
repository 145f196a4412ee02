"""What is Ray's own in the Ray carrier: import isolation, code shipping, resources, output,
closing, dead actors, and what a script moved onto ``parl.connect("ray")`` relies on (classes
made in functions, unpickling failures, custom exceptions, ``ray.shutdown``, forks, exit). The shared semantics (calls, futures, attributes, errors, parl.wait and
parl.get) run on Ray in test_remote_calls.py (the ``carrier`` fixture)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import parl
from tests.runtime.actors import AsyncSampler, AsyncWriter, Sampler, Writer
from tests.runtime.conftest import wait_until
from tests.runtime.rays import NO_IDLE_WORKERS, NUM_CPUS, POLL_S, actor_workers

pytestmark = [pytest.mark.usefixtures("on_ray"), pytest.mark.slow]  # the shared Ray (rays.py)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script: str, cwd: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, script],
        cwd=cwd,
        env=dict(os.environ, **(env or {})),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_import_parl_does_not_import_ray(tmp_path):
    code = (
        "import sys, parl; parl.connect(); parl.remote_class; parl.wait; import parl.ray; "
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_suites_ray_runs_on_loopback(on_ray):
    ray = on_ray
    assert [node["NodeManagerAddress"] for node in ray.nodes()] == ["127.0.0.1"]
    assert ray.util.get_node_ip_address() == "127.0.0.1"


def test_an_actor_ray_cannot_place_is_a_clear_error(on_ray):
    parl.connect("ray", slot_timeout=1)

    @parl.remote_class(num_cpus=64)
    class Huge:
        pass

    with pytest.raises(parl.ClusterError, match=rf"num_cpus=64.*CPU \d+ free of {NUM_CPUS}"):
        Huge()


def test_an_actor_still_starting_at_slot_timeout_is_named_so(on_ray):
    """On Ray, slot_timeout also counts the worker's start-up (seconds with a new runtime_env):
    with the CPUs free, the error says the actor was still starting, not that none is free."""
    parl.connect("ray", slot_timeout=0.001)

    @parl.remote_class
    class Slow:
        pass

    with pytest.raises(
        parl.ClusterError,
        match=r"asks for Ray's default CPU for actors \(a node with a CPU to schedule it on, "
        rf"none held while it runs\), and the Ray cluster has CPU \d+ free of {NUM_CPUS}, .*still "
        r"starting.*slot_timeout",
    ):
        Slow()


def test_actors_hold_what_they_ask_for_and_default_actors_no_cpu(on_ray):
    """An actor is a Ray actor holding the resources it asks for (``num_cpus``, ``max_memory``
    as Ray's ``memory``) while it lives. One that asks for none gets Ray's default (a CPU to
    place it, none held while it runs), as a plain ``@ray.remote`` actor does: with every CPU
    held, a default actor still starts (so a script with more actors than CPUs runs on Ray as
    it does on local workers, a cluster or SSH hosts: all at once, as the script on a Ray that
    parl starts shows), and one asking for a CPU waits and fails with what is free."""
    ray = on_ray
    parl.connect("ray")  # the default slot_timeout: a new Ray worker takes seconds when busy
    before = ray.available_resources().get("CPU", 0)

    @parl.remote_class(num_cpus=NUM_CPUS, max_memory=64)
    class Hog:
        def ping(self):
            return "pong"

    @parl.remote_class(num_cpus=1)
    class OneCpu:
        pass

    hog = Hog()
    assert hog.ping() == "pong"
    free = ray.available_resources()
    assert free.get("CPU", 0) == before - NUM_CPUS
    assert free.get("memory", 0) <= ray.cluster_resources()["memory"] - 64 * 2**20
    assert len(actor_workers()) == 1
    assert Sampler().pid() > 0
    parl.connect("ray", slot_timeout=1)  # (the actors made so far keep their Ray)
    with pytest.raises(
        parl.ClusterError,
        match=rf"asks for num_cpus=1, and the Ray cluster has CPU 0 free of {NUM_CPUS}",
    ):
        OneCpu()

    @parl.remote_class(num_gpus=0)  # a CPU actor, said the way many scripts say it
    class NoGpu:
        pass

    with pytest.raises(parl.ClusterError, match="gives num_gpus \\(0 too\\) but not num_cpus"):
        NoGpu()
    parl.close_actor(hog)
    assert wait_until(lambda: ray.available_resources().get("CPU", 0) == before, timeout=30)


def test_resource_options_are_checked():
    with pytest.raises(TypeError, match="num_cpus must be a finite number >= 0, got '2' \\(str\\)"):
        parl.remote_class(num_cpus="2")
    with pytest.raises(ValueError, match="num_gpus must be a finite number >= 0"):
        parl.remote_class(num_gpus=-1)
    with pytest.raises(ValueError, match="n_gpu=1 and num_gpus=2 disagree"):
        parl.remote_class(n_gpu=1, num_gpus=2)


def test_large_arrays_cross_through_the_object_store_read_only():
    actor = Sampler()
    big = np.arange(4 << 20, dtype=np.float64)  # 32 MiB
    back = actor.apply(lambda a: a, big)
    np.testing.assert_array_equal(back, big)
    assert not back.flags.writeable  # a zero-copy view of Ray's object store
    with pytest.raises(ValueError, match="read-only") as info:
        actor.apply(_add_one_in_place, big)
    assert "copy one (a = a.copy())" in "\n".join(info.value.__notes__)
    assert actor.apply(lambda a: float(a.copy().sum()), np.ones(10)) == 10.0


def _add_one_in_place(a):
    a += 1
    return a


def test_output_has_the_actors_prefix(capfd):
    actor = Sampler()
    pid = actor.pid()
    assert actor.speak("hello from ray")
    assert actor.speak("error from ray", err=True)
    out = ""

    def seen():
        nonlocal out
        captured = capfd.readouterr()
        out += captured.out + captured.err
        return "hello from ray" in out and "error from ray" in out

    assert wait_until(seen, timeout=30)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)  # Ray colours the prefix
    assert f"(Sampler pid={pid}) hello from ray" in plain
    assert f"(Sampler pid={pid}) error from ray" in plain


def test_close_and_del_end_the_actor_as_a_local_worker_ends(tmp_path):
    """Closing drops the instance (``__del__``; its buffered file flushed and closed) and runs
    the worker's atexit handlers, after the calls already made; a later call is refused.
    Dropping the proxy ends the actor too."""
    writer, dropped = AsyncWriter(str(tmp_path)), Sampler()
    assert len(actor_workers()) == 2
    writer.write(5000)  # queued: it runs before the stop
    parl.close_actor(writer)
    with pytest.raises(parl.ActorClosedError, match="was closed"):
        writer.write(1)
    markers = [tmp_path / "del", tmp_path / "atexit"]
    assert wait_until(lambda: all(m.exists() for m in markers), timeout=30), os.listdir(tmp_path)
    assert (tmp_path / "lines.txt").read_text().count("\n") == 5000
    del dropped
    assert wait_until(lambda: not actor_workers(), timeout=30, interval=POLL_S)


def test_an_actor_that_does_not_end_is_killed_after_stop_timeout(tmp_path, caplog):
    """A stuck actor is killed once, with one warning naming its pid (the reaper thread and
    ``disconnect`` both reap: not one warning per reaper); a well-behaved actor closed while
    the stuck one runs ends gracefully, with no warning. The well-behaved one belongs to a
    connection with a long stop_timeout and is waited for before the stuck one is closed, so a
    busy machine cannot make it miss its own stop_timeout."""
    caplog.set_level("WARNING", logger="parl.ray")
    parl.connect("ray", stop_timeout=120)
    writer = Writer(str(tmp_path))
    writer_pid = writer.pid()
    parl.connect("ray", stop_timeout=1)  # (the writer keeps its connection's stop_timeout)
    (tmp_path / "stuck").mkdir()
    stuck = AsyncWriter(str(tmp_path / "stuck"))
    stuck_pid = stuck.pid().get(timeout=30)
    stuck.busy()  # never returns: the stop queued behind it cannot run
    assert wait_until(lambda: (tmp_path / "stuck" / "busy").exists(), timeout=60)
    parl.close_actor(writer)
    assert wait_until(lambda: (tmp_path / "del").exists(), timeout=60)  # ended gracefully
    assert wait_until(
        lambda: writer_pid not in {p.pid for p in actor_workers()}, timeout=60, interval=POLL_S
    )
    start = time.monotonic()
    parl.close_actor(stuck)
    parl.disconnect()  # reaps beside the reaper thread, as at exit or after Ctrl-C
    assert wait_until(lambda: not actor_workers(), timeout=30, interval=POLL_S)
    assert time.monotonic() - start < 15  # killed at its stop_timeout, not left running
    killed = [
        r.getMessage() for r in caplog.records if "did not end within stop_timeout" in r.message
    ]
    assert killed == [f"actor pid={stuck_pid} did not end within stop_timeout: killed"], killed
    assert not (tmp_path / "stuck" / "del").exists()  # killed: nothing of it ran


def test_disconnect_ends_every_actor():
    actors = [Sampler(), AsyncSampler()]
    assert len(actor_workers()) == 2
    parl.disconnect()
    assert wait_until(lambda: not actor_workers(), timeout=30, interval=POLL_S)
    with pytest.raises(parl.ActorClosedError):
        actors[0].add(1, 1)


def test_a_killed_actor_is_a_dead_actor_not_a_hang(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    actor, other = AsyncSampler(), Sampler()
    pending = actor.block(str(fifo))
    os.kill(_pid_of(actor), signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(parl.ActorDiedError, match=r"actor AsyncSampler pid=\d+ died"):
        pending.get(timeout=30)
    assert time.monotonic() - start < 5
    with pytest.raises(parl.ActorDiedError):
        actor.add(1, 1).get(timeout=30)  # and every later call
    assert other.add(1, 2) == 3  # the others are untouched


def _pid_of(actor) -> int:
    """The worker's pid from the actor's label (its queue is blocked behind a FIFO)."""
    return int(repr(actor).split("pid=")[1].split(")")[0].split()[0])


def test_a_sub_folder_module_and_a_named_data_file_are_shipped(on_ray, tmp_path):
    """The project folder goes to Ray as the cluster's packer packs it (a data file that
    .gitignore leaves out but ``distributed_files`` names is shipped: Ray's own ignore rules
    are not applied on top) and the workers run in it. The original ``pkg`` is renamed away
    after ``parl.connect``, so only the shipped copy can be imported. (Classes of ``__main__``
    travel by value: the lifecycle script's actors are all of ``__main__``.)"""
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "junk.pyc").write_bytes(b"x")
    (project / ".gitignore").write_text("data/\n")
    (project / "data" / "table.txt").write_text("shipped data\n")
    (project / "data" / "other.txt").write_text("ignored, not named: stays here\n")
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "mod.py").write_text(
        textwrap.dedent(
            """
            import os
            import parl

            @parl.remote_class
            class Reader:
                def read(self, name):
                    with open(name) as f:
                        shipped = os.path.exists("__pycache__"), os.path.exists("data/other.txt")
                        return f.read().strip(), *shipped
            """
        )
    )
    (project / "main.py").write_text(
        textwrap.dedent(
            """
            import os
            import parl
            from pkg.mod import Reader

            parl.connect("ray", distributed_files=["data/table.txt"])
            os.rename("pkg", "pkg_gone")  # from now on only the shipped copy exists
            print(Reader().read("data/table.txt"))
            """
        )
    )
    address = on_ray.get_runtime_context().gcs_address
    out = _run(str(project / "main.py"), str(project), {"RAY_ADDRESS": address})
    assert "('shipped data', False, False)" in out


# -- scripts moved onto Ray --------------------------------------------------------------------


class _Unloadable:
    """Pickles fine here, fails to unpickle anywhere."""

    def __reduce__(self):
        return (_refuse, ())


def _refuse():
    raise ValueError("cannot rebuild me")


class CodedError(Exception):
    """An exception whose ``__init__`` does not take its ``args`` back."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


def test_by_value_classes_and_unpickling_failures_behave_as_on_local_workers():
    # classes made in a function travel by value (as __main__ classes do): an actor creating
    # an actor of another such class made Ray's cloudpickle rebuild a proxy class, which failed
    @parl.remote_class
    class Child:
        def ping(self):
            return "child pong"

    @parl.remote_class
    class Parent:
        def spawn(self):
            parl.connect("ray")
            return Child().ping()

        def echo(self, value):
            return value

        def unloadable(self):
            return _Unloadable()

        def coded(self):
            try:
                raise KeyError("inner")
            except KeyError as exc:
                raise CodedError(7, "outer") from exc

    parent = Parent()
    assert parent.spawn() == "child pong"
    # an argument that fails to unpickle in the actor raises what unpickling raised (was:
    # "the return value of echo() cannot be sent back" with Ray's traceback)
    with pytest.raises(ValueError, match="cannot rebuild me") as raised:
        parent.echo(_Unloadable())
    assert any("unpickling the request" in note for note in raised.value.__notes__)
    with pytest.raises(ValueError, match="cannot rebuild me") as raised:
        parent.unloadable()
    assert any("unpickling the reply" in note for note in raised.value.__notes__)
    # a user's exception with an __init__(code, message) came back as Ray's TypeError
    with pytest.raises(Exception, match="7: outer") as raised:
        parent.coded()
    assert type(raised.value).__name__ == "CodedError" and raised.value.code == 7
    assert isinstance(raised.value.__cause__, KeyError)
    assert parent.echo(7) == 7  # the actor is still usable


def test_connecting_to_another_ray_than_the_one_initialised_is_refused():
    # the shared Ray was started by ray.init: parl.connect("ray://...") silently joined it
    with pytest.raises(parl.ClusterError, match=r"already initialised a local Ray"):
        parl.connect("ray://127.0.0.1:1")


LIFECYCLE = """
import atexit, os, sys, time
import parl

@parl.remote_class
class A:
    def __init__(self, path=None):
        if path:
            atexit.register(_write, path)

    def ping(self):
        return os.getpid()

    def coded(self):
        raise CodedError(7, "coded")

class CodedError(Exception):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code

def _write(path):
    with open(path, "w") as f:
        f.write("ended")

# a local actor first: parl's exit handler is registered before Ray is imported
local = A()
local.ping()
parl.close_actor(local)

import ray
ray.init()  # the user's (RAY_ADDRESS names the test's Ray)
parl.connect("ray")
mine, unused = A(), A()
mine.ping()
ray.shutdown()
try:
    mine.ping()  # was: Ray started anew by .remote(), then a bare Exception
except parl.ActorDiedError as exc:
    print("SHUT DOWN", exc, ray.is_initialized())

parl.connect("ray")  # parl's own ray.init now
try:
    unused.ping()  # an actor of the Ray that was shut down
except parl.ActorDiedError as exc:
    print("UNUSED", exc)
first = A()
first.ping()
try:
    first.coded()
except CodedError as exc:  # was: TypeError: CodedError.__init__() missing 1 required ...
    print("CODED", exc.code)
parl.connect("ray")
second = A()
second.ping()
pid = os.fork()
if pid == 0:
    try:
        A()
    except parl.ClusterError as exc:  # was: a hang
        print("CHILD", exc, flush=True)
    os._exit(0)  # as multiprocessing does: Ray's state does not survive a fork
deadline = time.monotonic() + 60
while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
    time.sleep(0.05)
print("CHILD ENDED", time.monotonic() < deadline, flush=True)
parl.disconnect()
print("FIRST AFTER DISCONNECT", first.ping() > 0)  # was: its Ray shut down under it
parl.connect("ray")  # after disconnect, actors would be local workers
keeper = A(sys.argv[1])
print("KEEPER", keeper.ping() > 0, first.ping() > 0, flush=True)
# exit: the keeper must end as a local worker ends, its atexit handler run (was: killed
# with Ray, whose exit handler ran first)
"""


def test_a_script_s_lifecycle_on_ray(on_ray, tmp_path):
    """A script's actors (of classes of its ``__main__``: they travel by value) through the
    user's ``ray.shutdown``, parl's own ``ray.init``, a reconnect, a fork, ``disconnect`` and
    the script's exit."""
    script = tmp_path / "lifecycle.py"
    script.write_text(LIFECYCLE)
    marker = tmp_path / "keeper-ended"
    env = dict(os.environ, RAY_ADDRESS=on_ray.get_runtime_context().gcs_address)
    done = subprocess.run(
        [sys.executable, str(script), str(marker)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = done.stdout
    assert done.returncode == 0, f"{out}\n{done.stderr}"
    assert "SHUT DOWN actor A pid=" in out and "Ray was shut down" in out
    assert out.split("SHUT DOWN", 1)[1].split("\n", 1)[0].endswith("False")
    assert "UNUSED actor A pid=" in out and "died (Ray: Failed to submit task" in out
    assert "CODED 7" in out
    assert "FIRST AFTER DISCONNECT True" in out
    assert "CHILD this process" in out and "cannot be used from a forked child" in out
    assert "CHILD ENDED True" in out
    assert "KEEPER True True" in out
    assert marker.read_text() == "ended"


DESTROY_THEN_SHUTDOWN = """
import parl, ray

@parl.remote_class
class A:
    def ping(self):
        return 1

ray.init()  # the user's (RAY_ADDRESS names the test's Ray)
parl.connect("ray")
actor = A()
actor.ping()
actor.destroy()  # still stopping when Ray goes
ray.shutdown()
print("EXITING", flush=True)
"""


def test_an_actor_destroyed_just_before_ray_shutdown_leaves_a_quiet_exit(on_ray, tmp_path):
    script = tmp_path / "destroy_then_shutdown.py"
    script.write_text(DESTROY_THEN_SHUTDOWN)
    env = dict(os.environ, RAY_ADDRESS=on_ray.get_runtime_context().gcs_address)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "EXITING" in done.stdout, done.stderr
    # was: at exit, waiting for the stopping actor started a new Ray and failed in it
    assert "Exception ignored" not in done.stderr, done.stderr
    assert "Started a local Ray instance" not in done.stderr, done.stderr


RAY_STARTED_BY_PARL = """
import json
import os

import psutil

import parl
from ray._private import ray_constants


@parl.remote_class
class Worker:
    def pid(self):
        return os.getpid()


parl.connect("ray")  # no Ray running and no RAY_ADDRESS: parl starts one
import ray

cpus = int(ray.cluster_resources()["CPU"])
workers = [Worker() for _ in range(cpus + 1)]  # with a CPU held per actor, the last would wait
running = len({worker.pid() for worker in workers})
ray_pids = {*(w.pid() for w in workers), os.getpid(),
            *(p.pid for p in psutil.Process().children(recursive=True))}
listening = {
    c.laddr.ip for c in psutil.net_connections("inet") if c.status == "LISTEN" and c.pid in ray_pids
}
peers = {c.raddr.ip for c in psutil.net_connections("inet") if c.raddr and c.pid in ray_pids}
nodes = sorted(node["NodeManagerAddress"] for node in ray.nodes())
for worker in workers:
    parl.close_actor(worker)
parl.connect("ray")  # the Ray the first connect started must survive the first's retirement
survived = ray.is_initialized()
second = Worker()
assert second.pid() > 0
try:
    parl.connect("ray://127.0.0.1:1")
except parl.ClusterError as exc:
    print("REFUSED", exc)
assert second.pid() > 0  # the refused connect changed nothing
parl.disconnect()
after = [ray_constants.ENABLE_RAY_CLUSTER, os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR)]
print(json.dumps({"cpus": cpus, "running": running, "nodes": nodes,
                  "listening": sorted(listening), "peers": sorted(peers), "survived": survived,
                  "initialized_after_disconnect": ray.is_initialized(), "after": after}))
"""


def test_a_ray_that_parl_starts_runs_a_script_on_loopback_and_survives_a_reconnect(tmp_path):
    """A script with no Ray running: ``parl.connect("ray")`` starts one, on which more actors
    than CPUs run at once (as on local workers, a cluster or SSH hosts). Left to itself, Ray on
    Linux puts a one-machine Ray's node on the outward address and listens on every interface;
    the Ray parl starts listens and talks on loopback only. Connecting again keeps that Ray
    (the first carrier's retirement does not shut it down), a connect to another Ray is
    refused while actors live, and ``disconnect`` shuts it down and puts Ray's loopback switch
    back for a later ``ray.init``."""
    import shutil
    import tempfile

    (tmp_path / "started.py").write_text(RAY_STARTED_BY_PARL)
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}  # fmt: skip
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # no other Ray to join; short sockets
    env["RAY_TMPDIR"] = ray_tmp
    env.update(NO_IDLE_WORKERS)  # (Ray's own idle workers: not what the script looks at)
    try:
        done = subprocess.run([sys.executable, "started.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240)  # fmt: skip
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["running"] == seen["cpus"] + 1  # all running at once
    loopback = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
    assert seen["nodes"] == ["127.0.0.1"]
    assert seen["listening"] and set(seen["listening"]) <= loopback, seen["listening"]
    assert set(seen["peers"]) <= loopback, seen["peers"]
    assert seen["survived"] is True
    assert "REFUSED this process has 1 actors on the Ray at 'ray'" in out
    assert "parl.disconnect()" in out
    assert seen["initialized_after_disconnect"] is False
    assert seen["after"] == [True, None]  # Ray's switch is back for a later ray.init
