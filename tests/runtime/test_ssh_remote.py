"""The launcher's pure parts, without SSH: remote command lines, probe answers (a new cache
folder is private), the master's address, and numbers of the ssh config."""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from parl.deploy import packer
from parl.errors import RemoteEnvironmentError
from parl.ssh import remote
from parl.ssh.launcher import _master_binds


def test_the_agent_command_quotes_paths_and_carries_no_secret():
    command = remote.agent_command(
        "/opt/my env/python3", "/cache dir", "p" * 64, "q" * 64, "10.0.0.7", "10.0.0.1:8010", 4,
        advertise="127.0.0.1:5000",
    )  # fmt: skip
    words = shlex.split(command)
    assert words[:2] == ["cd", f"/cache dir/{'q' * 64}"]
    assert f"PYTHONPATH=/cache dir/{'q' * 64}:/cache dir/{'p' * 64}" in words
    daemon = words[words.index("exec") + 1 :]
    assert daemon == [
        "/opt/my env/python3", "-m", "parl.cluster.daemon", "agent", "10.0.0.7",
        "10.0.0.1:8010", "4", "3", "--secret-stdin", "--cache_dir=/cache dir",
        "--advertise=127.0.0.1:5000",
        "3>&1", "1>&2",
    ]  # fmt: skip


def test_an_agent_without_a_project_runs_in_the_cache_with_parl_alone_and_its_label():
    """xparl start --hosts: no project at launch (callers ship theirs); the master shows the
    host by its hosts-file name."""
    command = remote.agent_command(
        "python3", "/c", "p" * 64, None, "10.0.0.7", "10.0.0.1:8010", 2, label="alice@box:22"
    )
    words = shlex.split(command)
    assert words[:2] == ["cd", "/c"]
    assert f"PYTHONPATH=/c/{'p' * 64}" in words
    assert "--label=alice@box:22" in words and "--advertise" not in command


def _cached(base: Path, text: str) -> str:
    project = base.parent / f"project-{text}"
    project.mkdir()
    (project / "main.py").write_text(f"print({text!r})\n")
    pack = packer.pack_project(project)
    packer.unpack(pack.data, base / pack.digest)
    return pack.digest


def test_the_probe_runs_here_and_reports_versions_and_cached_digests(tmp_path, caplog):
    base = tmp_path / "cache"
    base.mkdir(mode=0o700)
    cached, planted = _cached(base, "cached"), _cached(base, "planted")
    (base / planted / "helpers.py").write_text("import os\n")  # not that digest's code
    # "~/" stays the shell's to expand: this interpreter, named from a HOME above it
    home, rest = os.path.dirname(os.path.dirname(sys.executable)), os.path.basename(sys.executable)
    python = f"~/bin/{rest}"
    command = remote.probe_command(python, str(base), [cached, planted, "d" * 64])
    env = dict(os.environ, HOME=home)
    done = subprocess.run(command, shell=True, capture_output=True, env=env)
    with caplog.at_level(logging.WARNING, logger="parl.ssh"):
        probe = remote.parse_probe("here", python, done.returncode, done.stdout, done.stderr)
    assert probe.have == (cached,) and probe.base == str(base)
    assert not (base / planted).exists()  # moved away: an upload replaces it
    assert f"not using the cached code {base / planted}" in caplog.text
    assert probe.packages == remote.local_versions()
    remote.check_versions("here", probe, remote.local_versions(), sys.executable)  # no error


def test_probe_failures_are_named():
    with pytest.raises(RemoteEnvironmentError, match="host h: no such python 'py9'"):
        remote.parse_probe("h", "py9", 127, b"", b"sh: 1: py9: not found")
    with pytest.raises(RemoteEnvironmentError, match="could not run parl's check .*SyntaxError"):
        remote.parse_probe("h", "python2", 1, b"", b"SyntaxError: invalid syntax")
    answer = {"python": "3.11.2", "executable": "/x", "base": "/c", "packages": {},
              "have": [], "cpus": None}  # fmt: skip
    assert remote.parse_probe("h", "p", 0, json.dumps(answer).encode(), b"").cpus == 1


@pytest.mark.parametrize(
    ("local", "bind"),
    [
        (["127.0.0.1", "127.0.0.1"], ["127.0.0.1"]),
        ([None, "127.0.0.1"], ["127.0.0.1"]),  # a jump host's target: loopback here
        (["10.0.0.1", "10.0.0.1"], ["10.0.0.1"]),
        # two local addresses: a listener on each, never on every address (0.0.0.0)
        (["10.0.0.1", "192.168.1.5"], ["10.0.0.1", "192.168.1.5"]),
    ],
)
def test_the_master_listens_where_the_hosts_reach_it(local, bind):
    assert _master_binds(local) == bind


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


def test_an_ssh_config_number_in_other_digits_is_an_ssh_error():
    """``ServerAliveInterval ²`` in ~/.ssh/config raised a bare ValueError from float().
    Expected: the SSHError that names the host and the setting."""
    from parl.errors import SSHError
    from parl.ssh import keepalive

    with pytest.raises(SSHError, match="host box: the ssh config's serveraliveinterval"):
        keepalive.settings({"serveraliveinterval": "\u00b2"}, "box")


@pytest.mark.parametrize("parent_mode", [0o777, 0o1777])
def test_the_probe_judges_the_folders_above_the_cache_as_the_host_agent_does(tmp_path, parent_mode):
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(parent_mode)
    base = parent / "cache"  # made 0700 by the probe: only its parent can be wrong
    command = remote.probe_command(sys.executable, str(base), [])
    done = subprocess.run(command, shell=True, capture_output=True)
    if parent_mode & 0o1000:  # sticky, as /tmp: others cannot move what is not theirs
        probe = remote.parse_probe("h", sys.executable, done.returncode, done.stdout, done.stderr)
        assert probe.base == str(base)
        return
    with pytest.raises(RemoteEnvironmentError) as raised:
        remote.parse_probe("h", sys.executable, done.returncode, done.stdout, done.stderr)
    assert f"lies in {parent}, which other users can write (mode 777)" in str(raised.value)
    from parl.deploy import cachedir

    assert cachedir.unsafe_folder(str(base)) in str(raised.value)  # the agent's words


def test_hosts_prepared_in_threads_read_the_probe_source_once(monkeypatch) -> None:
    # The launcher prepares hosts in threads; CPython 3.11's ast.parse (behind
    # inspect.getsource) can fail when two threads run it at once, so the source is read once.
    import inspect
    import threading

    remote._probe_script.cache_clear()
    calls = []
    real = inspect.getsource

    def counting(obj):
        calls.append(obj)
        return real(obj)

    monkeypatch.setattr(inspect, "getsource", counting)
    scripts, start = [], threading.Barrier(8)

    def prepare() -> None:
        start.wait()
        scripts.append(remote.probe_command("python3", "~/.cache/parl", ["abc"]))

    threads = [threading.Thread(target=prepare) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(scripts) == 8 and len(set(scripts)) == 1
    first_round = len(calls)
    assert first_round > 0
    remote.probe_command("python3", "~/.cache/parl", ["abc"])
    assert len(calls) == first_round  # made once, by one thread
    remote._probe_script.cache_clear()
