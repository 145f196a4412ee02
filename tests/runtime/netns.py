"""Machines for the tests: Linux network namespaces on one bridge, each with an address of its
own, so a master, its agents and a caller talk over a real (virtual) network instead of
loopback.

``Network()`` makes a bridge in the test's own namespace with the address ``here`` (the test
process is a machine too) and a /24 of 10.200.0.0/16 that no other live network of this machine
uses (a lock file per /24). ``network.machine("a")`` adds a namespace with loopback up and a veth
link to the bridge; ``machine.popen``/``machine.run`` start commands inside it. ``machine.cut()``
takes the link down on the bridge's side (packets vanish, as with a pulled cable: nothing tells
either end), ``restore()`` brings it back, ``limit("100mbit")`` shapes what the machine receives
and sends (``unlimit()`` ends that), ``bytes_in()``/``bytes_out()`` count what its link carried. ``close()`` kills every
process left in the namespaces and deletes them and the bridge; namespaces of dead test
processes are removed when the next network starts.

Needs root (CI runs as root). Without it the tests skip with the reason, or fail under CI.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

# namespaces parlt-<pid>-<net>-<name>; bridge pb<pid>.<net>; veths pv<net>.<n>[h|m], where <net>
# is the number of the network's /24 (locked): several networks may live at once, in one process
PREFIX = "parlt"
LOCKS = Path("/tmp/parl-netns-locks")
NEEDS = "network namespaces need root and iproute2 (`ip`); CI runs as root"


def available() -> str | None:
    """None if namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if subprocess.run(["ip", "-V"], capture_output=True).returncode != 0:
        return "no `ip` command"
    return None


def require() -> None:
    why = available()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{NEEDS} ({why})")
    pytest.skip(f"{NEEDS} ({why})")


def _ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_namespace_processes(netns: str) -> None:
    for _ in range(50):
        pids = [int(p) for p in _ip("netns", "pids", netns, check=False).split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def remove_stale() -> None:
    """Namespaces and bridges left by test processes that died without closing them."""
    for line in _ip("netns", "list", check=False).splitlines():
        m = re.match(rf"({PREFIX}-(\d+)-\S+)", line)
        if m and not _alive(int(m.group(2))):
            kill_namespace_processes(m.group(1))
            _ip("netns", "del", m.group(1), check=False)
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).splitlines():
        m = re.match(r"\d+: (pb(\d+)(?:\.\d+)?)[:@]", line)
        if m and not _alive(int(m.group(2))):
            _ip("link", "del", m.group(1), check=False)


class Machine:
    def __init__(self, network: Network, name: str, index: int) -> None:
        self.name = name
        self.netns = f"{PREFIX}-{os.getpid()}-{network.number}-{name}"
        self.address = f"{network.prefix}.{index}"
        self._host_side = f"pv{network.number}.{index}h"
        inner = f"pv{network.number}.{index}m"
        _ip("netns", "add", self.netns)
        _ip("link", "set", "lo", "up", netns=self.netns)
        _ip("link", "add", self._host_side, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", self.netns)
        _ip("link", "set", self._host_side, "master", network.bridge, "up")
        _ip("addr", "add", f"{self.address}/24", "dev", inner, netns=self.netns)
        _ip("link", "set", inner, "up", netns=self.netns)
        self._inner = inner
        self.is_cut = False

    def argv(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def popen(self, argv: Sequence[str], **kwargs: object) -> subprocess.Popen:
        return subprocess.Popen(self.argv(argv), **kwargs)  # type: ignore[call-overload]

    def run(self, argv: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(argv), **kwargs)  # type: ignore[call-overload]

    def cut(self) -> None:
        """The cable pulled: the bridge's end goes down, packets to and from here vanish."""
        _ip("link", "set", self._host_side, "down")
        self.is_cut = True

    def restore(self) -> None:
        _ip("link", "set", self._host_side, "up")
        self.is_cut = False

    def limit(self, rate: str = "100mbit") -> None:
        """Shape both directions of this machine's link to ``rate`` (tc's token bucket)."""
        for dev, netns in ((self._host_side, None), (self._inner, self.netns)):
            argv = ["tc", *(["-n", netns] if netns else []), "qdisc", "replace", "dev", dev]
            argv += ["root", "tbf", "rate", rate, "burst", "64kb", "latency", "50ms"]
            subprocess.run(argv, check=True, capture_output=True)

    def unlimit(self) -> None:
        """The link at full speed again (no shaping in either direction)."""
        for dev, netns in ((self._host_side, None), (self._inner, self.netns)):
            argv = ["tc", *(["-n", netns] if netns else []), "qdisc", "del", "dev", dev, "root"]
            subprocess.run(argv, capture_output=True)  # (none there: nothing to do)

    def bytes_in(self) -> int:
        """Bytes this machine's link has carried to it (counted on the bridge's side)."""
        return self._counter("tx_bytes")

    def bytes_out(self) -> int:
        """Bytes this machine's link has carried from it."""
        return self._counter("rx_bytes")

    def _counter(self, name: str) -> int:
        return int(Path(f"/sys/class/net/{self._host_side}/statistics/{name}").read_text())

    def close(self) -> None:
        kill_namespace_processes(self.netns)
        _ip("netns", "del", self.netns, check=False)


class Network:
    def __init__(self) -> None:
        require()
        remove_stale()
        LOCKS.mkdir(exist_ok=True)
        self._lock_fd = -1
        for n in range(1, 250):
            fd = os.open(LOCKS / f"{n}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._lock_fd, self.number, self.prefix = fd, n, f"10.200.{n}"
            break
        else:
            raise RuntimeError("no free /24 in 10.200.0.0/16 for a test network")
        self.bridge = f"pb{os.getpid()}.{self.number}"
        self.here = f"{self.prefix}.254"
        self.machines: list[Machine] = []
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.here}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def machine(self, name: str) -> Machine:
        machine = Machine(self, name, len(self.machines) + 1)
        self.machines.append(machine)
        return machine

    def close(self) -> None:
        for machine in self.machines:
            machine.close()
        self.machines.clear()
        _ip("link", "del", self.bridge, check=False)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
