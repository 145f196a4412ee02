"""Review of issue 9 (the SSH launcher): what a demanding user and an attacker on loopback hit.

Each test's docstring says what a user saw and what was expected. The SSH tests run against
the three real sshd of tests/runtime/sshd.py (127.0.0.2-127.0.0.4).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parl
from parl.cluster.packer import pack_parl
from parl.errors import HostsFileError, RemoteEnvironmentError
from parl.remote import context
from parl.ssh.client import Connection
from parl.ssh.hosts import parse_host, parse_hosts, read_hosts

# -- hosts.txt -------------------------------------------------------------------------------


@pytest.mark.parametrize("line", ["box cpus=\u00b2", "box:\u00b2", "box cpus=\u0663"])
def test_a_number_in_other_digits_is_a_hosts_file_error_naming_the_line(line):
    """``cpus=²`` (a superscript two: str.isdigit() says yes, int() says no) raised a bare
    ``ValueError: invalid literal for int()`` naming neither the file nor the line; ``cpus=٣``
    (an Arabic-Indic three) was taken as 3 cpus. Expected: the HostsFileError of any other
    bad number, with the file and line."""
    with pytest.raises(HostsFileError, match=r"^my-hosts.txt, line 2: "):
        parse_hosts("# first\n" + line + "\n", filename="my-hosts.txt")


@pytest.mark.parametrize("separator", ["\v", "\f", "\x1c", "\x85", "\u2028"])
def test_line_numbers_count_newlines_only(separator):
    """A stray form feed or Unicode line separator inside a line made str.splitlines() count
    an extra line: the error named line 3 of a two-line file. Expected: the line an editor
    (and ``sed -n 2p``) shows."""
    text = f"box cpus=2\nother{separator}x cpus=zero\n"
    with pytest.raises(HostsFileError, match=r"^hosts.txt, line 2: "):
        parse_hosts(text)


def test_a_byte_order_mark_is_not_part_of_the_first_host(tmp_path):
    """A hosts file saved by an editor that writes a UTF-8 byte order mark gave a first host
    named '\\ufeffgpu-box-1': connecting then failed for a name that looks right in every
    message. Expected: the mark is ignored."""
    path = tmp_path / "hosts.txt"
    path.write_bytes(b"\xef\xbb\xbfgpu-box-1 cpus=2\n")
    assert [h.host for h in read_hosts(str(path))] == ["gpu-box-1"]


@pytest.mark.parametrize("junk", ["box\x00evil", "box\x1b[2Jx cpus=1", "\x01\x02\x03"])
def test_control_characters_are_refused_with_the_line(junk):
    """A NUL byte or a terminal escape inside a host name was accepted as part of it (a
    binary file parsed into hosts). Expected: an error naming the line."""
    with pytest.raises(HostsFileError, match=r"^h.txt, line 1: .*control character"):
        parse_hosts(junk, filename="h.txt")


def test_a_file_that_is_not_utf8_names_the_file_and_line(tmp_path):
    """A Latin-1 hosts file raised ``UnicodeDecodeError: 'utf-8' codec can't decode byte
    0xe9 in position 14``: no file, no line. Expected: a HostsFileError naming both."""
    path = tmp_path / "hosts.txt"
    path.write_bytes(b"box cpus=2\ncaf\xe9 cpus=1\n")
    with pytest.raises(HostsFileError, match=rf"^{path}, line 2: .*not UTF-8"):
        read_hosts(str(path))


def test_a_hash_inside_a_value_is_not_a_comment():
    """``workdir=/scratch/run#1`` silently became ``workdir=/scratch/run`` (the rest of the
    line was a comment): code went to another folder than the one written. Expected: a ``#``
    starts a comment at the start of the line or after a space, as in shell."""
    (spec,) = parse_hosts("box workdir=/scratch/run#1 python=/opt/py#3/bin/python3  # note\n")
    assert spec.workdir == "/scratch/run#1"
    assert spec.python == "/opt/py#3/bin/python3"
    assert parse_hosts("#box\n box # cpus=2\n") == [parse_host("box")]


_text = st.text(st.characters(codec="utf-8"), max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.lists(_text, max_size=8))
def test_any_text_parses_or_raises_a_hosts_file_error_with_a_real_line(lines):
    """Hypothesis: whatever a hosts file holds, parsing gives hosts or a HostsFileError
    whose line number is a line of the file (no other exception type)."""
    text = "\n".join(lines)
    try:
        parse_hosts(text, filename="f")
    except HostsFileError as exc:
        number = int(str(exc).split(", line ")[1].split(":")[0])
        assert 1 <= number <= max(1, len(text.split("\n")))


def test_a_huge_hosts_file_parses_quickly():
    """100,000 hosts (and as many comments) parse in well under a few seconds."""
    import time

    text = "".join(f"# host {i}\nuser@box{i}:{1 + i % 65535} cpus=2\n" for i in range(100_000))
    started = time.monotonic()
    assert len(parse_hosts(text)) == 100_000
    assert time.monotonic() - started < 10


# -- host keys -------------------------------------------------------------------------------


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
    with Connection(parse_host("box"), lab.options(config=str(config), known_hosts=(str(known),))):
        pass
    assert known.read_text() == before


# -- where code runs on a host ---------------------------------------------------------------


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


def test_a_fresh_cache_folder_is_private_whatever_the_umask(tmp_path):
    """The refusal of a cache folder others can write must not refuse the default one: under
    a umask of 002 (Fedora's, for users with their own group) the probe makes a new folder
    0700, and accepts it."""
    from parl.ssh import remote

    base = tmp_path / "deep" / "cache"
    command = remote.probe_command(sys.executable, str(base), [])
    done = subprocess.run(
        command, shell=True, capture_output=True, preexec_fn=lambda: os.umask(0o002)
    )
    probe = remote.parse_probe("here", sys.executable, done.returncode, done.stdout, done.stderr)
    assert probe.base == str(base)
    assert os.stat(base).st_mode & 0o777 == 0o700


@pytest.mark.ssh
def test_a_missing_identity_file_is_named_when_login_is_refused(lab, tmp_path):
    """``identity=~/.ssh/id_ed25591`` (a typo): the error said 'tried: no key (no agent, no
    identity file)', never that the named file does not exist. Expected: it is named."""
    from parl.errors import SSHAuthenticationError

    missing = str(tmp_path / "id_ed25591")
    with pytest.raises(SSHAuthenticationError) as caught:
        Connection(lab.spec(0, identity=missing), lab.options())
    assert f"tried: {missing} (no such file)" in str(caught.value)


def test_an_ssh_config_number_in_other_digits_is_an_ssh_error():
    """``ServerAliveInterval ²`` in ~/.ssh/config raised a bare ValueError from float().
    Expected: the SSHError that names the host and the setting."""
    from parl.errors import SSHError
    from parl.ssh import keepalive

    with pytest.raises(SSHError, match="host box: the ssh config's serveraliveinterval"):
        keepalive.settings({"serveraliveinterval": "\u00b2"}, "box")
