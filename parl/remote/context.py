"""Where new actors go: ``parl.connect`` chooses the carrier; the default is local workers.

The state is per process: a forked child that creates actors gets its own carrier and never
touches its parent's workers. Nothing is created until the first actor is.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from parl.local import DEFAULT_LINGER_S, DEFAULT_STOP_TIMEOUT_S, LocalCarrier
from parl.remote.options import (
    DEFAULT_MAX_FRAME,
    DEFAULT_SLOT_TIMEOUT_S,
    CarrierKind,
    ConnectOptions,
    connect_options,
)
from parl.shm.link import DEFAULT_THRESHOLD
from parl.wire.contract import ActorConnection, Carrier

if TYPE_CHECKING:
    from parl.ssh.client import SSHOptions
    from parl.ssh.hosts import HostSpec

__all__ = ["Carrier", "ConnectOptions", "actors_share_memory", "connect", "current", "disconnect"]


class _Context:
    def __init__(self, carrier: Carrier) -> None:
        self.pid = os.getpid()
        self.carrier = carrier
        self.connections: weakref.WeakSet[ActorConnection] = weakref.WeakSet()

    def shutdown(self) -> None:
        if self.pid != os.getpid():
            return
        for conn in list(self.connections):
            conn.close()
        self.carrier.close()


_lock = threading.Lock()
_context: _Context | None = None
_options = ConnectOptions()
_atexit_registered = False


def connect(
    address: str | None = None,
    distributed_files: Sequence[str] = (),
    *,
    forward_output: bool = True,
    preload: str | Sequence[str] = (),
    shm_threshold: int = DEFAULT_THRESHOLD,
    linger: float = DEFAULT_LINGER_S,
    stop_timeout: float = DEFAULT_STOP_TIMEOUT_S,
    slot_timeout: float = DEFAULT_SLOT_TIMEOUT_S,
    max_frame: int = DEFAULT_MAX_FRAME,
    hosts: str | os.PathLike[str] | Sequence[str | HostSpec] | None = None,
    ssh: SSHOptions | None = None,
    accept_unknown_host_keys: bool = False,
    monitor_port: int = 0,
    install: str | None = None,
    wheels: str | os.PathLike[str] | None = None,
) -> None:
    """Choose where actors created from now on run (existing actors stay where they are).

    Without any call, actors run in local worker processes. Every option is described in full
    at :class:`~parl.remote.options.ConnectOptions`.

    Args:
        address: None or ``"local"``: local workers. ``"host:port"``: the cluster ``xparl
            start`` started there (contacted at once). A path without ``:``: a hosts file, as
            ``hosts=``. ``"ray"`` or ``"ray://head:10001"``: Ray actors (docs/guides/ray.md).
        distributed_files: (Cluster, SSH hosts, Ray.) Globs of files to deploy besides the
            entry script's folder, as in PARL's ``connect(master_address, distributed_files)``.
        forward_output: (Every carrier.) Print actors' output here, prefixed with their name.
        stop_timeout: (Every carrier.) Seconds a closed actor may take to end before a kill.
        preload: (Local workers only.) Modules the worker pool imports once, e.g. ``"torch"``.
        shm_threshold: (Local workers only.) Arrays this large cross through shared memory.
        linger: (Local workers only.) Seconds the pool stays after the last actor ends.
        slot_timeout: (Cluster, SSH hosts, Ray.) Seconds creating an actor waits for a slot.
        max_frame: (Cluster, SSH hosts.) The largest message on an actor's connection.
        hosts: (SSH hosts only.) A hosts file's path, or a list of host strings or HostSpecs.
        ssh: (SSH hosts only.) A :class:`parl.ssh.client.SSHOptions`; None: the defaults.
        accept_unknown_host_keys: (SSH hosts only.) Trust unknown host keys for this run.
        monitor_port: (SSH hosts only.) Serve the cluster's monitor page here (0: no page).
        install: (SSH hosts only.) ``"venv"``, ``"no"``, or None: as each host's line says.
        wheels: (SSH hosts only.) A folder of wheel files for ``install="venv"``.

    Raises:
        TypeError: ``address``, ``distributed_files`` or a numeric option of the wrong type.
        ValueError: A malformed ``"host:port"``, an option out of range, or an SSH-only option
            (``monitor_port``, ``install``, ``wheels``) without ``hosts``.
        parl.errors.HostsFileError: ``address`` has no port and names no file.
        parl.ClusterError: The cluster's master cannot be reached or refuses the secret.
        ImportError: ``"ray"`` without Ray installed.
    """
    options = connect_options(
        address, distributed_files, forward_output=forward_output, preload=preload,
        shm_threshold=shm_threshold, linger=linger, stop_timeout=stop_timeout,
        slot_timeout=slot_timeout, max_frame=max_frame, hosts=hosts, ssh=ssh,
        accept_unknown_host_keys=accept_unknown_host_keys, monitor_port=monitor_port,
        install=install, wheels=wheels,
    )  # fmt: skip
    _switch_to(options)


def _switch_to(options: ConnectOptions) -> None:
    """Make ``options`` the current ones. A cluster is reached now: a wrong address or secret
    shows here, not at the first actor."""
    new = None if options.carrier == "local" else _Context(make_carrier(options))
    global _context, _options
    with _lock:
        _options = options
        if _context is not None and _context.pid == os.getpid():
            old, _context = _context, None
            _retire(old)
        if new is not None:
            _context = new
            _at_exit_once()


def make_carrier(options: ConnectOptions) -> Carrier:
    """The carrier ``options`` ask for (each is imported only when it is used)."""
    return _FACTORIES[options.carrier](options)


def _local_carrier(options: ConnectOptions) -> Carrier:
    return LocalCarrier(
        forward_output=options.forward_output,
        preload=options.preload,
        threshold=options.shm_threshold,
        linger=options.linger,
        stop_timeout=options.stop_timeout,
    )


def _cluster_carrier(options: ConnectOptions) -> Carrier:
    from parl.cluster.carrier import ClusterCarrier

    assert options.address is not None
    return ClusterCarrier(
        options.address,
        forward_output=options.forward_output,
        slot_timeout=options.slot_timeout,
        max_frame=options.max_frame,
        stop_timeout=options.stop_timeout,
        distributed_files=options.distributed_files,
    )


def _ssh_carrier(options: ConnectOptions) -> Carrier:
    from parl.ssh.carrier import SSHCarrier

    assert options.hosts is not None and options.ssh is not None
    return SSHCarrier(
        list(options.hosts),
        options.ssh,
        distributed_files=options.distributed_files,
        monitor_port=options.monitor_port,
        install=options.install,
        wheels=options.wheels,
        forward_output=options.forward_output,
        slot_timeout=options.slot_timeout,
        max_frame=options.max_frame,
        stop_timeout=options.stop_timeout,
    )


def _ray_carrier(options: ConnectOptions) -> Carrier:
    """Ray is imported here only: ``import parl`` never imports it."""
    try:
        from parl.ray.carrier import RayCarrier
    except ImportError as exc:
        from parl.ray import install_hint

        raise ImportError(
            f"parl.connect({options.address!r}) needs Ray, which is not importable here "
            f"({exc}); {install_hint()}"
        ) from exc
    assert options.address is not None
    carrier = RayCarrier(
        options.address,
        forward_output=options.forward_output,
        slot_timeout=options.slot_timeout,
        distributed_files=options.distributed_files,
        stop_timeout=options.stop_timeout,
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
    return carrier


_FACTORIES: dict[CarrierKind, Callable[[ConnectOptions], Carrier]] = {
    "local": _local_carrier,
    "cluster": _cluster_carrier,
    "ssh": _ssh_carrier,
    "ray": _ray_carrier,
}


def disconnect() -> None:
    """Close the actors of the current connection and stop its local workers.

    The current connection's actors are those created since the last :func:`connect`.
    Actors of an earlier connection that a later ``connect`` replaced keep running until they
    are closed or the program ends. Actors created afterwards run on local workers with the
    default options, as without any ``connect``.
    """
    global _context, _options
    with _lock:
        context, _context = _context, None
        _options = ConnectOptions()
    if context is not None:
        context.shutdown()


def actors_share_memory() -> bool:
    """Whether actors created now run in local workers, which share ``parl.shm`` handles with
    this process (what an actor writes into one, this process sees). On a cluster, SSH hosts
    or Ray a handle is refused (:class:`parl.SharedHandleError`), so results must come back
    as return values."""
    return _options.carrier == "local"


def current() -> _Context:
    """The context of this process, created on first use."""
    global _context
    context = _context
    if context is not None and context.pid == os.getpid():
        return context
    with _lock:
        if _context is None or _context.pid != os.getpid():
            _context = _Context(make_carrier(_options))
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
