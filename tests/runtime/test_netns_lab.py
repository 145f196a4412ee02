"""The namespace lab itself: machines reach each other and the test process by address, a cut
link carries nothing until it is restored, and nothing is left behind. Two networks live at
once in one process (a module's shared network beside a test's own), with machines of the
same name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.runtime.netns import Network, _ip

pytestmark = pytest.mark.slow  # namespace machines

ECHO = (
    "import socket,sys\n"
    "s=socket.create_server(('0.0.0.0',7000))\n"
    "print('ready',flush=True)\n"
    "c,_=s.accept();c.sendall(c.recv(5))\n"
)
DIAL = (
    "import socket,sys\n"
    "c=socket.create_connection((sys.argv[1],7000),timeout=2);c.sendall(b'hello')\n"
    "print(c.recv(5).decode())\n"
)


def test_machines_reach_each_other_and_a_cut_link_carries_nothing() -> None:
    with Network() as net:
        a, b = net.machine("a"), net.machine("b")
        assert a.address != b.address != net.here
        server = a.popen([sys.executable, "-c", ECHO], stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "ready"
        done = b.run([sys.executable, "-c", DIAL, a.address], capture_output=True, text=True)
        assert done.stdout.strip() == "hello", done.stderr
        server.wait(timeout=10)
        a.cut()
        done = subprocess.run(
            [sys.executable, "-c", DIAL, a.address], capture_output=True, text=True
        )
        assert "timed out" in done.stderr
        a.restore()
        with Network() as other:  # a second network at once, a machine named alike
            again = other.machine("a")
            assert other.prefix != net.prefix and again.netns != a.netns
            names = [m.netns for m in [*net.machines, *other.machines]]
        assert _ip("netns", "list").count(a.netns) == 1  # the first one is still there
    listed = _ip("netns", "list")
    assert not any(name in listed for name in names)
