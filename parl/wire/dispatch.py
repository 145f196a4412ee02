"""The actor's end: receive requests in order, run them on the instance, send replies.

Calls run one at a time in arrival order. An exception raised by user code goes back to the
caller (see :mod:`parl.wire.failure`), and the loop goes on. ``SystemExit`` and
``KeyboardInterrupt`` are not caught: they end the worker, which the caller reports as a dead
actor.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

from parl.wire import protocol
from parl.wire.classes import ClassTable
from parl.wire.failure import failure_of
from parl.wire.framing import SPIN_S, FrameSocket
from parl.wire.protocol import (
    CALL,
    ERROR,
    GETATTR,
    INIT,
    RESULT,
    SETATTR,
    Link,
    MethodRef,
)


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
    classes = ClassTable("actor")  # by-value classes the caller sent, kept for its later messages
    while True:
        sock.spin(SPIN_S)  # the next request of a busy caller usually follows within it
        frame = sock.recv()
        if frame is None:
            return instance
        kind, call_id = protocol.peek(frame)
        what = "the result"
        try:
            with classes.receiving:
                request = protocol.decode(frame, link).payload()
            frame = None
            if kind == CALL:
                name, args, kwargs = request
                request = None
                what = f"the return value of {name}()"
                result = getattr(instance, name)(*args, **kwargs)
                args = kwargs = None
            elif kind == GETATTR:
                what = f"attribute {request!r}"
                result = getattr(instance, request)
                if getattr(result, "__self__", None) is instance and callable(result):
                    result = MethodRef(request)
            elif kind == SETATTR:
                setattr(instance, request[0], request[1])
                result = None
            elif kind == INIT:
                cls, args, kwargs = request
                request = None
                if isinstance(cls, ClassRef):
                    cls = cls.resolve()
                instance = cls(*args, **kwargs)
                args = kwargs = None
                result = None
            else:
                raise ValueError(f"unknown request kind {kind}")
            reply = RESULT
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            result, reply = failure_of(exc), ERROR
            del exc
        frame = request = args = kwargs = (
            None  # drop argument views: their releases ride this reply
        )
        try:
            with classes.sending:
                meta, bodies, fds = protocol.encode(reply, call_id, result, link)
        except Exception as exc:  # noqa: BLE001 - unpicklable, or too large for a frame
            error = TypeError(f"{what} cannot be sent back to the caller: {exc}")
            with classes.sending:
                meta, bodies, fds = protocol.encode(ERROR, call_id, failure_of(error), link)
        result = None
        sock.send(meta, bodies, fds)
