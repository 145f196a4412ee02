"""A cluster across machines, as the recipe of docs/guides/clusters.md builds it: a master, host agents and
callers in network namespaces of their own (:mod:`tests.runtime.netns`), each machine with its
own HOME and a copy of the master's secret file. An agent joins at an address the master and
callers reach, or is refused at once with the ``--host`` to pass; no caller is ever placed on
an agent it cannot reach; the commands print what the other machines need."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from parl.cluster.monitor import monitor_token
from tests.runtime.conftest import wait_until
from tests.runtime.netns import Machine, Network, _ip

pytestmark = pytest.mark.slow
PORT = 8010  # each machine has a network of its own: the recipe's port is free on all of them
PAGE_PORT = 8011
# the monitor page's data, as another machine reads it with the token `xparl start` printed
PAGE = """
import json, sys, urllib.request
ask = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
print(json.dumps(json.load(urllib.request.urlopen(ask, timeout=30))))
"""

# the caller's script: creates N actors, each says which machine it runs on (the address its
# machine reaches the master from: each machine of the lab has one of its own)
CALLER = """
import json, socket, sys
import parl

@parl.remote_class
class Where:
    def address(self, toward):
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.connect((toward, 9))  # UDP: nothing is sent, the route picks the address
        return probe.getsockname()[0]

master, count = sys.argv[1], int(sys.argv[2])
parl.connect(master, slot_timeout=float(sys.argv[3]))
try:
    actors = [Where() for _ in range(count)]
    print(json.dumps(sorted(a.address(master.rsplit(":", 1)[0]) for a in actors)))
except parl.ClusterError as exc:
    print(json.dumps({"error": str(exc)}))
