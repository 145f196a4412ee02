"""``xparl start --hosts``: a background cluster whose host agents are launched over SSH (three
real sshd on loopback), used by callers as any cluster, and ended by ``xparl stop``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import parl
from parl.errors import HostKeyError, SSHError
from parl.ssh.hosts import HostSpec, format_host
from tests.runtime.cluster import SECRET, free_port, port_open, xparl
from tests.runtime.conftest import wait_until
from tests.runtime.sshd import _free_port
from tests.runtime.test_ssh_launch import agent_status, specs

pytestmark = pytest.mark.ssh


@pytest.fixture
def home(tmp_path, monkeypatch):
    """The xparl user's home (state files, logs, the local agent's cache) and environment;
    this process (the caller) holds the same cluster secret."""
    folder = tmp_path / "home"
    folder.mkdir()
    env = dict(os.environ, HOME=str(folder), PARL_CLUSTER_SECRET=SECRET)
    env.pop("SSH_AUTH_SOCK", None)  # only the lab's key, never an agent's
    monkeypatch.setenv("PARL_CLUSTER_SECRET", SECRET)
    return folder, env


def write_hosts(tmp_path, hosts: list[HostSpec]) -> str:
    path = tmp_path / "hosts.txt"
    path.write_text("# the lab's hosts\n" + "\n".join(format_host(h) for h in hosts) + "\n")
    return str(path)


def daemons(port: int) -> list[psutil.Process]:
    """The master daemon of the cluster on ``port``, if it runs."""
    found = []
    for process in psutil.process_iter():
        try:
            line = process.cmdline()
            if "parl.ssh.daemon" in line and "master" in line and str(port) in line:
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_a_cluster_of_ssh_hosts_serves_callers_and_stops_everywhere(lab, project, tmp_path, home):
    """SSH hosts plus the local agent, listed by status; a caller's sub-folder module runs on
    them, its code shipped per caller by the cluster's deployment into each host's cache."""
    from pkg.helper import Where

    folder, env = home
    hosts = specs(lab, tmp_path)
    port = free_port()
    ssh = ("--ssh_config", lab.config, "--known_hosts", lab.known_hosts)
    hosts_file = write_hosts(tmp_path, hosts)
    out = xparl(env, "start", "--port", str(port), "--cpu_num", "1", "--hosts", hosts_file, *ssh)
    try:
        for spec in hosts:
            assert f"SSH host {spec.name}: host agent at {spec.host}:" in out.stdout
        status = xparl(env, "status").stdout
        assert "4 host(s), 0 of 4 slot(s) used, 4 free" in status, status
        for spec in hosts:
            assert f"SSH host {spec.name}): 0 used, 1 free of 1" in status
        (cluster,) = json.loads(xparl(env, "status", "--json").stdout)
        labelled = {h["label"]: h["address"] for h in cluster["hosts"] if "label" in h}
        assert sorted(labelled) == sorted(s.name for s in hosts)
        assert len(cluster["status"]["hosts"]) == 4

        parl.connect(f"127.0.0.1:{port}")
        actors = [Where() for _ in range(4)]
        places = [a.where() for a in actors]
        assert [a.twice(21) for a in actors] == [42] * 4
        # one actor per host: three in the SSH hosts' caches (their sessions), one here
        # (each in this caller's working folder, <cache>/jobs/<caller id>, a copy of the code)
        caches = sorted(os.path.basename(Path(p["cwd"]).parents[1]) for p in places)
        assert caches == ["cache", "cache-h1", "cache-h2", "cache-h3"]
        assert {Path(p["cwd"]).parent.name for p in places} == {"jobs"}
        assert sorted(str(p["lab"]) for p in places) == sorted(["None"] + [lab.tag] * 3)
        assert len({os.path.basename(p["cwd"]) for p in places}) == 1  # one caller
        # the project went to each SSH host once, through the cluster carrier's upload
        for address in labelled.values():
            assert agent_status(address, SECRET.encode())["uploads"] == 1
        del actors
        parl.disconnect()
    finally:
        parl.disconnect()
        stopped = xparl(env, "stop", "--port", str(port), check=False)
    assert "stopped the master" in stopped.stdout
    assert wait_until(lambda: not lab.remote_processes(), timeout=10)
    assert not daemons(port) and not port_open(port)


def test_a_failed_launch_exits_non_zero_with_parl_connects_error_and_leaves_nothing(
    lab, project, tmp_path, home
):
    folder, env = home
    hosts = specs(lab, tmp_path)
    dead = _free_port("127.0.0.3")
    hosts[1] = HostSpec("127.0.0.3", port=dead, identity=lab.client_key)
    unknown = tmp_path / "known_hosts"  # host 3's key is missing from it
    unknown.write_text("\n".join(open(lab.known_hosts).read().splitlines()[:2]) + "\n")
    with pytest.raises(SSHError) as caught:  # what parl.connect says of these hosts
        parl.connect(hosts=hosts, ssh=lab.options(known_hosts=(str(unknown),)))
    expected = str(caught.value)
    assert expected.startswith("2 hosts failed:")
    port = free_port()
    done = xparl(
        env,
        *("start", "--port", str(port), "--cpu_num", "1", "--hosts", write_hosts(tmp_path, hosts)),
        *("--ssh_config", lab.config, "--known_hosts", str(unknown)),
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("xparl start: the master did not start: 2 hosts failed:\n")
    for line in expected.splitlines()[1:]:  # every host's error, whole (in any order)
        assert line in done.stderr
    # nothing is left: no cluster, no daemon, no port, nothing on the hosts
    assert "no cluster of yours is running" in xparl(env, "status").stdout
    states = folder / ".parl" / "clusters"
    assert not states.exists() or not os.listdir(states)
    assert not daemons(port) and not port_open(port)
    assert not lab.remote_processes()
    # one failed host alone: its own error, the same as parl.connect's
    with pytest.raises(HostKeyError) as caught:
        parl.connect(hosts=[hosts[2]], ssh=lab.options(known_hosts=(str(unknown),)))
    done = xparl(
        env,
        *("start", "--port", str(port), "--cpu_num", "0"),
        *("--hosts", write_hosts(tmp_path, [hosts[2]]), "--known_hosts", str(unknown)),
        check=False,
    )
    assert done.returncode == 1
    assert f"xparl start: the master did not start: {caught.value} (log: " in done.stderr


def test_a_bad_hosts_file_fails_before_anything_starts(tmp_path, home):
    folder, env = home
    bad = tmp_path / "hosts.txt"
    bad.write_text("box cpus=4\nbox2 cpus=many\n")
    port = free_port()
    done = xparl(env, "start", "--port", str(port), "--hosts", str(bad), check=False)
    assert done.returncode == 1
    assert f"{bad}, line 2: cpus must be a positive integer, got 'many'" in done.stderr
    assert not daemons(port)
    done = xparl(env, "start", "--port", str(port), "--known_hosts", str(bad), check=False)
    assert "--wheels and --accept_unknown_host_keys go with --hosts" in done.stderr
    hosts = tmp_path / "good.txt"
    hosts.write_text("box cpus=1 install=venv\n")
    done = xparl(env, "start", "--port", str(port), "--hosts", str(hosts), "--wheels",
                 str(tmp_path / "none"), check=False)  # fmt: skip
    assert f"--wheels {tmp_path / 'none'}: no such folder" in done.stderr
    assert not daemons(port)


def test_a_tunnel_host_of_an_xparl_cluster_serves_a_caller_of_another_process(
    lab, project, tmp_path, home
):
    """tunnel=yes: the daemon holds the tunnel's local end; a caller (a separate process on
    this machine) reaches the host's actor through it."""
    folder, env = home
    host = dataclasses.replace(specs(lab, tmp_path)[1], tunnel=True)
    port = free_port()
    ssh = ("--ssh_config", lab.config, "--known_hosts", lab.known_hosts)
    hosts_file = write_hosts(tmp_path, [host])
    out = xparl(env, "start", "--port", str(port), "--cpu_num", "0", "--hosts", hosts_file, *ssh)
    try:
        assert f"SSH host {host.name}: host agent at 127.0.0.1:" in out.stdout
        (project / "caller.py").write_text(
            "import parl\nfrom pkg.helper import Where\n"
            f"parl.connect('127.0.0.1:{port}')\nprint(Where().where()['lab'], Where().twice(4))\n"
        )
        done = subprocess.run(
            [sys.executable, "caller.py"], cwd=project, env=env, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [lab.tag, "8"]
    finally:
        xparl(env, "stop", "--port", str(port), check=False)
    assert wait_until(lambda: not lab.remote_processes(), timeout=10)
