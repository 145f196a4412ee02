"""How an exception raised in an actor crosses to the caller, chain included.

The actor sends a :class:`RemoteFailure`: the exception itself when it survives pickling (else
its type name and message), and its formatted remote traceback. Pickle drops ``__cause__``,
``__context__`` and ``__suppress_context__``, so an exception with a chain travels inside a
:class:`ChainedFailure` whose links are failures of their own: each link that cannot be pickled
falls back to a :class:`RemoteError` alone, and the caller rebuilds the chain that
``raise ... from ...`` (or raising while handling) made.
"""

from __future__ import annotations

import traceback
from types import TracebackType

from parl.errors import RemoteError
from parl.wire.protocol import RemoteFailure
from parl.wire.serialization import dumps, loads

_MAX_LINKS = 16  # exceptions sent from one chain (a longer one is cut, as it is very rare)


class ChainedFailure(Exception):
    """The ``exception`` field of a failure whose exception has a cause or context:
    ``(exception or None, cause failure or None, context failure or None, suppress_context)``.
    Never raised; unpacked by :func:`rebuild_exception`."""


def failure_of(exc: BaseException) -> RemoteFailure:
    """The failure to send for ``exc``, raised by user code in the actor. Drops the tracebacks
    of the chain (they hold the frames, and with them the call's arguments)."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None:
        tb = tb.tb_next  # start at user code, not at serve()
    return _link(exc, tb, {id(exc)})


def _link(exc: BaseException, tb: TracebackType | None, seen: set[int]) -> RemoteFailure:
    text = ""  # an exception never raised (``from KeyError()``) has no traceback
    if tb is not None:
        try:
            text = "".join(traceback.format_exception(type(exc), exc, tb, chain=False))
        except Exception:  # noqa: BLE001
            text = "".join(traceback.format_tb(tb)) + f"{type(exc).__qualname__} (unprintable)\n"
    exc.__traceback__ = None
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a __str__ that fails must not take the actor down
        message = f"<{type(exc).__name__} whose str() failed>"
    exception: BaseException | None = exc
    try:
        stream, buffers = dumps(exc)
        loads(stream, buffers)  # some exceptions pickle but cannot be rebuilt
    except Exception:  # noqa: BLE001
        exception = None
    type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    cause = _next_link(exc.__cause__, seen)
    context = _next_link(exc.__context__, seen)
    if cause is not None or context is not None:
        exception = ChainedFailure(exception, cause, context, exc.__suppress_context__)
    return RemoteFailure(exception, type_name, message, text)


def _next_link(exc: BaseException | None, seen: set[int]) -> RemoteFailure | None:
    if exc is None or id(exc) in seen or len(seen) >= _MAX_LINKS:
        return None
    seen.add(id(exc))
    return _link(exc, exc.__traceback__, seen)


def rebuild_exception(failure: RemoteFailure, label: str) -> BaseException:
    """The exception to raise at the call site for an ERROR reply, chain included; each
    exception carries its part of the remote traceback as a note (``remote_traceback``)."""
    payload = failure.exception
    cause = context = None
    suppress = False
    if isinstance(payload, ChainedFailure):
        payload, cause, context, suppress = payload.args
    note = f"\nRemote traceback (actor {label}):\n{failure.traceback.rstrip()}"
    if not failure.traceback:
        note = f"\n(raised in actor {label})"
    if payload is None:
        exc: BaseException = RemoteError(
            f"{failure.type_name}: {failure.message}{note}", failure.type_name, failure.traceback
        )
    else:
        exc = payload
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        exc.remote_traceback = failure.traceback  # type: ignore[attr-defined]
    if cause is not None:
        exc.__cause__ = rebuild_exception(cause, label)
    if context is not None:
        exc.__context__ = rebuild_exception(context, label)
    exc.__suppress_context__ = suppress
    return exc
