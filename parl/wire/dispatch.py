"""The actor's end: receive requests in order, run them on the instance, send replies.

Calls run one at a time in arrival order. An exception raised by user code goes back to the
caller (see :mod:`parl.wire.failure`), and the loop goes on. ``SystemExit`` and
``KeyboardInterrupt`` are not caught: they end the worker, which the caller reports as a dead
actor.
"""

from __future__ import annotations

import importlib
import pickle
import time
from typing import Any, NamedTuple

from parl.errors import SerializationError, SharedHandleError
from parl.wire import classes, protocol
from parl.wire.classes import ClassTable
from parl.wire.failure import failure_of
from parl.wire.framing import SPIN_S, FrameSocket, Spin, crowded
from parl.wire.hiding import HiddenMethods
from parl.wire.protocol import (
    CALL,
    ERROR,
    GETATTR,
    INIT,
    RESULT,
    RESULT_HIDING,
    SETATTR,
    Link,
    MethodRef,
)
from parl.wire.serialization import Encoder


class ClassRef(NamedTuple):
    """An importable class, named instead of pickled (its module attribute may be a proxy)."""

    module: str
    qualname: str

    def resolve(self) -> type:
        obj: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return getattr(obj, "_original", obj)


def serve(sock: FrameSocket, link: Link) -> Any:
    """Run requests until the caller closes the connection; returns the instance, so that the
    worker chooses when it is dropped (and its ``__del__`` runs)."""
    instance: Any = None
    hidden: HiddenMethods | None = None  # made with the instance
    table = ClassTable("actor")  # by-value classes the caller sent, kept for its later messages
    sending = table.sending
    encoder = Encoder(link, sending)
    receiving = classes.current
    stream: Any
    buffers: Any
    spin = Spin(SPIN_S)
    while True:
        if not SPIN_S or sock.has_buffered_frame():
            parts = sock.recv_parts()
        else:  # the next request of a busy caller usually follows within the spin
            if spin.seconds and not crowded():
                gave_up = sock.spin(min(spin.seconds, SPIN_S))
            else:
                gave_up = time.perf_counter()
            parts = sock.recv_parts()
            if gave_up:
                spin.missed(spin.seconds + time.perf_counter() - gave_up)
        if parts is None:
            return instance
        kind = call_id = 0
        what = "the result"
        try:
            kind, call_id, stream, buffers = protocol.decode_parts(*parts, link)
            parts = None
            receiving.receiving = table
            try:
                request = pickle.loads(stream, buffers=buffers)
            finally:
                receiving.receiving = None
            stream = buffers = None
            if kind == CALL:
                name, args, kwargs = request
                request = None
                what = f"the return value of {name}()"
                result = getattr(instance, name)(*args, **kwargs)
                args = kwargs = None
            else:
                if kind == GETATTR:
                    what = f"attribute {request!r}"
                result = _other(kind, request, instance)
                if kind == INIT:
                    instance, result = result, None
                    hidden = HiddenMethods(instance)
            reply = RESULT
            if kind != GETATTR and hidden is not None and hidden.changed():
                result, reply = (result, hidden.names), RESULT_HIDING
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            if not call_id and parts is not None:
                call_id = protocol.HEADER.unpack_from(parts[0], 0)[-1]
            result, reply = failure_of(exc), ERROR
            del exc
        # drop argument views: their releases ride this reply
        parts = request = args = kwargs = stream = buffers = None
        try:
            meta, bodies, fds = protocol.encode(reply, call_id, result, link, encoder)
        except Exception as exc:  # noqa: BLE001 - unpicklable, or too large for a frame
            if reply == RESULT_HIDING and hidden is not None:
                hidden.not_sent()
            # a SerializationError (also a TypeError): PARL's RemoteSerializeError catches it
            error: SerializationError
            if isinstance(exc, SharedHandleError):  # memory the caller cannot map
                error = SharedHandleError(f"{what} is or holds a parl.shm array: {exc}")
            else:
                error = SerializationError(f"{what} cannot be sent back to the caller: {exc}")
            meta, bodies, fds = protocol.encode(ERROR, call_id, failure_of(error), link, encoder)
        if sending.defined:
            sending.finish(True)
        result = None
        sock.send(meta, bodies, fds)


def _other(kind: int, request: Any, instance: Any) -> Any:
    """Requests other than a method call: the new instance (INIT), or the result."""
    if kind == GETATTR:
        result = getattr(instance, request)
        if getattr(result, "__self__", None) is instance and callable(result):
            result = MethodRef(request)
        return result
    if kind == SETATTR:
        setattr(instance, request[0], request[1])
        return None
    if kind == INIT:
        cls, args, kwargs = request
        request = None
        if isinstance(cls, ClassRef):
            cls = cls.resolve()
        return cls(*args, **kwargs)
    raise ValueError(f"unknown request kind {kind}")
