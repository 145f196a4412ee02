"""What is Ray's own in the Ray carrier: import isolation, code shipping, resources, output,
closing, dead actors. The shared semantics (calls, futures, attributes, errors, parl.wait and
parl.get) run on Ray in test_remote_calls.py and test_wait_get.py (the ``carrier`` fixture)."""

from __future__ import annotations

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
from tests.runtime.rays import actor_workers

pytestmark = pytest.mark.usefixtures("on_ray")

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


def test_an_actor_is_a_ray_actor_with_its_resources(on_ray):
    ray = on_ray
    before = ray.available_resources().get("CPU", 0)

    @parl.remote_class(num_cpus=2, max_memory=64)
    class Heavy:
        def ping(self):
            return "pong"

    actor = Heavy()
    assert actor.ping() == "pong"
    free = ray.available_resources()
    assert free.get("CPU", 0) == before - 2
    assert len(actor_workers()) == 1
    parl.close_actor(actor)
    assert wait_until(lambda: ray.available_resources().get("CPU", 0) == before, timeout=10)
    assert free.get("memory", 0) <= ray.cluster_resources()["memory"] - 64 * 2**20


def test_an_actor_ray_cannot_place_is_a_clear_error(on_ray):
    parl.connect("ray", slot_timeout=1)

    @parl.remote_class(num_cpus=64)
    class Huge:
        pass

    with pytest.raises(parl.ClusterError, match=r"num_cpus=64.*CPU \d+ free of 4"):
        Huge()


def test_an_actor_still_starting_at_slot_timeout_is_named_so(on_ray):
    """On Ray, slot_timeout also counts the worker's start-up (seconds with a new runtime_env):
    with the CPUs free, the error says the actor was still starting, not that none is free."""
    parl.connect("ray", slot_timeout=0.001)

    @parl.remote_class
    class Slow:
        pass

    with pytest.raises(parl.ClusterError, match=r"num_cpus=1, .*still starting.*slot_timeout"):
        Slow()


def test_resource_options_are_checked():
    with pytest.raises(TypeError, match="num_cpus must be a number"):
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


def test_close_and_del_end_the_actor():
    closed, dropped = Sampler(), Sampler()
    assert len(actor_workers()) == 2
    parl.close_actor(closed)
    with pytest.raises(parl.ActorClosedError, match="was closed"):
        closed.add(1, 1)
    del dropped
    assert wait_until(lambda: not actor_workers(), timeout=10)


def test_closing_ends_the_actor_as_a_local_worker_ends(tmp_path):
    """The instance is dropped (``__del__``; its buffered file flushed and closed) and the
    worker's atexit handlers run, after the calls already made."""
    writer = AsyncWriter(str(tmp_path))
    writer.write(5000)  # queued: it runs before the stop
    parl.close_actor(writer)
    markers = [tmp_path / "del", tmp_path / "atexit"]
    assert wait_until(lambda: all(m.exists() for m in markers), timeout=30), os.listdir(tmp_path)
    assert (tmp_path / "lines.txt").read_text().count("\n") == 5000
    assert wait_until(lambda: not actor_workers(), timeout=15)


def test_an_actor_that_does_not_end_is_killed_after_stop_timeout(tmp_path, caplog):
    caplog.set_level("WARNING", logger="parl.ray")
    parl.connect("ray", stop_timeout=3)  # room for the other actor to end on a loaded machine
    (tmp_path / "stuck").mkdir()
    writer, stuck = Writer(str(tmp_path)), AsyncWriter(str(tmp_path / "stuck"))
    stuck.busy()  # never returns: the stop queued behind it cannot run
    assert wait_until(lambda: (tmp_path / "stuck" / "busy").exists(), timeout=30)
    start = time.monotonic()
    parl.close_actor(stuck)
    parl.close_actor(writer)
    parl.disconnect()  # reaps beside the reaper thread, as at exit or after Ctrl-C
    assert wait_until(lambda: not actor_workers(), timeout=30)
    assert time.monotonic() - start < 15
    killed = [r for r in caplog.records if "did not end within stop_timeout" in r.message]
    assert len(killed) == 1, [r.message for r in killed]  # one warning, not one per reaper
    assert (tmp_path / "del").exists()  # the other one still ended gracefully
    assert not (tmp_path / "stuck" / "del").exists()  # killed: nothing of it ran


def test_disconnect_ends_every_actor():
    actors = [Sampler(), AsyncSampler()]
    assert len(actor_workers()) == 2
    parl.disconnect()
    assert wait_until(lambda: not actor_workers(), timeout=10)
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


def test_a_sub_folder_module_and_main_classes_are_shipped(on_ray, tmp_path):
    """The project folder goes to Ray as the cluster's packer packs it (a data file listed in
    .gitignore too: Ray's own ignore rules are not applied), the workers run in it, and a class
    of ``__main__`` travels by value. The original ``pkg`` is renamed away after
    ``parl.connect``, so only the shipped copy can be imported."""
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "junk.pyc").write_bytes(b"x")
    (project / ".gitignore").write_text("data/\n")
    (project / "data" / "table.txt").write_text("shipped data\n")
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
                        return f.read().strip(), os.path.exists("__pycache__")
            """
        )
    )
    (project / "main.py").write_text(
        textwrap.dedent(
            """
            import os
            import parl
            from pkg.mod import Reader

            @parl.remote_class
            class Local:
                def double(self, x):
                    return 2 * x

            parl.connect("ray")
            os.rename("pkg", "pkg_gone")  # from now on only the shipped copy exists
            print(Reader().read("data/table.txt"), Local().double(21))
            """
        )
    )
    address = on_ray.get_runtime_context().gcs_address
    out = _run(str(project / "main.py"), str(project), {"RAY_ADDRESS": address})
    assert "('shipped data', False) 42" in out


RECONNECT = """
import parl, ray

@parl.remote_class
class One:
    def get(self):
        return 1

parl.connect("ray")
first = One()
assert first.get() == 1
parl.close_actor(first)
parl.connect("ray")  # the Ray the first connect started must survive the first's retirement
assert ray.is_initialized()
second = One()
assert second.get() == 1
try:
    parl.connect("ray://127.0.0.1:1")
except parl.ClusterError as exc:
    print("REFUSED", exc)
assert second.get() == 1  # the refused connect changed nothing
parl.disconnect()
print("AFTER DISCONNECT", ray.is_initialized())
"""


def test_connecting_to_ray_again_keeps_the_ray_it_started(tmp_path):
    (tmp_path / "reconnect.py").write_text(RECONNECT)
    out = _run("reconnect.py", str(tmp_path))
    assert "REFUSED this process has 1 actors on the Ray at 'ray'" in out
    assert "parl.disconnect()" in out
    assert "AFTER DISCONNECT False" in out
