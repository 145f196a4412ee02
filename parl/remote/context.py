"""Where new actors go: ``parl.connect`` chooses the carrier; the default is local workers.

The state is per process: a forked child that creates actors gets its own carrier and never
touches its parent's workers. Nothing is created until the first actor is.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Iterable
from typing import Any

from parl.shm.carrier import DEFAULT_LINGER_S, DEFAULT_STOP_TIMEOUT_S, LocalCarrier
from parl.wire.caller import Connection

_LOCAL_NAMES = (None, "", "local")


class _Context:
    def __init__(self, carrier: LocalCarrier) -> None:
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
    *,
    forward_output: bool = True,
    preload: str | tuple[str, ...] | list[str] = (),
    shm_threshold: int = 1 << 17,
    linger: float = DEFAULT_LINGER_S,
    stop_timeout: float = DEFAULT_STOP_TIMEOUT_S,
) -> None:
    """Choose where actors created from now on run.

    ``address`` None or ``"local"``: local worker processes (the default without any call).
    ``forward_output``: print actors' stdout and stderr here, prefixed with the actor's name.
    ``preload``: modules imported once by the worker pool (``"torch"`` or ``["torch", ...]``).
    ``shm_threshold``: arrays of at least this many bytes cross through shared memory.
    ``linger``: seconds the worker pool stays after the last actor ends (0: stop at once).
    ``stop_timeout``: seconds a closed actor's worker may take to finish (its ``__del__``,
    ``atexit`` handlers, flushing files) before it is killed; program exit waits for them.
    Existing actors keep running where they are.
    """
    if address not in _LOCAL_NAMES:
        if not isinstance(address, str):
            raise TypeError(
                f"address must be a str such as 'localhost:8010' or 'local', got "
                f"{type(address).__name__}"
            )
        raise NotImplementedError(
            f"parl.connect({address!r}): clusters and SSH hosts are not available in this "
            "version yet; call parl.connect() or parl.connect('local') for local workers"
        )
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
    global _context
    with _lock:
        _options.update(
            forward_output=bool(forward_output),
            preload=preload,
            shm_threshold=shm_threshold,
            linger=float(linger),
            stop_timeout=float(stop_timeout),
        )
        if _context is not None and _context.pid == os.getpid():
            old, _context = _context, None
            _retire(old)


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
    """Close every actor created in this process and stop the local workers."""
    global _context
    with _lock:
        context, _context = _context, None
    if context is not None:
        context.shutdown()


def current() -> _Context:
    """The context of this process, created on first use."""
    global _context, _atexit_registered
    context = _context
    if context is not None and context.pid == os.getpid():
        return context
    with _lock:
        if _context is None or _context.pid != os.getpid():
            carrier = LocalCarrier(
                forward_output=_options.get("forward_output", True),
                preload=_options.get("preload", ()),
                threshold=_options.get("shm_threshold", 1 << 17),
                linger=_options.get("linger", DEFAULT_LINGER_S),
                stop_timeout=_options.get("stop_timeout", DEFAULT_STOP_TIMEOUT_S),
            )
            _context = _Context(carrier)
            if not _atexit_registered:
                atexit.register(_shutdown_at_exit)
                os.register_at_fork(after_in_child=_new_lock)
                _atexit_registered = True
        return _context


def _new_lock() -> None:
    """In a forked child: the lock may have been held by another thread of the parent."""
    global _lock
    _lock = threading.Lock()


def _retire(context: _Context) -> None:
    """A context replaced by ``connect``: its actors keep working until they are closed."""
    _retired[:] = [c for c in _retired if c.carrier.live_actors or c.carrier.server_pid]
    _retired.append(context)


_retired: list[_Context] = []


def _shutdown_at_exit() -> None:
    for context in [_context, *_retired]:
        if context is not None:
            context.shutdown()
