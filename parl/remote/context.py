"""Where new actors go: ``parl.connect`` chooses the carrier; the default is local workers.

The state is per process: a forked child that creates actors gets its own carrier and never
touches its parent's workers. Nothing is created until the first actor is.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, cast

from parl.local import DEFAULT_LINGER_S, DEFAULT_STOP_TIMEOUT_S, LocalCarrier
from parl.wire.caller import Connection

_LOCAL_NAMES = (None, "", "local")
_DEFAULT_SLOT_TIMEOUT_S = 60.0
_DEFAULT_MAX_FRAME = 1 << 32


class Carrier(Protocol):
    """What every carrier offers: actors' connections, and an end."""

    def create(self, class_name: str, options: dict[str, Any]) -> Connection:
        """Start a worker for an actor of ``class_name``; its connection (no INIT sent)."""

    def close(self) -> None: ...

    @property
    def live_actors(self) -> int: ...

    @property
    def server_pid(self) -> int | None:
        """A local process the carrier runs for its actors (None: none now)."""


class _Context:
    def __init__(self, carrier: Carrier) -> None:
        self.pid = os.getpid()
        self.carrier = carrier
        self.connections: weakref.WeakSet[Connection] = weakref.WeakSet()

    def shutdown(self) -> None:
        if self.pid != os.getpid():
            return
        for conn in list(self.connections):
            conn.close()
        self.carrier.close()


_lock = threading.Lock()
_context: _Context | None = None
_options: dict[str, Any] = {}
_atexit_registered = False


