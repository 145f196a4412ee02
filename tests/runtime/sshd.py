"""Three real OpenSSH servers on 127.0.0.2-127.0.0.4 for the SSH launcher's tests.

Each sshd has its own host key and port; one client key is authorized on all of them. The lab
writes the client's ssh config (aliases ``h1``..``h3``, and ``hop3``: host 3 reached through
``h1`` with ProxyJump; host 3 refuses remote port forwards) and its known_hosts, and tests pass both explicitly: nothing of the
user's own ~/.ssh is read or written. sshd gives every session the environment variable
``PARL_SSH_LAB=<tag>``, so the processes started over SSH can be found (and must be gone after
each test). Without /usr/sbin/sshd the tests skip with the install hint, or fail under CI.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

import psutil
import pytest

from parl.ssh.client import SSHOptions
from parl.ssh.hosts import HostSpec

SSHD = "/usr/sbin/sshd"
MARKER = "PARL_SSH_LAB"
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
INSTALL_HINT = (
    "the SSH tests need OpenSSH's server: apt-get install -y openssh-server "
    "(CI installs it; set CI=true or REQUIRE_SSH_TESTS=1 to make its absence a failure)"
)


@dataclass
class FakeHost:
    alias: str
    address: str
    port: int
    folder: str
    process: subprocess.Popen | None = None

    @property
    def key_name(self) -> str:
        return f"[{self.address}]:{self.port}"


@dataclass
class SSHLab:
    folder: str
    tag: str
    user: str
    client_key: str
    config: str
    known_hosts: str
    hosts: list[FakeHost] = field(default_factory=list)

    def spec(self, index: int, **settings) -> HostSpec:
        """Host ``index`` by address and port, with the lab's client key."""
        host = self.hosts[index]
        settings.setdefault("identity", self.client_key)
        return HostSpec(host.address, user=self.user, port=host.port, **settings)

    def options(self, **changes) -> SSHOptions:
        values = dict(config=self.config, known_hosts=(self.known_hosts,), allow_agent=False)
        values.update(changes)
        return SSHOptions(**values)

    def remote_processes(self) -> list[psutil.Process]:
        """Live processes started over SSH by this lab (they carry the marker variable)."""
        found = []
        for process in psutil.process_iter():
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
                if process.environ().get(MARKER) == self.tag:
                    found.append(process)
            except psutil.Error:
                continue
        return found

    def kill_remote_processes(self) -> None:
        for process in self.remote_processes():
            try:
                process.kill()
            except psutil.Error:
                pass


def require_sshd() -> None:
    if os.path.exists(SSHD):
        return
    if os.environ.get("CI") == "true" or os.environ.get("REQUIRE_SSH_TESTS") == "1":
        pytest.fail(f"{SSHD} is missing: {INSTALL_HINT}")
    pytest.skip(f"{SSHD} is missing: {INSTALL_HINT}")


def start(folder: str) -> SSHLab:
    require_sshd()
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
    os.makedirs(os.path.join(folder, "home"), exist_ok=True)
    user = pwd.getpwuid(os.geteuid()).pw_name
    client_key = _keygen(os.path.join(folder, "client_ed25519"))
    shutil.copy(client_key + ".pub", os.path.join(folder, "authorized_keys"))
    lab = SSHLab(
        folder,
        uuid.uuid4().hex[:12],
        user,
        client_key,
        os.path.join(folder, "ssh_config"),
        os.path.join(folder, "known_hosts"),
    )
    try:
        for i, address in enumerate(ADDRESSES, start=1):
            host = FakeHost(f"h{i}", address, _free_port(address), os.path.join(folder, f"h{i}"))
            os.makedirs(host.folder)
            _keygen(os.path.join(host.folder, "host_ed25519"))
            _write_sshd_config(lab, host)
            host.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", os.path.join(host.folder, "sshd_config")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(host.folder, "sshd.log"), "wb"),
                start_new_session=True,
            )
            lab.hosts.append(host)
        for host in lab.hosts:
            _wait_ready(host)
        _write_client_files(lab)
    except BaseException:
        stop(lab)
        raise
    return lab


def stop(lab: SSHLab) -> None:
    """Kill what was started over SSH, then each sshd (SIGTERM, SIGKILL after 5 s)."""
    lab.kill_remote_processes()
    for host in lab.hosts:
        if host.process is None:
            continue
        host.process.terminate()
        try:
            host.process.wait(5)
        except subprocess.TimeoutExpired:
            host.process.kill()
            host.process.wait()
        host.process.stderr and host.process.stderr.close()  # type: ignore[func-returns-value]


