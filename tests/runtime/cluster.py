"""A real cluster on loopback for the tests: a master (no local slots) and two host agents
with 2 and 3 slots, each its own process, started and stopped with the ``xparl`` command."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psutil

from tests.runtime.conftest import wait_until

SECRET = "test-secret-0123456789abcdef0123456789"


@contextmanager
def secret_in_environment() -> Iterator[None]:
    """``PARL_CLUSTER_SECRET`` set to the test clusters' secret, as before afterwards."""
    previous = os.environ.get("PARL_CLUSTER_SECRET")
    os.environ["PARL_CLUSTER_SECRET"] = SECRET
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PARL_CLUSTER_SECRET", None)
        else:
            os.environ["PARL_CLUSTER_SECRET"] = previous


AGENT_SLOTS = (2, 3)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def xparl(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "parl.ssh.xparl", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"xparl {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Cluster:
    home: str
    port: int
    env: dict[str, str]
    agent_ports: list[int] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pids(self, role: str | None = None) -> list[int]:
        """The master's and host agents' pids (only those of ``role``: "master" or "agent"),
        from their state files."""
        folder = os.path.join(self.home, ".parl", "clusters")
        pids = []
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            with open(os.path.join(folder, name)) as file:
                found = json.load(file)
            if role is None or found["role"] == role:
                pids.append(found["pid"])
        return pids

    def processes(self) -> list[psutil.Process]:
        """Every process of the cluster: its daemons and all their descendants."""
        found = []
        for pid in self.pids():
            try:
                daemon = psutil.Process(pid)
                found += [daemon, *daemon.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        return found

    def status(self) -> dict:
        """The master's view: hosts with slots and used counts."""
        from parl.cluster import control

        sock = control.dial(("127.0.0.1", self.port), SECRET.encode(), "test master")
        try:
            return control.request(sock, {"op": "status"}, "test master", 10.0)
        finally:
            sock.close()

    def used(self) -> int:
        return sum(h["used"] for h in self.status()["hosts"])

    def agents(self) -> list[dict]:
        """Each host agent's own status: slots, actors (with their last lines), uploads."""
        from parl.cluster import control

        found = []
        for port in self.agent_ports:
            sock = control.dial(("127.0.0.1", port), SECRET.encode(), "test agent")
            try:
                found.append(control.request(sock, {"op": "host"}, "test agent", 10.0))
            finally:
                sock.close()
        return found

    def uploads(self) -> int:
        return sum(agent["uploads"] for agent in self.agents())

    def workers(self) -> list[psutil.Process]:
        """Worker processes: the children of the host agents' fork servers."""
        return [p for p in self.processes() if _name(p.parent()) == "forkserver"]


def _name(process: psutil.Process | None) -> str:
    try:
        return (
            "forkserver"
            if process and "parl.workers.forkserver" in " ".join(process.cmdline())
            else ""
        )
    except psutil.Error:
        return ""


def start(
    home: str,
    agent_slots: tuple[int, ...] = AGENT_SLOTS,
    agent_env: dict[str, str] | None = None,
    master_args: tuple[str, ...] = (),
    agent_args: tuple[str, ...] = (),
    monitor_port: int = 0,
) -> Cluster:
    """Each host agent has a code cache of its own (``home/cache-<i>``), as on two machines;
    ``agent_env``: extra environment of the host agents (test hooks). ``master_args`` (e.g.
    ``--gpu_cluster --gpu 0,1``) give the master a local host agent; ``monitor_port``: the
    master serves its monitor page there."""
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, HOME=home, PARL_CLUSTER_SECRET=SECRET)
    cluster = Cluster(home, free_port(), env)
    page = ("--monitor_port", str(monitor_port)) if monitor_port else ()
    xparl(env, "start", "--port", str(cluster.port), "--cpu_num", "0", *master_args, *page)
    try:
        for i, slots in enumerate(agent_slots):
            out = xparl(
                dict(env, **(agent_env or {})),
                *("connect", "--address", cluster.address, "--cpu_num", str(slots)),
                *("--cache_dir", os.path.join(home, f"cache-{i}")),
                *agent_args,
            )
            cluster.agent_ports.append(int(out.stdout.split()[3].rsplit(":", 1)[1]))
        hosts = len(agent_slots) + bool(master_args)
        assert wait_until(lambda: len(cluster.status()["hosts"]) == hosts, timeout=10)
    except BaseException:
        stop(cluster)
        raise
    return cluster


def stop(cluster: Cluster) -> None:
    """Stop the cluster; fails if a process or a listening port is left behind."""
    processes = cluster.processes()
    xparl(cluster.env, "stop", "--port", str(cluster.port), check=False)  # (some may be gone)
    left = wait_until(lambda: not [p for p in processes if _running(p)], timeout=60)
    assert left, f"cluster processes left behind: {[p for p in processes if _running(p)]}"
    for port in (cluster.port, *cluster.agent_ports):
        assert not port_open(port), f"port {port} still listening"


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