def connect(
    address: str | None = None,
    distributed_files: Sequence[str] = (),
    *,
    forward_output: bool = True,
    preload: str | tuple[str, ...] | list[str] = (),
    shm_threshold: int = 1 << 17,
    linger: float = DEFAULT_LINGER_S,
    stop_timeout: float = DEFAULT_STOP_TIMEOUT_S,
    slot_timeout: float = _DEFAULT_SLOT_TIMEOUT_S,
    max_frame: int = _DEFAULT_MAX_FRAME,
    hosts: str | Sequence[Any] | None = None,
    ssh: Any = None,
    accept_unknown_host_keys: bool = False,
    monitor_port: int = 0,
    install: str | None = None,
    wheels: str | os.PathLike[str] | None = None,
) -> None:
    """Choose where actors created from now on run.

    Existing actors keep running where they are. Without any call, actors run in local worker
    processes of this machine.

    Args:
        address: Where the actors go.

            - None or ``"local"``: local worker processes.
            - ``"host:port"``: the cluster whose master ``xparl start`` started there. The
              cluster secret must be here too (``~/.parl/cluster_secret`` or
              ``PARL_CLUSTER_SECRET``); the master is contacted at once, so a wrong address
              or secret raises here, not at the first actor.
            - A path without ``:``: a hosts file, as ``hosts=`` (see below).
            - ``"ray"``: Ray actors, on the Ray this process initialised, else on the one
              ``ray.init()`` starts or joins; ``"ray://head:10001"``: through Ray Client (see
              docs/guides/ray.md; needs ``pip install 'parl-torch[ray]'``).

        distributed_files: (Cluster, SSH hosts, Ray; also the second positional argument, as
            in PARL's ``connect(master_address, distributed_files)``.) Globs, relative to the
            entry script's folder, of files and folders to deploy besides that folder's own,
            e.g. ``["data/*.npz", "config.json"]``. The folder itself is packed minus
            ``.git``, virtual environments, caches, what its ``.gitignore`` files ignore,
            credentials (``.env``, private keys) and files over 32 MiB, and sent once per host
            and content. A file named here is shipped even if ignored or a credential; a
            folder goes with everything in it but credentials, empty folders included.

    **Every carrier:**

    Args:
        forward_output: Print actors' stdout and stderr here, each line prefixed with the
            actor's name (on Ray: Ray's ``log_to_driver`` when this call starts Ray).
        stop_timeout: Seconds a closed actor's worker may take to finish (its ``__del__``,
            ``atexit`` handlers, flushing files) before it is killed; program exit waits for
            them.

    **Local workers only:**

    Args:
        preload: Modules the worker pool imports once, e.g. ``"torch"`` or
            ``["torch", "gymnasium"]``, so that each actor starts without importing them.
        shm_threshold: Arrays of at least this many bytes cross through shared memory.
        linger: Seconds the worker pool stays after the last actor ends (0: stop at once).

    **A cluster and SSH hosts (slot_timeout on Ray too):**

    Args:
        slot_timeout: Seconds creating an actor waits for a free slot (on Ray: for Ray to
            place and start it).
        max_frame: The largest message, in bytes, on an actor's connection (at least 65536).

    **SSH hosts only:**

    Args:
        hosts: A hosts file's path, or a list of host strings (``"user@box:22 cpus=4"``) or
            :class:`parl.ssh.hosts.HostSpec`. A master starts in this process and a host
            agent on each host over SSH (see docs/guides/ssh.md); this package and the
            project folder (plus the ``distributed_files`` globs) are deployed there.
        ssh: A :class:`parl.ssh.client.SSHOptions` (ssh config and known_hosts files);
            None: the defaults.
        accept_unknown_host_keys: Trust hosts whose key is in no known_hosts file, for this
            run (never written there; a changed key is refused all the same). Off by default.
        monitor_port: Serve the launched cluster's monitor page on this port of 127.0.0.1
            (see docs/guides/monitor.md); 0: no page.
        install: ``"venv"`` installs what a host's Python lacks (or has in another version)
            into a virtual environment there, as a host's ``install=venv`` line does;
            ``"no"`` installs nothing; None: as each host's line says.
        wheels: A folder of wheel files that ``install="venv"`` uploads and installs from
            (``pip --no-index``); None: the host's package index.

    Raises:
        TypeError: ``address`` is not a string, or ``distributed_files`` is not a list of
            globs.
        ValueError: A malformed ``"host:port"`` or an option out of its range, or an SSH-only
            option (``monitor_port``, ``install``, ``wheels``) without ``hosts``.
        parl.errors.HostsFileError: ``address`` has no port and names no file.
        parl.ClusterError: The cluster's master cannot be reached or refuses the secret.
        ImportError: ``"ray"`` without Ray installed.
    """
    if address not in _LOCAL_NAMES and not isinstance(address, str):
        raise TypeError(
            f"address must be a str such as 'localhost:8010' or 'local', got "
            f"{type(address).__name__}"
        )
    ray = _is_ray(address)
    if address not in _LOCAL_NAMES and ":" not in str(address) and not ray:
        _check_hosts_file(str(address))
        address, hosts = None, address  # a hosts file
    elif address not in _LOCAL_NAMES and not ray:
        # checked before any secret is read or any socket opened
        _check_cluster_address(str(address))
    specs = _host_specs(hosts) if hosts is not None else None
    if (
        isinstance(slot_timeout, bool)
        or not isinstance(slot_timeout, (int, float))
        or not (0 <= slot_timeout < float("inf"))
    ):
        raise ValueError(
            f"slot_timeout must be a finite number of seconds >= 0, got {slot_timeout!r}"
        )
    if isinstance(max_frame, bool) or not isinstance(max_frame, int) or max_frame < 1 << 16:
        raise ValueError(f"max_frame must be an int of at least 65536 (bytes), got {max_frame!r}")
    if not isinstance(shm_threshold, int) or shm_threshold < 0:
        raise ValueError(f"shm_threshold must be an int >= 0 (bytes), got {shm_threshold!r}")
    if isinstance(linger, bool) or not isinstance(linger, (int, float)) or not linger >= 0:
        raise ValueError(f"linger must be a number of seconds >= 0, got {linger!r}")
    if (
        isinstance(stop_timeout, bool)
        or not isinstance(stop_timeout, (int, float))
        or not 0 <= stop_timeout < float("inf")
    ):
        raise ValueError(
            f"stop_timeout must be a finite number of seconds >= 0 (e.g. stop_timeout=5), "
            f"got {stop_timeout!r}"
        )
    preload = _module_names(preload)
    if isinstance(distributed_files, str) or not all(
        isinstance(name, str) for name in distributed_files
    ):
        raise TypeError(
            f"distributed_files must be a list of globs (e.g. ['data/*.npz']), got "
            f"{distributed_files!r}"
        )
    options: dict[str, Any] = dict(
        address=None if address in _LOCAL_NAMES else address,
        forward_output=bool(forward_output),
        preload=preload,
        shm_threshold=shm_threshold,
        linger=float(linger),
        stop_timeout=float(stop_timeout),
        slot_timeout=float(slot_timeout),
        max_frame=max_frame,
        distributed_files=tuple(distributed_files),
        ray=ray,
    )
    if specs is not None:
        from parl.ssh.client import SSHOptions

        options["address"] = None
        ssh = ssh if ssh is not None else SSHOptions()
        if accept_unknown_host_keys:
            ssh = dataclasses.replace(ssh, accept_unknown_host_keys=True)
        if isinstance(monitor_port, bool) or not isinstance(monitor_port, int):
            raise TypeError(f"monitor_port must be an int (0: no page), got {monitor_port!r}")
        if not 0 <= monitor_port < 65536:
            raise ValueError(f"monitor_port must be between 0 and 65535, got {monitor_port}")
        if install not in (None, "venv", "no"):
            raise ValueError(f"install must be 'venv', 'no' or None, got {install!r}")
        from parl.ssh.install import wheelhouse

        options.update(install=install, wheels=wheelhouse(wheels))
        options.update(
            hosts=specs,
            ssh=ssh,
            distributed_files=tuple(distributed_files),
            monitor_port=monitor_port,
        )
    elif monitor_port:
        raise ValueError(
            "monitor_port is for clusters launched with hosts=...; a local program serves its "
            "page with parl.monitor(), an xparl cluster with `xparl start --monitor_port`"
        )
    elif install is not None or wheels is not None:
        raise ValueError(
            "install and wheels are for hosts launched with hosts=...; on an xparl cluster, "
            "install the packages on its machines (or give the hosts file install=venv)"
        )
    # a cluster is reached now: a wrong address or secret shows here, not at the first actor
    remote = options["address"] is not None or specs is not None
    new = _Context(_carrier(options)) if remote else None
    global _context
    with _lock:
        _options.clear()
        _options.update(options)
        if _context is not None and _context.pid == os.getpid():
            old, _context = _context, None
            _retire(old)
        if new is not None:
            _context = new
            _at_exit_once()


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


