"""SSH connections against real sshd processes on loopback: ssh config, known_hosts, keys, and
each failure with its message."""

from __future__ import annotations

import os
import subprocess

import psutil
import pytest

from parl.errors import HostKeyError, HostUnreachableError, SSHAuthenticationError, SSHError
from parl.ssh.client import SSHConnection
from parl.ssh.hosts import HostSpec, parse_host
from tests.runtime.conftest import wait_until
from tests.runtime.sshd import _free_port

pytestmark = pytest.mark.ssh


def test_a_command_runs_on_the_host_with_its_input(lab):
    with SSHConnection(lab.spec(0), lab.options()) as conn:
        done = conn.run(
            "cat; echo; echo $PARL_SSH_LAB; echo ~; echo oops >&2; exit 3", stdin=b"hello"
        )
    assert done.status == 3
    assert done.stdout.decode().split() == ["hello", lab.tag, f"{lab.folder}/home"]
    assert done.stderr == b"oops\n"
    assert conn.peer_address == "127.0.0.2"


def test_an_ssh_config_alias_gives_address_port_user_and_key(lab):
    with SSHConnection(HostSpec("h2"), lab.options()) as conn:
        assert conn.target.hostname == "127.0.0.3"
        assert conn.target.port == lab.hosts[1].port
        assert conn.target.identities == (lab.client_key,)
        assert conn.run("echo ok").stdout == b"ok\n"


def test_proxyjump_reaches_a_host_through_another(lab):
    with SSHConnection(HostSpec("hop3"), lab.options()) as conn:
        assert conn.target.jump == "h1"
        assert conn.local_address is None  # no direct socket: a channel of h1
        out = conn.run("echo $SSH_CONNECTION").stdout.decode().split()
    # host 3's sshd saw the connection come from host 1's sshd (direct-tcpip), not from here
    assert out[2:] == ["127.0.0.4", str(lab.hosts[2].port)]


def test_an_unreachable_host_is_named(lab):
    port = _free_port("127.0.0.2")  # nothing listens there
    with pytest.raises(HostUnreachableError) as caught:
        SSHConnection(HostSpec("127.0.0.2", port=port, identity=lab.client_key), lab.options())
    message = str(caught.value)
    assert f"host 127.0.0.2:{port} is unreachable" in message
    assert "Connection refused" in message


def test_a_refused_key_says_what_was_tried_and_how_to_fix(lab, tmp_path):
    stranger = str(tmp_path / "stranger")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger], check=True)
    with pytest.raises(SSHAuthenticationError) as caught:
        SSHConnection(lab.spec(0, identity=stranger), lab.options())
    message = str(caught.value)
    assert f"authentication refused for user {lab.user!r}" in message
    assert f"tried: {stranger}" in message
    assert f"ssh-copy-id -p {lab.hosts[0].port} {lab.user}@127.0.0.2" in message


def test_an_unknown_host_key_is_refused_with_the_command_that_adds_it(lab, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    port = lab.hosts[0].port
    with pytest.raises(HostKeyError) as caught:
        SSHConnection(lab.spec(0), lab.options(known_hosts=(str(empty),)))
    message = str(caught.value)
    assert f"[127.0.0.2]:{port}" in message and "is unknown" in message
    assert f"ssh-keyscan -p {port} 127.0.0.2 >> {empty}" in message
    assert "accept_unknown_host_keys=True" in message
    # the explicit opt-in connects, and writes nothing
    options = lab.options(known_hosts=(str(empty),), accept_unknown_host_keys=True)
    with SSHConnection(lab.spec(0), options) as conn:
        assert conn.run("echo ok").stdout == b"ok\n"
    assert empty.read_text() == ""


def test_a_changed_host_key_names_the_file_and_line(lab, tmp_path):
    lines = open(lab.known_hosts).read().splitlines()
    # host 2's entry carries host 1's key: host 2 now looks "changed"
    forged = lines[1].split()[0] + " " + " ".join(lines[0].split()[1:])
    known = tmp_path / "known_hosts"
    known.write_text("# mine\n" + lines[0] + "\n" + forged + "\n")
    with pytest.raises(HostKeyError) as caught:
        SSHConnection(lab.spec(1), lab.options(known_hosts=(str(known),)))
    message = str(caught.value)
    assert "CHANGED" in message and f"{known} line 3" in message
    assert f"ssh-keygen -R '[127.0.0.3]:{lab.hosts[1].port}' -f {known}" in message
    # opting in to unknown keys does not let a changed one through
    with pytest.raises(HostKeyError, match="CHANGED"):
        SSHConnection(
            lab.spec(1), lab.options(known_hosts=(str(known),), accept_unknown_host_keys=True)
        )


def test_hashed_known_hosts_entries_match(lab, tmp_path):
    hashed = tmp_path / "known_hosts"
    hashed.write_text(open(lab.known_hosts).read())
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(hashed)], check=True, capture_output=True)
    assert "|1|" in hashed.read_text() and "127.0.0.2" not in hashed.read_text()
    with SSHConnection(lab.spec(0), lab.options(known_hosts=(str(hashed),))) as conn:
        assert conn.run("echo ok").stdout == b"ok\n"
    os.unlink(str(hashed) + ".old")


