"""parl.connect(hosts=...) against three real sshd on loopback: launch, deployment, cache,
aliases, relative paths of a hosts file, a cache folder others can write, and the end of every
remote process."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

import parl
from parl.cluster import control
from parl.deploy.packer import pack_parl
from parl.errors import (
    RemoteEnvironmentError,
    SSHAuthenticationError,
    SSHError,
    VersionMismatchError,
)
from parl.remote import context
from parl.ssh import remote
from parl.ssh.hosts import HostSpec
from tests.runtime.conftest import wait_until
from tests.runtime.sshd import _free_port

pytestmark = pytest.mark.ssh


def specs(lab, tmp_path, cpus=1, **settings):
    return [
        lab.spec(
            i,
            cpus=cpus,
            python=sys.executable,
            workdir=str(tmp_path / f"cache-h{i + 1}"),
            **settings,
        )
        for i in range(3)
    ]


def agent_status(address: str, secret: bytes) -> dict:
    sock = control.dial(control.parse_address(address), secret, "a host agent")
    try:
        return control.request(sock, {"op": "host"}, "a host agent", 10.0)
    finally:
        sock.close()


def carrier():
    return context.current().carrier


def test_actors_spread_over_three_hosts_run_deployed_code(lab, project, tmp_path, capfd):
    from pkg.helper import Where

    parl.connect(hosts=specs(lab, tmp_path), ssh=lab.options(), linger=0)
    try:
        launch = carrier().launch
        reports = carrier().reports
        assert [r.cpus for r in reports] == [1, 1, 1]
        assert all(r.uploaded > 0 for r in reports)  # first launch: both archives sent
        actors = [Where() for _ in range(3)]
        places = [a.where() for a in actors]
        assert [a.twice(21) for a in actors] == [42, 42, 42]
        # one actor per host (each host has one slot): each runs in its own host's cache,
        # in the project's folder there, with the uploaded parl, under sshd's session
        homes = sorted(p["cwd"].split(os.sep + "cache-")[1][:2] for p in places)
        assert homes == ["h1", "h2", "h3"]
        for p in places:
            assert p["parl"].startswith(str(tmp_path / "cache-"))
            assert p["lab"] == lab.tag
        # the secret is on no command line and in no environment of what runs over SSH
        secret = launch.secret.decode()
        for process in lab.remote_processes():
            try:
                assert secret not in " ".join(process.cmdline())
                assert secret not in " ".join(process.environ().values())
            except psutil.NoSuchProcess:
                pass
        # the cluster carrier's own deployment found the code where SFTP put it: no upload
        for report in reports:
            assert agent_status(report.agent, launch.secret)["uploads"] == 0
        err = capfd.readouterr().err
        for spec in specs(lab, tmp_path):
            assert f"parl ssh: {spec.name}: host agent at {spec.host}:" in err
    finally:
        parl.disconnect()
    assert wait_until(lambda: not lab.remote_processes(), timeout=10)


def test_a_second_launch_uploads_nothing(lab, project, tmp_path):
    from pkg.helper import Where

    for launch in range(2):
        parl.connect(hosts=specs(lab, tmp_path), ssh=lab.options(), linger=0)
        try:
            uploaded = [r.uploaded for r in carrier().reports]
            assert Where().twice(2) == 4
        finally:
            parl.disconnect()
        assert (launch == 0) == all(n > 0 for n in uploaded), uploaded
    assert uploaded == [0, 0, 0]


def test_hosts_file_with_ssh_config_aliases(lab, project, tmp_path):
    from pkg.helper import Where

    hosts = tmp_path / "hosts.txt"
    hosts.write_text(
        "# aliases of the lab's ssh config\n"
        f"h2 cpus=2 python={sys.executable} workdir={tmp_path / 'cache-h2'}\n"
        f"hop3 cpus=1 python={sys.executable} workdir={tmp_path / 'cache-h3'}  # via h1\n"
    )
    parl.connect(str(hosts), ssh=lab.options(), linger=0)
    try:
        assert [r.agent.split(":")[0] for r in carrier().reports] == ["127.0.0.3", "127.0.0.4"]
        actors = [Where() for _ in range(3)]
        homes = sorted(a.where()["cwd"].split(os.sep + "cache-")[1][:2] for a in actors)
        assert homes == ["h2", "h2", "h3"]
    finally:
        parl.disconnect()


# -- failures, each named ------------------------------------------------------------------------


def test_no_such_python_names_the_host(lab, project, tmp_path):
    hosts = specs(lab, tmp_path)
    hosts[1] = lab.spec(1, python="/nonexistent/python3", workdir=str(tmp_path / "c2"))
    with pytest.raises(RemoteEnvironmentError) as caught:
        parl.connect(hosts=hosts, ssh=lab.options())
    message = str(caught.value)
    assert f"host {hosts[1].name}: no such python '/nonexistent/python3'" in message
    assert "set python=/path/to/python3" in message


def test_a_python_without_the_packages_names_what_is_missing(lab, project, tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    hosts = [lab.spec(0, python=python, workdir=str(tmp_path / "c1"))]
    with pytest.raises(RemoteEnvironmentError) as caught:
        parl.connect(hosts=hosts, ssh=lab.options())
    message = str(caught.value)
    assert f"on host {hosts[0].name} lacks cloudpickle, numpy, psutil, torch" in message
    assert f"{python} -m pip install" in message and "numpy==" in message


def test_other_versions_on_a_host_show_both_sides():
    mine = {"numpy": "2.1.0", "cloudpickle": "3.0.0", "torch": "2.13.0", "psutil": "5.9.0"}
    probe = remote.Probe(
        python="3.9.7",
        executable="/opt/py/bin/python3",
        base="/c",
        have=(),
        cpus=4,
        packages=dict(mine, numpy="1.26.4"),
    )
    with pytest.raises(VersionMismatchError) as caught:
        remote.check_versions("alice@box", probe, mine, "python3")
    message = str(caught.value)
    assert message.startswith("/opt/py/bin/python3 on host alice@box does not match this machine")
    assert f"Python {platform.python_version()} here, 3.9.7 there" in message
    assert "numpy 2.1.0 here, 1.26.4 there" in message and "torch" not in message


def test_failed_hosts_are_all_named_and_the_good_ones_left_clean(lab, project, tmp_path):
    hosts = specs(lab, tmp_path)
    dead = _free_port("127.0.0.3")
    hosts[1] = HostSpec("127.0.0.3", port=dead, identity=lab.client_key)
    unknown = tmp_path / "known_hosts"  # host 3's key is missing from it
    unknown.write_text("\n".join(open(lab.known_hosts).read().splitlines()[:2]) + "\n")
    with pytest.raises(SSHError) as caught:
        parl.connect(hosts=hosts, ssh=lab.options(known_hosts=(str(unknown),)))
    message = str(caught.value)
    assert message.startswith("2 hosts failed:")
    assert f"host 127.0.0.3:{dead} is unreachable" in message
    assert f"[127.0.0.4]:{lab.hosts[2].port}" in message and "is unknown" in message
    assert not lab.remote_processes()  # host 1 was reached, and left as it was
    # the same hosts with the documented opt-in for unknown keys (and without the dead one)
    parl.connect(
        hosts=[hosts[0], hosts[2]],
        ssh=lab.options(known_hosts=(str(unknown),)),
        accept_unknown_host_keys=True,
    )
    parl.disconnect()
    assert "127.0.0.4" not in unknown.read_text()  # trusted for that run, never written


def test_a_refused_login_names_the_host(lab, project, tmp_path):
    stranger = str(tmp_path / "stranger")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger], check=True)
    with pytest.raises(SSHAuthenticationError, match="host h2: authentication refused"):
        parl.connect(hosts=["h2 identity=" + stranger], ssh=lab.options())


# -- the end of remote processes -------------------------------------------------------------------

CALLER = """
import json, os, sys
import parl
from parl.ssh.client import SSHOptions
from parl.ssh.hosts import HostSpec
from pkg.helper import Where