"""


@dataclass
class Host:
    """A machine of the lab and its user's HOME."""

    machine: Machine
    home: Path

    @property
    def address(self) -> str:
        return self.machine.address

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PARL_CLUSTER_SECRET"}
        return dict(env, HOME=str(self.home))

    def xparl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``xparl ARGS`` on this machine, as its user types it."""
        argv = [sys.executable, "-m", "parl.cluster.cli", *args]
        done = self.machine.run(argv, env=self.env, capture_output=True, text=True, timeout=90)
        if check and done.returncode != 0:
            raise AssertionError(f"xparl {' '.join(args)} failed: {done.stdout}{done.stderr}")
        return done

    def take_secret(self, master: Host) -> None:
        """Copy the master's secret file here, mode 0600 (the recipe's step)."""
        folder = self.home / ".parl"
        folder.mkdir(mode=0o700, exist_ok=True)
        target = folder / "cluster_secret"
        shutil.copyfile(master.home / ".parl" / "cluster_secret", target)
        target.chmod(0o600)

    def call(self, script: Path, master: str, count: int, wait: float = 5.0) -> list[str] | str:
        """Run the caller script here: the machine address of each of ``count`` actors, or
        the ClusterError's message."""
        done = self.machine.run(
            [sys.executable, str(script), master, str(count), str(wait)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        said = json.loads(done.stdout.strip().splitlines()[-1])
        return said["error"] if isinstance(said, dict) else said

    def daemons(self) -> list[int]:
        """The pids of the processes left in this machine's namespace."""
        return [int(p) for p in _ip("netns", "pids", self.machine.netns, check=False).split()]


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[dict[str, Host]]:
    """Four machines: ``master``, ``a``, ``b`` (agents), ``caller``; at the end, every
    machine's clusters are stopped with ``xparl stop`` and no process may be left."""
    with Network() as net:
        hosts = {}
        for name in ("master", "a", "b", "caller"):
            home = tmp_path / f"home-{name}"
            home.mkdir()
            hosts[name] = Host(net.machine(name), home)
        try:
            yield hosts
        finally:
            stopping = [  # on every machine that runs something, all at once
                host.machine.popen(
                    [sys.executable, "-m", "parl.cluster.cli", "stop"],
                    env=host.env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for host in hosts.values()
                if host.daemons()
            ]
            for process in stopping:
                process.wait(90)
            for host in hosts.values():
                left = wait_until(lambda h=host: not h.daemons(), timeout=20)
                assert left, f"processes left on {host.machine.name}: {host.daemons()}"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    """The caller's project: a folder with its script (deployed to the agents)."""
    folder = tmp_path / "project"
    folder.mkdir()
    path = folder / "where.py"
    path.write_text(CALLER)
    return path


def _start_everywhere(machines: dict[str, Host]) -> str:
    """The recipe of docs/guides/clusters.md: the master on every address, the secret copied, two agents
    joined as written; returns the master's address."""
    master = machines["master"]
    out = master.xparl(
        *("start", "--port", str(PORT), "--host", "0.0.0.0", "--cpu_num", "1"),
        *("--monitor_port", str(PAGE_PORT)),
    ).stdout
    address = f"{master.address}:{PORT}"
    assert f"monitor:         http://{master.address}:{PAGE_PORT}/" in out
    assert f"add a machine:   xparl connect --address {address} [--cpu_num N]" in out
    secret = master.home / ".parl" / "cluster_secret"
    assert f"copy {secret} to ~/.parl/cluster_secret there, mode 0600" in out
    assert f"parl.connect({address!r})" in out
    for name in ("a", "b", "caller"):
        machines[name].take_secret(master)
    with ThreadPoolExecutor(2) as pool:  # the two machines join at once
        joins = {
            name: pool.submit(
                machines[name].xparl, "connect", "--address", address, "--cpu_num", "1"
            )
            for name in ("a", "b")
        }
    for name, join in joins.items():
        joined = join.result().stdout
        assert joined.startswith(f"host agent at {machines[name].address}:"), joined
    return address


def test_the_readme_recipe_runs_actors_on_every_machine(machines, script):
    address = _start_everywhere(machines)
    status = machines["master"].xparl("status").stdout
    for name in ("a", "b"):
        assert f"  {machines[name].address}:" in status, status
    assert "3 host(s), 0 of 3 slot(s) used" in status
    everywhere = sorted(machines[name].address for name in ("master", "a", "b"))
    assert machines["caller"].call(script, address, 3) == everywhere  # a slot on each machine
    assert machines["master"].call(script, address, 3) == everywhere  # also from the master's
    # the monitor page, from another machine, shows every host
    started = machines["master"].xparl("status", "--json").stdout
    token = monitor_token(
        (machines["master"].home / ".parl" / "cluster_secret").read_bytes().strip()
    )
    url = f"http://{machines['master'].address}:{PAGE_PORT}/api/status"
    page = machines["caller"].machine.run(
        [sys.executable, "-c", PAGE, url, token], capture_output=True, text=True, timeout=60
    )
    assert page.returncode == 0, page.stderr
    assert len(json.loads(page.stdout)["hosts"]) == 3 == len(json.loads(started)[0]["hosts"])
    # the agents' own status names them and their master
    assert f"in the cluster at {address}" in machines["a"].xparl("status").stdout
    for name in ("a", "b", "master"):
        machines[name].xparl("stop")
        assert wait_until(lambda n=name: not machines[n].daemons(), timeout=20), name


def test_an_agent_on_loopback_of_another_machine_is_refused_naming_the_host_to_pass(machines):
    address = _start_everywhere(machines)
    agent = machines["a"]
    agent.xparl("stop")
    start = time.monotonic()
    refused = agent.xparl("connect", "--address", address, "--host", "127.0.0.1", check=False)
    assert time.monotonic() - start < 30  # refused at once, not after a hang
    assert refused.returncode == 1
    assert "listens on 127.0.0.1" in refused.stderr
    fix = f"xparl connect --address {address} --host {agent.address}"
    assert fix in refused.stderr, refused.stderr
    assert not agent.daemons()  # nothing left running for it
    status = machines["master"].xparl("status").stdout
    assert f"  {agent.address}:" not in status and "2 host(s)" in status
    agent.xparl(*fix.split()[1:])  # the command it names joins
    assert f"  {agent.address}:" in machines["master"].xparl("status").stdout


def test_no_caller_is_placed_on_an_agent_it_cannot_reach(machines, script):
    address = _start_everywhere(machines)
    master = machines["master"]
    # an agent of the master's machine that joined over loopback: it listens there only
    local = master.xparl("connect", "--address", f"127.0.0.1:{PORT}", "--cpu_num", "2").stdout
    assert local.startswith("host agent at 127.0.0.1:"), local
    assert "4 host(s), 0 of 5 slot(s) used" in master.xparl("status").stdout
    reachable = sorted(machines[name].address for name in ("master", "a", "b"))
    assert machines["caller"].call(script, address, 3) == reachable
    said = machines["caller"].call(script, address, 4, wait=1.0)  # a 4th slot only on loopback
    assert isinstance(said, str) and "no free slot in the cluster" in said
    assert "3 slot(s)" in said and "Not counted: 1 host agent(s) on the master's loopback" in said
    # callers of the master's machine reach it: 5 slots
    assert len(master.call(script, f"127.0.0.1:{PORT}", 5)) == 5


def test_a_master_on_loopback_says_other_machines_cannot_join_and_how(machines):
    master, agent = machines["master"], machines["a"]
    out = master.xparl("start", "--port", str(PORT), "--cpu_num", "1").stdout
    assert "other machines:  cannot join, the master listens on 127.0.0.1 only" in out
    assert f"xparl start --port {PORT} --host 0.0.0.0" in out
    agent.take_secret(master)
    refused = agent.xparl("connect", "--address", f"{master.address}:{PORT}", check=False)
    assert refused.returncode == 1
    assert "Connection refused" in refused.stderr
    assert f"start it with `xparl start --port {PORT} --host 0.0.0.0`" in refused.stderr
    assert not agent.daemons()


def test_an_agent_at_an_address_the_master_cannot_reach_is_refused(machines):
    address = _start_everywhere(machines)
    agent = machines["a"]
    agent.xparl("stop")
    # an address of this machine that no other machine has a route to (TEST-NET-2)
    _ip("addr", "add", "198.51.100.1/32", "dev", "lo", netns=agent.machine.netns)
    start = time.monotonic()
    refused = agent.xparl("connect", "--address", address, "--host", "198.51.100.1", check=False)
    assert time.monotonic() - start < 30  # the master's try has a short deadline
    assert refused.returncode == 1
    assert "the master cannot reach this host agent at 198.51.100.1:" in refused.stderr
    assert f"the master sees it as {agent.address}" in refused.stderr, refused.stderr
    assert not agent.daemons()
    status = machines["master"].xparl("status").stdout
    assert "198.51.100.1" not in status and "2 host(s)" in status


def test_a_master_on_one_address_of_its_machine_serves_its_slots_there(machines, script):
    master, agent = machines["master"], machines["a"]
    address = f"{master.address}:{PORT}"
    out = master.xparl("start", "--port", str(PORT), "--host", master.address, "--cpu_num", "1")
    assert f"add a machine:   xparl connect --address {address} [--cpu_num N]" in out.stdout
    agent.take_secret(master)
    machines["caller"].take_secret(master)
    agent.xparl("connect", "--address", address, "--cpu_num", "1")
    status = master.xparl("status").stdout
    assert f"  {master.address}:" in status and f"  {agent.address}:" in status, status
    assert machines["caller"].call(script, address, 2) == sorted([master.address, agent.address])


def test_an_agent_of_the_masters_machine_on_every_address_serves_other_machines(machines, script):
    address = _start_everywhere(machines)
    master = machines["master"]
    # joined over loopback, but listening on every address (as the loopback note advises)
    joined = master.xparl(
        "connect", "--address", f"127.0.0.1:{PORT}", "--host", "0.0.0.0", "--cpu_num", "2"
    ).stdout
    assert "listens on every address" in joined and "listens on loopback" not in joined, joined
    # master 1 + a 1 + b 1 + this agent 2: every slot is placed for a caller of another machine
    said = machines["caller"].call(script, address, 5, wait=1.0)
    assert isinstance(said, list), said
    assert said.count(master.address) == 3, said


def test_status_names_an_agent_of_another_cluster_on_the_port_of_a_cluster_here(machines):
    address = _start_everywhere(machines)
    agent = machines["a"]
    # a cluster of this machine's own, on the README's port too
    agent.xparl("start", "--port", str(PORT), "--cpu_num", "1")
    status = agent.xparl("status").stdout
    assert f"cluster 127.0.0.1:{PORT} (pid" in status, status
    assert "  127.0.0.1:" in status  # its own slots
    assert f"host agent at {agent.address}:" in status, status
    assert f"in the cluster at {address}" in status, status
    # stopping the cluster here leaves the other cluster's agent, until asked again
    stopped = agent.xparl("stop", "--port", str(PORT)).stdout
    assert f"stopped the master at 127.0.0.1:{PORT}" in stopped, stopped
    assert f"left running: the host agent at {agent.address}:" in stopped, stopped
    assert f"  {agent.address}:" in machines["master"].xparl("status").stdout
    stopped = agent.xparl("stop", "--port", str(PORT)).stdout
    assert f"stopped the agent at {agent.address}:" in stopped, stopped
