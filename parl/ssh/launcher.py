"""Launching a cluster over SSH: a master in this process, a host agent on every listed host.

For each host, in parallel: connect (:mod:`parl.ssh.client`), probe its Python and cache
(:mod:`parl.ssh.remote`), upload by SFTP the code archives it lacks (this package and the
caller's project, :mod:`parl.cluster.packer`) and unpack them. Then a master starts here, on
an address the hosts reach, and each host starts ``python -m parl.cluster.daemon agent`` in
its session, reading the per-launch secret from stdin (never on a command line or in the
environment). When the session ends (``close``, the caller exiting or being killed), the
agent's stdin closes and so does its connection to the master: it stops its workers and exits.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import secrets
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from parl.cluster import control
from parl.cluster.control import parse_address, ready_error
from parl.cluster.master import Master
from parl.cluster.packer import Pack, pack_parl, pack_project, project_root
from parl.cluster.server import Server
from parl.errors import DeploymentError, SSHError
from parl.monitoring.server import MonitorServer
from parl.ssh import install, remote
from parl.ssh.client import Connection, SSHOptions
from parl.ssh.hosts import HostSpec
from parl.ssh.tunnel import LocalForward, remote_forward
from parl.wire.forking import drop_in_child

log = logging.getLogger("parl.ssh")
DEFAULT_CACHE = "~/.parl/cache"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


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
class _Host:
    """One host: its SSH connection and the session its host agent runs in."""

    spec: HostSpec
    options: SSHOptions
    report: HostReport
    conn: Connection | None = None
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
        self.conn = Connection(self.spec, self.options)
        base = self.spec.workdir or DEFAULT_CACHE
        digests = [p.digest for p in packs]
        self.python = self.spec.python
        done = self.conn.run(remote.probe_command(self.python, base, digests))
        probe = remote.parse_probe(
            self.spec.name, self.python, done.status, done.stdout, done.stderr
        )
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


class Launch:
    """A master here and a host agent on each of ``hosts``; ``close()`` ends them all.

    ``cluster``: the server of a master that already runs in this process (``xparl start
    --hosts``), with its ``secret``: the agents register with it, and no project is deployed
    at launch (each caller ships its own through the cluster's deployment, into the same
    cache folder on the host)."""

    def __init__(
        self,
        hosts: Sequence[HostSpec],
        options: SSHOptions,
        distributed_files: Sequence[str] = (),
        progress: bool = True,
        project: str | Path | None = None,
        monitor_port: int = 0,
        *,
        cluster: Server | None = None,
        secret: bytes | None = None,
        install: str | None = None,
        wheels: str | None = None,
    ) -> None:
        if not hosts:
            raise ValueError("no host to launch on: give at least one in the hosts file")
        self.progress = progress
        self.secret = secret or secrets.token_hex(32).encode()
        if install is not None:  # a host's own install= setting wins
            hosts = [h if h.install else dataclasses.replace(h, install=install) for h in hosts]
        self._hosts = [_Host(spec, options, HostReport(spec.name)) for spec in hosts]
        self._server: Server | None = None
        self.monitor_url: str | None = None
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_all, os.getpid(), self._hosts, [None])
        try:
            packs = [pack_parl()]
            if cluster is None:
                packs.append(pack_project(project or project_root(), distributed_files))
            versions = remote.local_versions()
            self._each(lambda h: h.prepare(packs, versions, progress, wheels), "ready")
            binds = _master_binds(
                [h.conn.local_address for h in self._hosts if h.conn and not h.spec.tunnel]
            )
            servers = self._listen(binds, cluster, monitor_port)
            self._finalizer.detach()
            self._finalizer = weakref.finalize(
                self, _close_all, os.getpid(), self._hosts, [s for s in servers if s is not cluster]
            )
            listening = {bind: server.port for bind, server in zip(binds, servers, strict=True)}
            main = cluster or servers[0]
            here = "127.0.0.1" if control.is_wildcard(main.host) else main.host
            port = main.port
            self.address = f"{here}:{port}"
            project_digest = packs[1].digest if len(packs) > 1 else None

            def start(host: _Host) -> None:
                assert host.conn is not None
                local = host.conn.local_address
                reach = (local, listening[local]) if local in listening else (here, port)
                host.start(reach, (here, port), self.secret, packs[0].digest, project_digest)

            self._each(start, "started")
        except BaseException:
            self.close()
            raise
        drop_in_child(self)  # a forked child closes its copies of our connections

    def _listen(self, binds: list[str], cluster: Server | None, monitor_port: int) -> list[Server]:
        """A listener of the master on each of ``binds``: ``cluster`` itself where it listens
        there already (or on every address), else one more with its handlers; without
        ``cluster``, a new master (with its monitor page on ``monitor_port``)."""
        if cluster is None:
            self.master = Master()
            handlers = self.master.handlers
        else:
            handlers = cluster.handlers
        servers: list[Server] = []
        try:
            for bind in binds:
                if cluster is not None and (
                    cluster.host == bind or control.is_wildcard(cluster.host)
                ):
                    servers.append(cluster)
                else:  # one listener per address the hosts reach us at
                    servers.append(Server(bind, 0, self.secret, handlers))
            if monitor_port and cluster is None:  # the page, on this machine's loopback
                servers[0].monitor = MonitorServer(
                    self.master.monitor_snapshot, "127.0.0.1", monitor_port
                )
                self.master.monitoring = True
                self.monitor_url = servers[0].monitor.url
        except BaseException:
            for server in servers:
                if server is not cluster:
                    server.close()
            raise
        for server in servers:
            if server is not cluster:
                server.start()
        self._server = servers[0]
        return servers

    @property
    def reports(self) -> list[HostReport]:
        return [h.report for h in self._hosts]

    def _each(self, step: Callable[[_Host], None], what: str) -> None:
        """Run ``step`` on every host in parallel; one progress line per host; the errors of
        all failed hosts raised together (as the first one's type)."""
        failures: list[BaseException] = []

        def run(host: _Host) -> None:
            try:
                step(host)
            except BaseException as exc:  # noqa: BLE001 - gathered, raised below
                failures.append(exc)
                return
            if what == "started":
                r = host.report
                pip = f", installed {' '.join(r.installed)}" if r.installed else ""
                self._say(
                    f"parl ssh: {r.name}: host agent at {r.agent} with {r.cpus} slot(s), "
                    f"Python {r.python}{pip}, {r.uploaded} bytes uploaded, {r.seconds:.2f} s"
                )

        with ThreadPoolExecutor(max_workers=len(self._hosts)) as pool:
            list(pool.map(run, self._hosts))
        if len(failures) == 1:
            raise failures[0]
        if failures:
            first = failures[0]
            lines = "\n  - ".join(str(f) for f in failures)
            kind = type(first) if isinstance(first, SSHError) else SSHError
            raise kind(f"{len(failures)} hosts failed:\n  - {lines}") from first

    def _say(self, line: str) -> None:
        log.info("%s", line)
        if self.progress:
            from tqdm import tqdm

            tqdm.write(line, file=sys.stderr)

    def _drop_in_child(self) -> None:
        """In a forked child: close the copies of the SSH connections' sockets, so that the
        parent's death still ends every SSH session, and with it every remote process."""
        for host in self._hosts:
            if host.conn is not None:
                host.conn.drop_in_child()
            if host.forward is not None:
                host.forward.drop_in_child()
        # (the master's sockets are left: a shutdown here would end the parent's too)

    def close(self) -> None:
        """End every host agent (stdin closed, then the SSH connections), then the master."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()


def _close_all(pid: int, hosts: list[_Host], servers: list[Server | None]) -> None:
    if os.getpid() != pid:  # a forked child: the SSH sessions are its parent's, not to touch
        return
    for host in hosts:
        host.stop()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for host in hosts:
        host.close(deadline)
    for server in servers:
        if server is not None:
            server.close()


def _master_binds(local_addresses: list[str | None]) -> list[str]:
    """Where the master listens: loopback when every host is reached over loopback (or
    through a jump host), else each address of this machine that a host was reached from
    (never every address: the rule is loopback unless told otherwise)."""
    direct = {a for a in local_addresses if a is not None}
    if all(a.startswith("127.") or a == "::1" for a in direct):
        return ["127.0.0.1"]
    return sorted(direct)
