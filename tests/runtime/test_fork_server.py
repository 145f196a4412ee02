"""The fork server on its own."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from parl.errors import ParlError
from parl.workers import ForkServer


def test_a_fork_server_with_another_parl_refuses_to_serve(capfd):
    server = ForkServer(parl_dir="/elsewhere/parl")
    ours, theirs = socket.socketpair()
    out_r, out_w = os.pipe()
    try:
        with pytest.raises(ParlError, match="another installation of parl"):
            server.spawn([theirs.fileno(), out_w, out_w], {"caller_pid": os.getpid()})
    finally:
        server.close()
        for s in (ours, theirs):
            s.close()
        os.close(out_r)
        os.close(out_w)
    assert "the caller runs parl from /elsewhere/parl" in capfd.readouterr().err


def test_spawn_and_exit_status():
    server = ForkServer()
    ours, theirs = socket.socketpair()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        pid = server.spawn([theirs.fileno(), devnull, devnull], {"caller_pid": os.getpid()})
        theirs.close()
        ours.close()  # end of stream: the worker leaves with status 0
        assert server.exit_code(pid, timeout=10) == 0
    finally:
        os.close(devnull)
        server.close()


NICENESS_SCRIPT = """
import os, sys
os.nice(int(sys.argv[1]))
import parl

@parl.remote_class
class Probe:
    def where(self):
        return os.getsid(0), os.getpriority(os.PRIO_PROCESS, 0), open("/proc/self/autogroup").read()

session, nice, group = Probe().where()
print(session != os.getsid(0), nice, group.split()[-1] if group.strip() else "root")
"""


@pytest.mark.parametrize("nice", [0, 6])
def test_actors_keep_the_callers_niceness_in_their_own_session(tmp_path, nice):
    """The fork server leads a session (and so a scheduling group) of its own; a caller run
    with ``nice -n 6`` gets actors whose group is at 6 too, not at the default 0."""
    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("this kernel groups no processes by session (no /proc/self/autogroup)")
    script = tmp_path / "probe.py"
    script.write_text(NICENESS_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(nice)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    own_session, actor_nice, group_nice = done.stdout.split()
    assert own_session == "True"  # Ctrl-C in the terminal still reaches the caller only
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert int(actor_nice) == base + nice
    # the larger of the caller's group niceness (this test's, inherited) and its own
    assert int(group_nice) == max(_group_nice(), base + nice, 0)


def _group_nice() -> int:
    """This process's group niceness; an empty file means the root group (niceness 0), where
    a process lands whose session began before the kernel grouped sessions."""
    with open("/proc/self/autogroup") as group:
        fields = group.read().split()
    return int(fields[-1]) if fields else 0