def test_a_missing_sshd_skips_with_the_hint_or_fails_under_ci(monkeypatch, tmp_path):
    from tests.runtime import sshd

    monkeypatch.setattr(sshd, "SSHD", str(tmp_path / "no-sshd"))
    monkeypatch.delenv("REQUIRE_SSH_TESTS", raising=False)
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y openssh-server"):
        sshd.require_sshd()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no-sshd is missing: .*openssh-server"):
        sshd.require_sshd()


def test_the_agents_keys_come_first(lab, tmp_path, monkeypatch):
    stranger = str(tmp_path / "stranger")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger], check=True)
    sock = str(tmp_path / "agent.sock")
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: os.path.exists(sock), timeout=10)
        env = dict(os.environ, SSH_AUTH_SOCK=sock)
        subprocess.run(["ssh-add", "-q", lab.client_key], env=env, check=True, capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        # the identity file is refused by the host; the agent's key is accepted, and tried first
        with SSHConnection(lab.spec(0, identity=stranger), lab.options(allow_agent=True)) as conn:
            assert conn.run("echo ok").stdout == b"ok\n"
        # IdentitiesOnly in the ssh config keeps the agent's keys out, as in OpenSSH
        config = tmp_path / "config"
        config.write_text("Host 127.0.0.2\n  IdentitiesOnly yes\n")
        options = lab.options(allow_agent=True, config=str(config))
        with pytest.raises(SSHAuthenticationError, match=f"tried: {stranger}\\. "):
            SSHConnection(lab.spec(0, identity=stranger), options)
    finally:
        agent.terminate()
        agent.wait()


def test_a_revoked_host_key_is_refused(lab, tmp_path):
    lines = open(lab.known_hosts).read().splitlines()
    known = tmp_path / "known_hosts"
    known.write_text(lines[0] + "\n" + "@revoked " + lines[0] + "\n")
    with pytest.raises(HostKeyError, match=f"is REVOKED: {known} line 2 marks it @revoked"):
        SSHConnection(lab.spec(0), lab.options(known_hosts=(str(known),)))


def chain_config(lab, tmp_path) -> str:
    """The lab's config plus: ``chain3`` (host 3 through h1 then h2, one ProxyJump list),
    ``via2`` (h2 through h1) and ``nested3`` (host 3 through via2: a hop's own ProxyJump),
    and two hosts whose ProxyJumps make a loop."""
    last = lab.hosts[2]
    target = [f"  HostName {last.address}", f"  Port {last.port}", f"  User {lab.user}"]
    target.append(f"  IdentityFile {lab.client_key}")
    extra = ["Host chain3", *target, "  ProxyJump h1,h2", "Host nested3", *target]
    extra += ["  ProxyJump via2", "Host via2", f"  HostName {lab.hosts[1].address}"]
    extra += [f"  Port {lab.hosts[1].port}", f"  IdentityFile {lab.client_key}"]
    extra += ["  ProxyJump h1", "Host loopa", "  ProxyJump loopb", "Host loopb"]
    extra += ["  ProxyJump loopa"]
    path = tmp_path / "config"
    path.write_text(open(lab.config).read() + "\n".join(extra) + "\n")
    return str(path)


@pytest.mark.parametrize("alias", ["chain3", "nested3"])
def test_several_proxyjump_hops_each_with_its_host_key_checked(lab, tmp_path, alias):
    """127.0.0.2 -> 127.0.0.3 -> 127.0.0.4, as one ProxyJump list or as a hop's own ProxyJump;
    a hop whose key known_hosts lacks is refused as the final host would be."""
    config = chain_config(lab, tmp_path)
    with SSHConnection(HostSpec(alias), lab.options(config=config)) as conn:
        hops = []
        hop = conn._jump
        while hop is not None:
            hops.append((hop.target.hostname, hop.transport.is_authenticated()))
            hop = hop._jump
        assert hops == [("127.0.0.3", True), ("127.0.0.2", True)]
        out = conn.run("echo $SSH_CONNECTION").stdout.decode().split()
        assert out[2:] == ["127.0.0.4", str(lab.hosts[2].port)]
    lines = open(lab.known_hosts).read().splitlines()
    known = tmp_path / "known_hosts"  # the middle hop's key (h2, 127.0.0.3) is missing
    known.write_text(lines[0] + "\n" + lines[2] + "\n")
    with pytest.raises(HostKeyError) as caught:
        SSHConnection(HostSpec(alias), lab.options(config=config, known_hosts=(str(known),)))
    assert f"[127.0.0.3]:{lab.hosts[1].port}" in str(caught.value)
    assert "is unknown" in str(caught.value)
    # every connection of the failed chain is closed: none of ours is left open
    assert wait_until(
        lambda: (
            not [
                c
                for c in psutil.Process().net_connections(kind="tcp")
                if c.raddr and c.raddr.port in {h.port for h in lab.hosts}
            ]
        ),
        timeout=5,
    )


def test_a_loop_of_proxyjumps_is_named(lab, tmp_path):
    config = chain_config(lab, tmp_path)
    with pytest.raises(SSHError, match="the ProxyJump settings make a loop: .*loopa"):
        SSHConnection(HostSpec("loopa"), lab.options(config=config))


def test_keepalive_settings_of_the_ssh_config_reach_the_transport(lab, tmp_path):
    """ServerAliveInterval / ServerAliveCountMax as OpenSSH reads them; 15 s and 3 tries where
    the config says nothing; a bad value is named."""
    config = tmp_path / "config"
    config.write_text(
        "Host 127.0.0.2\n  ServerAliveInterval 7\n  ServerAliveCountMax 5\n"
        "Host 127.0.0.4\n  ServerAliveInterval soon\n"
    )
    options = lab.options(config=str(config))
    with SSHConnection(lab.spec(0), options) as conn:
        assert (conn.keepalive.interval, conn.keepalive.count) == (7, 5)
        # paramiko's own keepalive packets (what NAT boxes see) use the same interval
        assert conn.transport.packetizer._Packetizer__keepalive_interval == 7
    with SSHConnection(lab.spec(1), options) as conn:
        assert (conn.keepalive.interval, conn.keepalive.count) == (15, 3)
        assert conn.transport.packetizer._Packetizer__keepalive_interval == 15
    with pytest.raises(SSHError, match="serveraliveinterval is 'soon': a whole number"):
        SSHConnection(lab.spec(2), options)


def test_host_key_alias_names_the_key_in_known_hosts(lab, tmp_path):
    """HostKeyAlias: the key is looked up under the alias as written (no port), as OpenSSH
    does; an alias known_hosts lacks is unknown, with a command that adds it under the alias."""
    first = lab.hosts[0]
    config = tmp_path / "config"
    config.write_text(
        f"Host aliased\n  HostName {first.address}\n  Port {first.port}\n"
        f"  IdentityFile {lab.client_key}\n  HostKeyAlias lab-box-1\n"
    )
    kind_key = open(lab.known_hosts).read().splitlines()[0].split(" ", 1)[1]
    known = tmp_path / "known_hosts"
    known.write_text(f"lab-box-1 {kind_key}\n")
    options = lab.options(config=str(config), known_hosts=(str(known),))
    with SSHConnection(HostSpec("aliased"), options) as conn:
        assert conn.target.key_name == "lab-box-1"
        assert conn.run("echo ok").stdout == b"ok\n"
    # the address's own entry does not stand for the alias
    options = lab.options(config=str(config))
    with pytest.raises(HostKeyError) as caught:
        SSHConnection(HostSpec("aliased"), options)
    message = str(caught.value)
    assert "(lab-box-1, ssh-ed25519" in message and "is unknown" in message
    assert f"ssh-keyscan -p {first.port} 127.0.0.2 | sed 's/^[^ ]*/lab-box-1/' >> " in message


@pytest.mark.ssh
def test_a_hashed_entry_of_a_mixed_case_host_key_alias_is_found(lab, tmp_path):
    """``HostKeyAlias MyBox``: OpenSSH lower-cases the alias (and host names) before looking
    it up, so ``ssh box`` with ``HashKnownHosts yes`` (Debian's default) stores the hash of
    'mybox'. parl hashed 'MyBox', found nothing and said the key is unknown. Expected: the
    key OpenSSH stored is found."""
    host = lab.hosts[0]
    _, kind, key = open(lab.known_hosts).read().splitlines()[0].split()
    known = tmp_path / "known_hosts"
    known.write_text(f"mybox {kind} {key}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], capture_output=True, check=True)
    assert "mybox" not in known.read_text()  # hashed
    config = tmp_path / "config"
    config.write_text(
        f"Host box\n  HostName {host.address}\n  Port {host.port}\n"
        f"  IdentityFile {lab.client_key}\n  HostKeyAlias MyBox\n"
    )
    before = known.read_text()
    with SSHConnection(
        parse_host("box"), lab.options(config=str(config), known_hosts=(str(known),))
    ):
        pass
    assert known.read_text() == before


@pytest.mark.ssh
def test_a_missing_identity_file_is_named_when_login_is_refused(lab, tmp_path):
    """``identity=~/.ssh/id_ed25591`` (a typo): the error said 'tried: no key (no agent, no
    identity file)', never that the named file does not exist. Expected: it is named."""
    from parl.errors import SSHAuthenticationError

    missing = str(tmp_path / "id_ed25591")
    with pytest.raises(SSHAuthenticationError) as caught:
        SSHConnection(lab.spec(0, identity=missing), lab.options())
    assert f"tried: {missing} (no such file)" in str(caught.value)
