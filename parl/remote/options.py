"""``parl.connect``'s arguments, checked once into a frozen :class:`ConnectOptions`.

Every check happens here, before any secret is read or socket opened; what comes out is a typed
record that :mod:`parl.remote.context` hands to the carrier it picks. Nothing here runs per call.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from parl.local import DEFAULT_LINGER_S, DEFAULT_STOP_TIMEOUT_S
from parl.shm.link import DEFAULT_THRESHOLD
from parl.validation import check_bool, check_float, check_int
from parl.wire.contract import check_max_frame, check_stop_timeout

if TYPE_CHECKING:
    from parl.ssh.client import SSHOptions
    from parl.ssh.hosts import HostSpec

LOCAL_NAMES = (None, "", "local")
DEFAULT_SLOT_TIMEOUT_S = 60.0
DEFAULT_MAX_FRAME = 1 << 32

CarrierKind = Literal["local", "cluster", "ssh", "ray"]


@dataclass(frozen=True)
class ConnectOptions:
    """Where actors created from now on run, and how (see :func:`parl.connect`).

    Attributes:
        address: ``"host:port"`` of a cluster's master, or ``"ray"`` / ``"ray://head:10001"``
            (with ``ray``); None: local workers, or the SSH hosts of ``hosts``.
        ray: The actors are Ray actors (on the Ray this process initialised, else on the one
            ``ray.init()`` starts or joins; see docs/guides/ray.md).
        distributed_files: (Cluster, SSH hosts, Ray.) Globs, relative to the entry script's
            folder, of files and folders to deploy besides that folder's own, e.g.
            ``("data/*.npz", "config.json")``. The folder itself is packed minus ``.git``,
            virtual environments, caches, what its ``.gitignore`` files ignore, credentials
            (``.env``, private keys) and files over 32 MiB, and sent once per host and content.
            A file named here is shipped even if ignored or a credential; a folder goes with
            everything in it but credentials, empty folders included.
        forward_output: (Every carrier.) Print actors' stdout and stderr here, each line
            prefixed with the actor's name (on Ray: Ray's ``log_to_driver`` when connecting
            starts Ray).
        stop_timeout: (Every carrier.) Seconds a closed actor's worker may take to finish (its
            ``__del__``, ``atexit`` handlers, flushing files) before it is killed; program exit
            waits for them.
        preload: (Local workers.) Modules the worker pool imports once, e.g. ``("torch",)``,
            so that each actor starts without importing them.
        shm_threshold: (Local workers.) Arrays of at least this many bytes cross through
            shared memory.
        linger: (Local workers.) Seconds the worker pool stays after the last actor ends (0:
            stop at once).
        slot_timeout: (Cluster, SSH hosts, Ray.) Seconds creating an actor waits for a free
            slot (on Ray: for Ray to place and start it).
        max_frame: (Cluster, SSH hosts.) The largest message, in bytes, on an actor's
            connection (at least 65536).
        hosts: (SSH hosts.) The hosts, parsed from a hosts file or host strings: a master
            starts in this process and a host agent on each host over SSH (see
            docs/guides/ssh.md); this package and the project folder (plus the
            ``distributed_files`` globs) are deployed there. None: no SSH hosts.
        ssh: (SSH hosts.) ssh config and known_hosts files, with ``accept_unknown_host_keys``
            (trust hosts whose key is in no known_hosts file, for this run; never written
            there, and a changed key is refused all the same).
        monitor_port: (SSH hosts.) Serve the launched cluster's monitor page on this port of
            127.0.0.1 (see docs/guides/monitor.md); 0: no page.
        install: (SSH hosts.) ``"venv"`` installs what a host's Python lacks (or has in
            another version) into a virtual environment there, as a host's ``install=venv``
            line does; ``"no"`` installs nothing; None: as each host's line says.
        wheels: (SSH hosts.) An absolute folder of wheel files that ``install="venv"``
            uploads and installs from (``pip --no-index``); None: the host's package index.
    """

    address: str | None = None
    ray: bool = False
    distributed_files: tuple[str, ...] = ()
    forward_output: bool = True
    stop_timeout: float = DEFAULT_STOP_TIMEOUT_S
    preload: tuple[str, ...] = ()
    shm_threshold: int = DEFAULT_THRESHOLD
    linger: float = DEFAULT_LINGER_S
    slot_timeout: float = DEFAULT_SLOT_TIMEOUT_S
    max_frame: int = DEFAULT_MAX_FRAME
    hosts: tuple[HostSpec, ...] | None = None
    ssh: SSHOptions | None = None
    monitor_port: int = 0
    install: str | None = None
    wheels: str | None = None

    @property
    def carrier(self) -> Literal["local", "cluster", "ssh", "ray"]:
        """Which carrier these options ask for."""
        if self.ray:
            return "ray"
        if self.hosts:
            return "ssh"
        return "local" if self.address is None else "cluster"


def connect_options(
    address: str | None,
    distributed_files: Sequence[str],
    *,
    forward_output: bool,
    preload: str | Sequence[str],
    shm_threshold: int,
    linger: float,
    stop_timeout: float,
    slot_timeout: float,
    max_frame: int,
    hosts: str | os.PathLike[str] | Sequence[Any] | None,
    ssh: SSHOptions | None,
    accept_unknown_host_keys: bool,
    monitor_port: int,
    install: str | None,
    wheels: str | os.PathLike[str] | None,
) -> ConnectOptions:
    """``parl.connect``'s arguments as :class:`ConnectOptions`, checked in the order its
    errors are documented: ``address`` first, then the numbers, then the SSH options."""
    if address not in LOCAL_NAMES and not isinstance(address, str):
        raise TypeError(
            f"address must be a str such as 'localhost:8010' or 'local', got "
            f"{type(address).__name__}"
        )
    ray = is_ray(address)
    if address not in LOCAL_NAMES and ":" not in str(address) and not ray:
        _check_hosts_file(str(address))
        address, hosts = None, address  # a hosts file
    elif address not in LOCAL_NAMES and not ray:
        # checked before any secret is read or any socket opened
        _check_cluster_address(str(address))
    specs = _host_specs(hosts) if hosts is not None else None
    slot_timeout, max_frame, shm_threshold, linger, stop_timeout = _numbers(
        slot_timeout, max_frame, shm_threshold, linger, stop_timeout
    )
    modules = _module_names(preload)
    if isinstance(distributed_files, str) or not all(
        isinstance(name, str) for name in distributed_files
    ):
        raise TypeError(
            f"distributed_files must be a list of globs (e.g. ['data/*.npz']), got "
            f"{distributed_files!r}"
        )
    ssh, wheels, monitor_port = _ssh_options(
        specs, ssh, accept_unknown_host_keys, monitor_port, install, wheels
    )
    return ConnectOptions(
        address=None if address in LOCAL_NAMES or specs is not None else address,
        ray=ray,
        distributed_files=tuple(distributed_files),
        forward_output=check_bool("forward_output", forward_output),
        stop_timeout=stop_timeout,
        preload=modules,
        shm_threshold=shm_threshold,
        linger=linger,
        slot_timeout=slot_timeout,
        max_frame=max_frame,
        hosts=None if specs is None else tuple(specs),
        ssh=ssh,
        monitor_port=monitor_port,
        install=install if specs is not None else None,
        wheels=wheels,
    )


def _numbers(
    slot_timeout: object,
    max_frame: object,
    shm_threshold: object,
    linger: object,
    stop_timeout: object,
) -> tuple[float, int, int, float, float]:
    """The numeric options as Python's float and int (a numpy int kept as given would reach
    the cluster's JSON messages); TypeError for one that is not a number, ValueError for one
    out of range."""
    seconds = "a finite number of seconds >= 0"
    return (
        check_float("slot_timeout", slot_timeout, low=0, what=seconds),
        check_max_frame(max_frame),
        check_int("shm_threshold", shm_threshold, low=0, what="an int >= 0 (bytes)"),
        check_float("linger", linger, low=0, finite=False, what="a number of seconds >= 0"),
        check_stop_timeout(stop_timeout),
    )


def _ssh_options(
    specs: list[HostSpec] | None,
    ssh: SSHOptions | None,
    accept_unknown_host_keys: bool,
    monitor_port: int,
    install: str | None,
    wheels: str | os.PathLike[str] | None,
) -> tuple[SSHOptions | None, str | None, int]:
    """The SSH options, the wheels folder and the monitor's port for ``specs``' launch,
    checked (None, None, 0 without hosts); ValueError for an SSH-only option given without
    hosts."""
    port = check_int("monitor_port", monitor_port, low=0, high=65535, hint="0: no page")
    check_bool("accept_unknown_host_keys", accept_unknown_host_keys)
    if specs is None:
        if port:
            raise ValueError(
                "monitor_port is for clusters launched with hosts=...; a local program serves "
                "its page with parl.monitor(), an xparl cluster with `xparl start "
                "--monitor_port`"
            )
        if install is not None or wheels is not None:
            raise ValueError(
                "install and wheels are for hosts launched with hosts=...; on an xparl "
                "cluster, install the packages on its machines (or give the hosts file "
                "install=venv)"
            )
        return None, None, 0
    from parl.ssh.client import SSHOptions
    from parl.ssh.install import wheelhouse

    ssh = ssh if ssh is not None else SSHOptions()
    if accept_unknown_host_keys:
        ssh = dataclasses.replace(ssh, accept_unknown_host_keys=True)
    if install not in (None, "venv", "no"):
        raise ValueError(f"install must be 'venv', 'no' or None, got {install!r}")
    return ssh, wheelhouse(wheels), port


def _check_hosts_file(address: str) -> None:
    """An ``address`` without ``:`` is a hosts file's path; one that names no file was most
    likely a cluster address whose port was forgotten."""
    if os.path.exists(address):
        return
    from parl.errors import HostsFileError

    raise HostsFileError(
        f"parl.connect({address!r}): {address!r} has no port, so it was read as a hosts file, "
        f"and no file {os.path.abspath(address)} exists. A cluster's address needs the port "
        f"`xparl start --port` was given, e.g. '{address}:8010'; a hosts file must be an "
        f"existing file (check the path)"
    )


def _check_cluster_address(address: str) -> None:
    """``"host:port"`` with a port from 1 to 65535, else ValueError naming what is wrong."""
    host, _, port = address.rpartition(":")
    example = f"'{host or 'localhost'}:8010'"
    if not host.strip("[]"):
        raise ValueError(
            f"parl.connect({address!r}): the address has no host; give 'host:port', e.g. "
            f"'localhost:8010'"
        )
    if not port.isdigit():
        raise ValueError(
            f"parl.connect({address!r}): the port {port!r} is not a number; give "
            f"'host:port' with the port `xparl start --port` was given, e.g. {example}"
        )
    if not 0 < int(port) < 65536:
        raise ValueError(
            f"parl.connect({address!r}): port {int(port)} is out of range (1-65535); give "
            f"the port `xparl start --port` was given, e.g. {example}"
        )


def is_ray(address: object) -> bool:
    return isinstance(address, str) and (address == "ray" or address.startswith("ray://"))


def _host_specs(hosts: object) -> list[HostSpec]:
    """``hosts`` of ``connect`` as a list of HostSpec: a hosts file's path, or a list of host
    strings and HostSpecs."""
    from parl.ssh.hosts import HostSpec, parse_host, read_hosts

    if isinstance(hosts, (str, os.PathLike)):
        return read_hosts(os.fspath(hosts))
    if not isinstance(hosts, Iterable):
        raise TypeError(f"hosts must be a hosts file's path or a list of hosts, got {hosts!r}")
    specs = [h if isinstance(h, HostSpec) else parse_host(h) for h in hosts]
    if not specs:
        raise ValueError("hosts is empty: list at least one host")
    return specs


def _module_names(preload: object) -> tuple[str, ...]:
    """``preload`` as a tuple of module names; one name alone is one module (not its letters)."""
    if isinstance(preload, str):
        return (preload,) if preload else ()
    names = tuple(preload) if isinstance(preload, Iterable) else (None,)
    if not all(isinstance(name, str) and name for name in names):
        raise TypeError(
            f"preload must be a module name or a list of module names (e.g. preload='torch' "
            f"or preload=['torch', 'gymnasium']), got {preload!r}"
        )
    return tuple(str(name) for name in names)
