"""One host of a launch: its SSH connection, its Python, its code, its host agent's session.

:class:`HostSession` connects (:mod:`parl.ssh.client`), probes the host's Python and cache
(:mod:`parl.ssh.remote`; with ``install=venv``, completes that Python in an environment,
:mod:`parl.ssh.install`), uploads by SFTP the code archives the cache lacks and unpacks them,
then starts the host agent in an SSH session whose stdin carries the secret and whose end
ends the agent. :class:`parl.ssh.launcher.Launch` runs these steps on every host at once.
"""

from __future__ import annotations

import io
import logging
import secrets
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import paramiko

from parl.cluster.control import parse_address, ready_error
from parl.deploy.packer import Pack
from parl.errors import DeploymentError, SSHError
from parl.ssh import install, remote
from parl.ssh.client import SSHConnection, SSHOptions
from parl.ssh.hosts import HostSpec
from parl.ssh.tunnel import LocalForward, remote_forward

log = logging.getLogger("parl.ssh")
DEFAULT_CACHE = "~/.parl/cache"
READY_TIMEOUT_S = 60.0


@dataclass
class HostReport:
    """What launching one host did (progress lines, tests, benchmarks)."""

    name: str
    python: str = ""
    cpus: int = 0
    uploaded: int = 0  # bytes sent by SFTP (0: every archive was in the host's cache)
    agent: str = ""  # the host agent's address
    seconds: float = 0.0
    interpreter: str = ""  # the Python it runs (install=venv: the environment's)
    installed: list[str] = field(default_factory=list)  # what pip installed (install=venv)


