"""The SSH carrier: the cluster carrier, on a cluster this process launched over SSH.

``parl.connect(hosts=...)`` builds one. It launches (:mod:`parl.ssh.launcher`) a master here
and a host agent on every listed host, then places actors exactly as ``parl.connect
("host:port")`` does, with the launch's own secret: calls go over direct, authenticated TCP
to the workers. Closing it (or this process ending) ends every process it started.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parl.cluster.carrier import ClusterCarrier
from parl.ssh.client import SSHOptions
from parl.ssh.hosts import HostSpec
from parl.ssh.launcher import HostReport, Launch
from parl.wire.caller import Connection
from parl.wire.contract import RemoteOptions


class SSHCarrier:
    def __init__(
        self,
        hosts: Sequence[HostSpec],
        ssh: SSHOptions,
        *,
        distributed_files: Sequence[str] = (),
        progress: bool = True,
        monitor_port: int = 0,
        install: str | None = None,
        wheels: str | None = None,
        **cluster_options: Any,
    ) -> None:
        self.launch = Launch(
            hosts,
            ssh,
            distributed_files,
            progress,
            monitor_port=monitor_port,
            install=install,
            wheels=wheels,
        )
        try:
            # the same project archive as the launch's: the host agents already hold it
            self._cluster = ClusterCarrier(
                self.launch.address,
                secret=self.launch.secret,
                distributed_files=distributed_files,
                **cluster_options,
            )
        except BaseException:
            self.launch.close()
            raise

    @property
    def reports(self) -> list[HostReport]:
        return self.launch.reports

    def create(self, class_name: str, options: RemoteOptions) -> Connection:
        return self._cluster.create(class_name, options)

    def close(self) -> None:
        """Close the actors' connections, then end the host agents and the master."""
        try:
            self._cluster.close()
        finally:
            self.launch.close()

    @property
    def live_actors(self) -> int:
        return self._cluster.live_actors

    @property
    def server_pid(self) -> int | None:
        return None
