"""The master of ``xparl start --hosts FILE``: a cluster master that also launches a host agent
over SSH on every host of FILE and holds their SSH connections, so that they end with it.

``python -m parl.ssh.daemon master HOST PORT 0 READY_FD --hosts=FILE [--ssh_config=FILE]
[--known_hosts=FILE] [--wheels=DIR] [--accept_unknown_host_keys] ...``: the arguments of the
cluster's master (:mod:`parl.cluster.daemon`), which this runs with :func:`launch_hosts` as its
launcher of hosts. A launch that fails is the master's ``error`` line, with the message
``parl.connect(hosts=...)`` would raise.
"""

from __future__ import annotations

import dataclasses
import socket
import sys

from parl.cluster import daemon
from parl.cluster.server import Server
from parl.ssh.client import SSHOptions
from parl.ssh.hosts import read_hosts
from parl.ssh.launcher import Launch


def launch_hosts(server: Server, secret: bytes, options: dict[str, str], accept: bool) -> Launch:
    """Host agents over SSH on the hosts of ``options["hosts"]``, registered with ``server``'s
    master; closing the launch ends them (and their workers)."""
    ssh = SSHOptions(accept_unknown_host_keys=accept)
    if options.get("ssh_config"):
        ssh = dataclasses.replace(ssh, config=options["ssh_config"])
    if options.get("known_hosts"):
        ssh = dataclasses.replace(ssh, known_hosts=(options["known_hosts"],))
    specs = read_hosts(options["hosts"])
    wheels = options.get("wheels") or None
    return Launch(specs, ssh, progress=False, cluster=server, secret=secret, wheels=wheels)


def main(argv: list[str]) -> int:
    return daemon.main(argv, launch=launch_hosts)


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    sys.exit(main(sys.argv[1:]))
