"""Review of the Ray backend (issue 13): what a user moving real scripts onto
``parl.connect("ray")`` ran into. Each test fails without its fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import parl

pytestmark = pytest.mark.usefixtures("on_ray")


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
    # the module's Ray was started by ray.init: parl.connect("ray://...") silently joined it
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

class CodedError(Exception):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code

@parl.remote_class
class Raiser:
    def coded(self):
        raise CodedError(7, "coded")

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
try:
    Raiser().coded()
except CodedError as exc:  # was: TypeError: CodedError.__init__() missing 1 required ...
    print("CODED", exc.code)
first = A()
first.ping()
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
