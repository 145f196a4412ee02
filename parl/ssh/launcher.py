"""Launching a cluster over SSH: a master in this process, a host agent on every listed host.

For each host, in parallel (:mod:`parl.ssh.session`): connect (:mod:`parl.ssh.client`),
probe its Python and cache (:mod:`parl.ssh.remote`), upload by SFTP the code archives it lacks
(this package and the caller's project, :mod:`parl.deploy.packer`) and unpack them. Then a master starts here, on
an address the hosts reach, and each host starts ``python -m parl.cluster.daemon agent`` in
its session, reading the per-launch secret from stdin (never on a command line or in the
environment). When the session ends (``close``, the caller exiting or being killed), the
agent's stdin closes and so does its connection to the master: it stops its workers and exits.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from parl.cluster import control
from parl.cluster.master import Master
from parl.cluster.server import Server
from parl.deploy.packer import pack_parl, pack_project, project_root
from parl.errors import SSHError
from parl.monitoring.server import MonitorServer
from parl.ssh import remote
from parl.ssh.client import SSHOptions
from parl.ssh.hosts import HostSpec
from parl.ssh.session import HostReport, HostSession
from parl.wire.forking import drop_in_child

log = logging.getLogger("parl.ssh")
STOP_TIMEOUT_S = 10.0


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
        self._hosts = [HostSession(spec, options, HostReport(spec.name)) for spec in hosts]
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

            def start(host: HostSession) -> None:
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

    def _each(self, step: Callable[[HostSession], None], what: str) -> None:
        """Run ``step`` on every host in parallel; one progress line per host; the errors of
        all failed hosts raised together (as the first one's type)."""
        failures: list[BaseException] = []

        def run(host: HostSession) -> None:
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


def _close_all(pid: int, hosts: list[HostSession], servers: list[Server | None]) -> None:
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