setup = json.loads(sys.argv[1])
hosts = [HostSpec(**h) for h in setup["hosts"]]
options = SSHOptions(config=None, known_hosts=(setup["known_hosts"],), allow_agent=False)
parl.connect(hosts=hosts, ssh=options)
actors = [Where() for _ in range(3)]
print(json.dumps([a.where()["pid"] for a in actors]), flush=True)
if setup["end"] == "exception":
    raise RuntimeError("the caller fails")
if setup["end"] == "fork":
    child = os.fork()
    if child == 0:  # holds copies of every socket of its parent
        sys.stdin.read()
        os._exit(0)
    print(child, flush=True)
if setup["end"] in ("wait", "fork"):
    sys.stdin.read()
"""


def run_caller(lab, project, tmp_path, end: str) -> subprocess.Popen:
    (project / "caller.py").write_text(CALLER)
    setup = {
        "hosts": [dataclasses.asdict(s) for s in specs(lab, tmp_path)],
        "known_hosts": lab.known_hosts,
        "end": end,
    }
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.Popen(
        [sys.executable, str(project / "caller.py"), json.dumps(setup)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=root),
        text=True,
        cwd=str(project),
    )


@pytest.mark.parametrize("end", ["exit", "exception", "sigkill", "fork"])
def test_every_remote_process_ends_with_the_caller(lab, project, tmp_path, end):
    """Leaving, failing, SIGKILL; and SIGKILL while a forked child lives on (it must not keep
    the SSH sessions open: it closes its copies of their sockets)."""
    caller = run_caller(lab, project, tmp_path, "wait" if end == "sigkill" else end)
    child = None
    try:
        line = caller.stdout.readline()
        assert line, caller.stderr.read()
        workers = json.loads(line)
        assert len(workers) == 3
        if end in ("sigkill", "fork"):  # (a caller that exits may be gone, and its workers)
            assert all(psutil.pid_exists(p) for p in workers)
            assert lab.remote_processes()
        if end == "fork":
            child = int(caller.stdout.readline())
        if end in ("sigkill", "fork"):
            caller.kill()
        caller.wait(60)
        if child is not None:
            assert psutil.pid_exists(child)
        assert wait_until(lambda: not lab.remote_processes(), timeout=10), [
            " ".join(p.cmdline()) for p in lab.remote_processes()
        ]
        assert not any(psutil.pid_exists(p) for p in workers)
        if end == "exception":
            assert "RuntimeError: the caller fails" in caller.stderr.read()
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
            wait_until(lambda: not psutil.pid_exists(child), timeout=5)
        caller.kill()
        caller.wait()
        for stream in (caller.stdin, caller.stdout, caller.stderr):
            stream.close()


def test_a_lost_host_fails_its_actors_calls_within_5_s(lab, project, tmp_path):
    from pkg.helper import Where

    parl.connect(hosts=specs(lab, tmp_path)[:1], ssh=lab.options(), linger=0)
    try:
        actor = Where()
        assert actor.twice(1) == 2
        (agent,) = [p for p in lab.remote_processes() if "parl.cluster.daemon" in p.cmdline()]
        agent.kill()

        def calls_fail() -> bool:
            try:
                actor.twice(1)
            except parl.ActorDiedError:
                return True
            return False

        assert wait_until(calls_fail, timeout=5)
    finally:
        parl.disconnect()


def test_a_shared_array_is_refused_on_ssh_hosts_rather_than_copied(lab, project, tmp_path):
    """A parl.shm array cannot reach an actor on a host (a copy there would leave the
    shared-memory guide's rollout buffer zeros): it is refused, both ways, with what to do; the actor stays
    usable."""
    from pkg.helper import Where

    parl.connect(hosts=specs(lab, tmp_path)[:1], ssh=lab.options(), linger=0)
    try:
        actor = Where()
        buf = parl.shm.zeros(4000, np.float64)
        with pytest.raises(
            parl.SharedHandleError,
            match=r"^argument 'a' of Where.echo\(\) is or holds a parl.shm array: .*np.array\(a\)",
        ):
            actor.echo(buf)
        assert np.array_equal(actor.echo(np.array(buf) + 1), np.ones(4000))  # a copy to read
        with pytest.raises(
            parl.SharedHandleError, match=r"^the return value of shared\(\) is or holds a parl"
        ):
            actor.shared(3)
        assert actor.twice(2) == 4
    finally:
        parl.disconnect()


def test_a_tunnel_carries_calls_through_the_ssh_connection(lab, project, tmp_path):
    from pkg.helper import Where

    hosts = specs(lab, tmp_path)[:2]
    hosts[1] = dataclasses.replace(hosts[1], tunnel=True)
    parl.connect(hosts=hosts, ssh=lab.options(), linger=0)
    try:
        direct, tunnelled = carrier().reports
        assert direct.agent.startswith("127.0.0.2:") and "tunnel" not in direct.agent
        # the tunnelled agent listens on the host's loopback; this process reaches it only
        # through its local end of the tunnel
        listening, forward = tunnelled.agent.split(" (tunnel from ")
        assert listening.startswith("127.0.0.1:")
        agent_port = int(listening.split(":")[1])
        actors = [Where(), Where()]
        homes = sorted(a.where()["cwd"].split(os.sep + "cache-")[1][:2] for a in actors)
        assert homes == ["h1", "h2"]
        big = np.arange(3 << 20, dtype=np.int64)  # 24 MiB: many SSH packets each way
        for actor in actors:
            assert np.array_equal(actor.echo(big), big)
        mine = psutil.Process().net_connections(kind="tcp")
        assert not [c for c in mine if c.raddr and c.raddr.port == agent_port]
        assert [
            c for c in mine if c.raddr and c.raddr.port == int(forward.rstrip(")").split(":")[1])
        ]
    finally:
        parl.disconnect()


def test_a_host_refusing_port_forwards_cannot_tunnel(lab, project, tmp_path):
    host = dataclasses.replace(specs(lab, tmp_path)[2], tunnel=True)  # h3: PermitListen none
    with pytest.raises(SSHError, match=f"host {host.name} refuses to forward a port back"):
        parl.connect(hosts=[host], ssh=lab.options())


def test_a_launched_cluster_serves_its_monitor_page(lab, project, tmp_path):
    """parl.connect(hosts=..., monitor_port=P): the master in this process serves the page of
    the SSH-launched hosts, with their actors and what they printed."""
    import urllib.request

    from pkg.helper import Where

    port = _free_port("127.0.0.1")
    parl.connect(hosts=specs(lab, tmp_path), ssh=lab.options(), linger=0, monitor_port=port)
    try:
        assert carrier().launch.monitor_url == f"http://127.0.0.1:{port}/"
        actors = [Where() for _ in range(3)]
        pids = {a.where()["pid"] for a in actors}

        def status():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=10) as r:
                return json.loads(r.read())

        def listed():
            found = status()
            return (
                len(found["hosts"]) == 3
                and {a["pid"] for c in found["clients"] for a in c["actors"] if a["memory"]} == pids
            )

        assert wait_until(listed, timeout=15)
        assert status()["mode"] == "cluster"
        del actors
    finally:
        parl.disconnect()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=5)
    assert wait_until(lambda: not lab.remote_processes(), timeout=10)


def test_monitor_port_needs_hosts():
    with pytest.raises(ValueError, match="parl.monitor()"):
        parl.connect(monitor_port=8080)


def test_a_host_that_answers_no_keepalive_is_lost_and_its_tunnelled_calls_fail(
    lab, project, tmp_path
):
    """ServerAliveInterval 1, ServerAliveCountMax 2 for h2: its sshd is frozen (SIGSTOP), its
    keepalives go unanswered, the host counts as lost: its SSH connection closes, and calls
    on its actor (through the tunnel) raise ActorDiedError."""
    from pkg.helper import Where

    config = tmp_path / "config"
    config.write_text(
        open(lab.config).read() + "Host 127.0.0.3\n  ServerAliveInterval 1\n"
        "  ServerAliveCountMax 2\n"
    )
    host = dataclasses.replace(specs(lab, tmp_path)[1], tunnel=True)
    parl.connect(hosts=[host], ssh=lab.options(config=str(config)), linger=0)
    frozen: list[psutil.Process] = []
    try:
        actor = Where()
        assert actor.twice(1) == 2
        listener = psutil.Process(lab.hosts[1].process.pid)
        frozen = [p for p in listener.children(recursive=True) if p.name() == "sshd"]
        assert frozen  # the session's sshd processes
        for process in frozen:
            process.suspend()

        def calls_fail() -> bool:
            try:
                actor.twice(1)
            except parl.ActorDiedError:
                return True
            return False

        assert wait_until(calls_fail, timeout=10)
        (conn,) = [h.conn for h in carrier().launch._hosts]
        assert conn.keepalive.lost == (
            f"host {host.name} answered no SSH keepalive for 2 s (ServerAliveInterval 1, "
            "ServerAliveCountMax 2): the host counts as lost"
        )
        assert not conn.transport.is_active()
    finally:
        for process in frozen:
            process.resume()
        parl.disconnect()


# -- where code runs on a host: relative paths, a cache folder others can write ----------------


def _login_dir() -> str:
    """Where an SSH session starts (the user's home in the passwd file, not the lab's $HOME):
    relative paths of a hosts file are relative to it."""
    return pwd.getpwuid(os.geteuid()).pw_dir


@pytest.mark.ssh
def test_a_relative_workdir_runs_the_deployed_code(lab, project, tmp_path):
    """``workdir=scratch/parl`` (relative to the login folder): the probe created it, but the
    agent started after ``cd scratch/parl/<digest>`` with ``PYTHONPATH=scratch/parl/...``,
    relative again: the actors ran the host's installed parl (or none: 'No module named
    parl') in a folder nested in itself. Expected: the deployed parl, from the cache folder."""
    from pkg.helper import Where

    cache = tmp_path / "cache-rel"
    relative = os.path.relpath(cache, _login_dir())
    spec = lab.spec(0, cpus=1, python=sys.executable, workdir=relative)
    parl.connect(hosts=[spec], ssh=lab.options(), linger=0)
    try:
        where = Where().where()
        assert where["parl"].startswith(str(cache) + os.sep)
        assert where["cwd"].startswith(str(cache) + os.sep)
        assert where["cwd"].count(os.path.basename(cache)) == 1
    finally:
        parl.disconnect()


@pytest.mark.ssh
def test_a_relative_python_starts_the_agent(lab, project, tmp_path):
    """``python=venv/bin/python3`` (relative to the login folder) passed the probe, then the
    agent failed: 'the host agent did not start: bash: .../<digest>/venv/bin/python3: No such
    file or directory' (it runs after a ``cd``). Expected: the probed interpreter runs."""
    from pkg.helper import Where

    python = os.path.relpath(sys.executable, _login_dir())
    spec = lab.spec(0, cpus=1, python=python, workdir=str(tmp_path / "cache"))
    parl.connect(hosts=[spec], ssh=lab.options(), linger=0)
    try:
        assert Where().twice(2) == 4
    finally:
        parl.disconnect()


@pytest.mark.ssh
@pytest.mark.parametrize("owner", ["others", "another-user"])
def test_a_cache_folder_others_can_write_is_refused(lab, project, tmp_path, owner):
    """``workdir=/tmp/parl`` on a machine shared with other users: anyone could create
    ``/tmp/parl/<digest of this parl>`` first (the digest is predictable), and the launch
    found it 'in the cache', uploaded nothing and ran that code as the launching user.
    Expected: a cache folder writable by others (or owned by another user) is refused,
    naming the host and the folder, before anything in it runs."""
    shared = tmp_path / "shared"
    shared.mkdir()
    planted = shared / pack_parl().digest / "parl"
    shutil.copytree(os.path.dirname(parl.__file__), planted)
    marker = tmp_path / "planted-code-ran"
    with open(planted / "__init__.py", "a") as file:
        file.write(f"\nopen({str(marker)!r}, 'w').write('ran')\n")
    if owner == "others":
        os.chmod(shared, 0o1777)
    else:
        os.chown(shared, 65534, 65534)  # nobody
    spec = lab.spec(0, cpus=1, python=sys.executable, workdir=str(shared))
    try:
        with pytest.raises(RemoteEnvironmentError) as caught:
            parl.connect(hosts=[spec], ssh=lab.options(), linger=0)
    finally:
        context.disconnect()
    message = str(caught.value)
    assert f"host {spec.name}: the cache folder {shared} " in message
    assert "other users" in message or "another user" in message
    assert not marker.exists()


def test_a_tunnel_whose_network_is_lost_mid_transfer_fails_the_call_naming_the_host(
    lab, project, tmp_path
):
    """A ``tunnel=yes`` host on a machine of its own (a network namespace running its own
    sshd), its link cut while a large argument travels through the SSH connection: the SSH
    keepalive (ServerAliveInterval 1, ServerAliveCountMax 3 here) gives the host up, and the
    call raises ActorDiedError naming the lost connection, not a raw OSError nor a hang."""
    from pkg.helper import Where

    from tests.runtime.netns import Network
    from tests.runtime.sshd import SSHD, _keygen

    with Network() as net:
        far = net.machine("far")
        folder = tmp_path / "far-sshd"
        folder.mkdir()
        _keygen(str(folder / "host_ed25519"))
        config = folder / "sshd_config"
        config.write_text(
            f"ListenAddress {far.address}:22\nHostKey {folder}/host_ed25519\n"
            f"PidFile {folder}/sshd.pid\nAuthorizedKeysFile {lab.folder}/authorized_keys\n"
            f"AllowUsers {lab.user}\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
            "StrictModes no\nAllowTcpForwarding yes\nSubsystem sftp internal-sftp\n"
            f"SetEnv PARL_SSH_LAB={lab.tag} HOME={lab.folder}/home\nLogLevel ERROR\n"
        )
        far.popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
        kind, key = (folder / "host_ed25519.pub").read_text().split()[:2]
        known = tmp_path / "far_known_hosts"
        known.write_text(f"{far.address} {kind} {key}\n")
        client = tmp_path / "far_ssh_config"
        client.write_text(f"Host {far.address}\n  ServerAliveInterval 1\n  ServerAliveCountMax 3\n")

        def sshd_ready() -> bool:
            try:
                with socket.create_connection((far.address, 22), timeout=1) as s:
                    return s.recv(8).startswith(b"SSH-")
            except OSError:
                return False

        assert wait_until(sshd_ready, timeout=10), "the far sshd did not start"
        host = HostSpec(
            far.address,
            user=lab.user,
            port=22,
            identity=lab.client_key,
            cpus=1,
            python=sys.executable,
            workdir=str(tmp_path / "cache-far"),
            tunnel=True,
        )
        options = lab.options(config=str(client), known_hosts=(str(known),))
        parl.connect(hosts=[host], ssh=options, linger=0)
        try:
            actor = Where()
            assert actor.twice(21) == 42
            far.limit("100mbit")
            big = np.ones(64 << 20, np.uint8)
            outcome: dict = {}

            def call() -> None:
                try:
                    outcome["value"] = actor.echo(big)
                except BaseException as exc:  # noqa: BLE001 - what the call raised is the subject
                    outcome["error"], outcome["at"] = exc, time.monotonic()

            before = far.bytes_in()
            caller = threading.Thread(target=call)
            caller.start()
            assert wait_until(lambda: far.bytes_in() - before > 8 << 20, timeout=30)
            far.cut()
            cut = time.monotonic()
            caller.join(60)
            assert not caller.is_alive(), "the call still hangs 60 s after the network was lost"
            error = outcome.get("error")
            print(f"the call failed {outcome['at'] - cut:.1f} s after the cut: {error!r}")
            assert isinstance(error, parl.ActorDiedError), outcome
            text = str(error)  # the SSH host, by its name in the hosts list
            assert f"the connection to the host agent of {host.name} at 127.0.0.1:" in text, text
            assert "was lost" in text and "worker process" not in text, text
            assert outcome["at"] - cut < 30
        finally:
            far.restore()
            parl.disconnect()
