"""The ``xparl`` command: the cluster's command line (:mod:`parl.cluster.cli`) with
``xparl start --hosts FILE``, which launches the hosts of FILE over SSH.

The cluster knows nothing of SSH: this module gives its command line the check of the
``--hosts`` options (a bad hosts file fails ``xparl start`` before anything starts) and the
master that launches the hosts (:mod:`parl.ssh.daemon`). ``python -m parl.ssh.xparl`` runs
what the ``xparl`` script runs.
"""

from __future__ import annotations

import argparse
import os
import sys

from parl.cluster import cli
from parl.ssh.hosts import read_hosts


def hosts_options(args: argparse.Namespace) -> list[str]:
    """The master's options for ``--hosts``; the hosts file is read here first, so that a bad
    line fails ``xparl start`` before anything starts."""
    read_hosts(args.hosts)
    options = [f"--hosts={os.path.abspath(args.hosts)}"]
    for name in ("ssh_config", "known_hosts", "wheels"):
        path = getattr(args, name)
        if path:
            if not (os.path.isdir if name == "wheels" else os.path.isfile)(path):
                raise ValueError(
                    f"--{name} {path}: no such " + ("folder" if name == "wheels" else "file")
                )
            options.append(f"--{name}={os.path.abspath(path)}")
    return options + (["--accept_unknown_host_keys"] if args.accept_unknown_host_keys else [])


SSH_HOSTS = cli.HostsLauncher(options=hosts_options, daemon="parl.ssh.daemon")


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, hosts=SSH_HOSTS)


if __name__ == "__main__":
    sys.exit(main())