@dataclass
class HostSession:
    """One host: its SSH connection and the session its host agent runs in."""

    spec: HostSpec
    options: SSHOptions
    report: HostReport
    conn: SSHConnection | None = None
    base: str = ""
    channel: paramiko.Channel | None = None
    forward: LocalForward | None = None
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=40))
    python: str = ""  # the interpreter to run there: the spec's, or its environment's

    def prepare(
        self,
        packs: list[Pack],
        versions: dict[str, str | None],
        bars: bool,
        wheels: str | None = None,
    ) -> None:
        """Connect, check the Python (with install=venv: complete it in an environment),
        upload and unpack what the host's cache lacks."""
        started = time.monotonic()
        self.conn = SSHConnection(self.spec, self.options)
        base = self.spec.workdir or DEFAULT_CACHE
        digests = [p.digest for p in packs]
        self.python = self.spec.python
        done = self.conn.run(remote.probe_command(self.python, base, digests))
        probe = remote.parse_probe(
            self.spec.name, self.python, done.status, done.stdout, done.stderr
        )
        if "/" in self.python and not self.python.startswith(("/", "~/")):
            # relative to the login folder: the agent starts elsewhere (after a cd)
            self.python = probe.executable
        if (
            self.spec.install == "venv"
            and remote.same_python(probe)
            and install.needs(probe, versions)
        ):
            self.python, probe, self.report.installed = install.ensure_venv(
                self.conn, self.python, probe, versions, digests, wheels
            )
        remote.check_versions(self.spec.name, probe, versions, self.python)
        self.report.interpreter = self.python
        self.base = probe.base
        self.report.python = probe.python
        self.report.cpus = self.spec.cpus or probe.cpus
        missing = [p for p in packs if p.digest not in probe.have]
        if missing:
            self._deploy(missing, packs[0].digest, bars)
        self.report.seconds = time.monotonic() - started

    def _deploy(self, packs: list[Pack], parl_digest: str, bars: bool) -> None:
        assert self.conn is not None
        from tqdm import tqdm  # only when something is uploaded

        jobs = []
        sftp = self.conn.sftp()
        try:
            for pack in packs:
                path = f"{self.base}/.upload-{pack.digest}-{secrets.token_hex(4)}.tgz"
                with tqdm(
                    total=len(pack.data), unit="B", unit_scale=True, leave=False, delay=0.5,
                    desc=f"{self.spec.name}", disable=not bars, file=sys.stderr,
                ) as bar:  # fmt: skip
                    sftp.putfo(
                        io.BytesIO(pack.data), path, file_size=len(pack.data),
                        callback=lambda sent, _total: bar.update(sent - bar.n),
                    )  # fmt: skip
                jobs.append((path, pack.digest))
                self.report.uploaded += len(pack.data)
        except (OSError, paramiko.SSHException) as exc:
            raise DeploymentError(
                f"host {self.spec.name}: uploading to {self.base} failed: {exc}"
            ) from None
        finally:
            sftp.close()
        command = remote.unpack_command(self.python, self.base, parl_digest, jobs)
        done = self.conn.run(command, timeout=READY_TIMEOUT_S)
        if done.status != 0:
            raise DeploymentError(
                f"host {self.spec.name}: unpacking the code in {self.base} failed: "
                f"{done.stderr.decode(errors='replace')[-1000:]}"
            )

    def start(
        self,
        master: tuple[str, int],
        here: tuple[str, int],
        secret: bytes,
        parl: str,
        project: str | None,
    ) -> None:
        """Start the host agent; returns once it has registered with the master. ``master``:
        where the host reaches the master; ``here``: where this process does (for a tunnel)."""
        assert self.conn is not None
        started = time.monotonic()
        bind, advertise = self.conn.peer_address, None
        if self.spec.tunnel:  # all on the host's loopback, through the SSH connection
            self.forward = LocalForward(self.conn.transport, self.spec.name)
            bind, advertise = "127.0.0.1", f"127.0.0.1:{self.forward.port}"
            try:
                with self.conn.global_lock:  # not beside a keepalive probe
                    master = ("127.0.0.1", remote_forward(self.conn.transport, here))
            except paramiko.SSHException as exc:
                raise SSHError(
                    f"host {self.spec.name} refuses to forward a port back to this machine "
                    f"({exc}): tunnel=yes needs `AllowTcpForwarding yes` in its sshd_config"
                ) from None
        command = remote.agent_command(
            self.python, self.base, parl, project, bind, f"{master[0]}:{master[1]}",
            self.report.cpus, advertise, self.spec.name,
        )  # fmt: skip
        self.channel = channel = self.conn.open(command)
        channel.sendall(secret + b"\n")  # the only way the secret travels
        threading.Thread(target=self._drain, name="parl-ssh-log", daemon=True).start()
        line = _read_line(channel, READY_TIMEOUT_S)
        if not line.startswith("ok "):
            said = ready_error(line[6:]) if line.startswith("error ") else "\n".join(self.errors)
            raise SSHError(f"host {self.spec.name}: the host agent did not start: {said}")
        self.report.agent = line[3:]
        if self.forward is not None:
            self.forward.set_target(*parse_address(line[3:]))
            self.report.agent += f" (tunnel from 127.0.0.1:{self.forward.port})"
        self.report.seconds += time.monotonic() - started

    def _drain(self) -> None:
        """The agent's log (its stderr): kept for error messages, logged at debug level."""
        assert self.channel is not None
        file = self.channel.makefile_stderr("rb")
        try:
            for raw in file:
                text = raw.decode(errors="replace").rstrip()
                self.errors.append(text)
                log.debug("%s: %s", self.spec.name, text)
        except (OSError, EOFError, paramiko.SSHException):
            pass

    def stop(self) -> None:
        """Close the agent's stdin: it stops its workers and exits."""
        if self.channel is not None:
            try:
                self.channel.shutdown_write()
            except (OSError, EOFError, paramiko.SSHException):
                pass

    def close(self, deadline: float) -> None:
        if self.forward is not None:
            self.forward.close()
        if self.channel is not None:
            if self.conn is not None and self.conn.transport.is_active():  # else: no answer
                self.channel.status_event.wait(max(0.0, deadline - time.monotonic()))
            self.channel.close()
        if self.conn is not None:
            self.conn.close()


def _read_line(channel: paramiko.Channel, timeout: float) -> str:
    """The agent's ready line (``ok ...`` or ``error ...``), skipping whatever the remote
    login shell may print before it; "" at the end of output or after ``timeout``."""
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        *lines, data = data.split(b"\n")
        for line in lines:
            text = line.decode(errors="replace").strip()
            if text.startswith(("ok ", "error ")):
                return text
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        channel.settimeout(remaining)
        try:
            chunk = channel.recv(4096)
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return ""