def _is_ray(address: object) -> bool:
    return isinstance(address, str) and (address == "ray" or address.startswith("ray://"))


def _carrier(options: dict[str, Any]) -> Carrier:
    """The carrier ``options`` (of ``connect``) ask for."""
    if options.get("ray"):
        return _ray_carrier(options)
    if options.get("hosts"):
        from parl.ssh.carrier import SSHCarrier  # imported only by SSH users

        return SSHCarrier(
            options["hosts"],
            options["ssh"],
            distributed_files=options["distributed_files"],
            monitor_port=options.get("monitor_port", 0),
            install=options.get("install"),
            wheels=options.get("wheels"),
            forward_output=options["forward_output"],
            slot_timeout=options["slot_timeout"],
            max_frame=options["max_frame"],
            stop_timeout=options["stop_timeout"],
        )
    if options.get("address") is None:
        return LocalCarrier(
            forward_output=options.get("forward_output", True),
            preload=options.get("preload", ()),
            threshold=options.get("shm_threshold", 1 << 17),
            linger=options.get("linger", DEFAULT_LINGER_S),
            stop_timeout=options.get("stop_timeout", DEFAULT_STOP_TIMEOUT_S),
        )
    from parl.cluster.carrier import ClusterCarrier  # imported only by cluster users

    return ClusterCarrier(
        options["address"],
        forward_output=options["forward_output"],
        slot_timeout=options["slot_timeout"],
        max_frame=options["max_frame"],
        stop_timeout=options["stop_timeout"],
        distributed_files=options["distributed_files"],
    )