def _keygen(path: str) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path, "-C", "parl-ssh-lab"],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _write_sshd_config(lab: SSHLab, host: FakeHost) -> None:
    lines = [
        f"ListenAddress {host.address}:{host.port}",
        f"HostKey {host.folder}/host_ed25519",
        f"PidFile {host.folder}/sshd.pid",
        f"AuthorizedKeysFile {lab.folder}/authorized_keys",
        f"AllowUsers {lab.user}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "UsePAM no",
        "StrictModes no",
        "AllowTcpForwarding yes",
        "Subsystem sftp internal-sftp",
        # HOME: what runs over SSH writes (state files, default caches) under the lab, not
        # in the real home of the user running the tests
        f"SetEnv {MARKER}={lab.tag} SHLVL=5 HOME={lab.folder}/home",
        "MaxStartups 100:30:200",
        "MaxSessions 100",
        "LogLevel ERROR",
    ]
    if host.alias == "h3":  # refuses remote port forwards (tunnel=yes needs them)
        lines.append("PermitListen none")
    path = os.path.join(host.folder, "sshd_config")
    with open(path, "w") as file:
        file.write("\n".join(lines) + "\n")
    checked = subprocess.run([SSHD, "-t", "-f", path], capture_output=True, text=True)
    if checked.returncode != 0:
        raise RuntimeError(f"sshd refuses {path}: {checked.stderr}")


def _wait_ready(host: FakeHost, timeout: float = 10.0) -> None:
    """Poll every 10 ms until sshd sends its banner; raise with its log if it exits."""
    assert host.process is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if host.process.poll() is not None:
            with open(os.path.join(host.folder, "sshd.log")) as log:
                raise RuntimeError(f"sshd for {host.address} exited: {log.read()}")
        try:
            with socket.create_connection((host.address, host.port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-2.0-"):
                    return
        except OSError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"sshd for {host.address}:{host.port} did not answer in {timeout} s")


def _write_client_files(lab: SSHLab) -> None:
    entries, config = [], []
    for host in lab.hosts:
        with open(os.path.join(host.folder, "host_ed25519.pub")) as file:
            kind, key = file.read().split()[:2]
        entries.append(f"{host.key_name} {kind} {key}")
        config += [
            f"Host {host.alias}",
            f"  HostName {host.address}",
            f"  Port {host.port}",
            f"  User {lab.user}",
            f"  IdentityFile {lab.client_key}",
        ]
    last = lab.hosts[-1]
    config += [
        "Host hop3",
        f"  HostName {last.address}",
        f"  Port {last.port}",
        f"  User {lab.user}",
        f"  IdentityFile {lab.client_key}",
        "  ProxyJump h1",
    ]
    with open(lab.known_hosts, "w") as file:
        file.write("\n".join(entries) + "\n")
    with open(lab.config, "w") as file:
        file.write("\n".join(config) + "\n")


@pytest.fixture(scope="session")
def ssh_lab(tmp_path_factory):
    """The three sshd processes, for the whole session."""
    started = start(str(tmp_path_factory.mktemp("ssh-lab")))
    try:
        yield started
    finally:
        stop(started)


@pytest.fixture
def lab(ssh_lab):
    """The lab, for one test: afterwards no process started over SSH may be left (polled
    with a deadline; what is left is killed so the next test starts clean)."""
    from tests.runtime.conftest import wait_until  # (conftest imports this module)

    yield ssh_lab
    gone = wait_until(lambda: not ssh_lab.remote_processes(), timeout=10)
    left = [(p.pid, _cmdline(p)) for p in ssh_lab.remote_processes()]
    ssh_lab.kill_remote_processes()
    assert gone, f"processes started over SSH are left: {left}"


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())[:200]
    except psutil.Error:
        return "?"


HELPER = """
import os
import parl

from pkg.util import TWICE


@parl.remote_class
class Where:
    def where(self):
        return {"cwd": os.getcwd(), "parl": parl.__file__, "pid": os.getpid(),
                "lab": os.environ.get("PARL_SSH_LAB")}

    def twice(self, x):
        return TWICE * x

    def echo(self, a):
        return a

    def shared(self, n):
        import parl.shm

        return parl.shm.zeros(n)

    def module_file(self, name):
        import importlib

        return importlib.import_module(name).__file__
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder with a module in a sub-folder; the test runs in it (its root)."""
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "util.py").write_text("TWICE = 2\n")
    (root / "pkg" / "helper.py").write_text(HELPER)
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in ("pkg.helper", "pkg.util", "pkg"):
        sys.modules.pop(name, None)