def _ray_carrier(options: dict[str, Any]) -> Carrier:
    """Ray is imported here only: ``import parl`` never imports it."""
    try:
        from parl.ray.carrier import RayCarrier
    except ImportError as exc:
        from parl.ray import INSTALL_HINT

        raise ImportError(
            f"parl.connect({options['address']!r}) needs Ray, which is not importable here "
            f"({exc}); install it: {INSTALL_HINT}"
        ) from exc
    carrier = RayCarrier(
        options["address"],
        forward_output=options["forward_output"],
        slot_timeout=options["slot_timeout"],
        distributed_files=options["distributed_files"],
        stop_timeout=options["stop_timeout"],
    )
    # Ray shuts itself down at exit, in an atexit handler registered when it was imported:
    # ours must run before it (last registered, first run), so that the actors end as
    # documented (their __del__ and atexit handlers) instead of being killed with Ray
    global _atexit_registered
    atexit.unregister(_shutdown_at_exit)
    atexit.register(_shutdown_at_exit)
    if not _atexit_registered:
        os.register_at_fork(after_in_child=_new_lock)
        _atexit_registered = True
    # its connections offer what proxies and futures use of Connection, without its socket
    return cast(Carrier, carrier)


def _host_specs(hosts: object) -> list[Any]:
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
    names: tuple[object, ...] = tuple(preload) if isinstance(preload, Iterable) else (None,)
    if not all(isinstance(name, str) and name for name in names):
        raise TypeError(
            f"preload must be a module name or a list of module names (e.g. preload='torch' "
            f"or preload=['torch', 'gymnasium']), got {preload!r}"
        )
    return names  # type: ignore[return-value]  # all str, checked above


def disconnect() -> None:
    """Close the actors of the current connection and stop its local workers.

    The current connection's actors are those created since the last :func:`connect`.
    Actors of an earlier connection that a later ``connect`` replaced keep running until they
    are closed or the program ends. Actors created afterwards run on local workers with the
    default options, as without any ``connect``.
    """
    global _context
    with _lock:
        context, _context = _context, None
        _options.clear()
    if context is not None:
        context.shutdown()


def actors_share_memory() -> bool:
    """Whether actors created now run in local workers, which share ``parl.shm`` handles with
    this process (what an actor writes into one, this process sees). On a cluster, SSH hosts
    or Ray a handle is refused (:class:`parl.SharedHandleError`), so results must come back
    as return values."""
    options = _options
    return options.get("address") is None and not options.get("hosts") and not options.get("ray")


def current() -> _Context:
    """The context of this process, created on first use."""
    global _context
    context = _context
    if context is not None and context.pid == os.getpid():
        return context
    with _lock:
        if _context is None or _context.pid != os.getpid():
            _context = _Context(_carrier(_options))
            _at_exit_once()
        return _context


def _at_exit_once() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_shutdown_at_exit)
        os.register_at_fork(after_in_child=_new_lock)
        _atexit_registered = True


def _new_lock() -> None:
    """In a forked child: the lock may have been held by another thread of the parent."""
    global _lock
    _lock = threading.Lock()


def _retire(context: _Context) -> None:
    """A context replaced by ``connect``: its actors keep working until they are closed."""
    _retired[:] = [c for c in _retired if c.carrier.live_actors or c.carrier.server_pid]
    if context.carrier.live_actors or context.carrier.server_pid:
        _retired.append(context)
    else:
        context.carrier.close()  # nothing of it is in use (a cluster's connections end)


_retired: list[_Context] = []


def _shutdown_at_exit() -> None:
    for context in [_context, *_retired]:
        if context is not None:
            context.shutdown()
