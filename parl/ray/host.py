"""The actor's end on Ray: one Ray actor holds one instance of the user's class.

The carrier wraps :class:`ParlActor` with ``ray.remote`` (this module never imports Ray at
import time, so the carrier's process imports it once, with the rest of ``parl.ray``). Each proxy
call becomes one Ray actor-method call: arguments and results travel as Ray's own objects
(large arrays through its object store, read zero-copy on the same node), and Ray runs the
calls of one caller in the order they were made, one at a time.

An exception raised by user code never becomes Ray's ``RayTaskError``: it is caught here and
returned as :class:`Failed`, holding the same :class:`~parl.wire.protocol.RemoteFailure` the
other carriers send, so the caller re-raises it exactly as they do (original type, remote
traceback as a note, chain included).
"""

from __future__ import annotations

import os
import socket
import types
from typing import Any, NamedTuple

from parl.errors import SerializationError, SharedHandleError
from parl.shm.handles import refuse_handles
from parl.wire.dispatch import ClassRef
from parl.wire.failure import ChainedFailure, failure_of
from parl.wire.hiding import HiddenMethods
from parl.wire.protocol import MethodRef, RemoteFailure
from parl.wire.serialization import reduce_exception
from parl.workers import limit_threads

READ_ONLY_HINT = (
    "arrays that arrive through Ray are read-only (Ray reads them zero-copy from its object "
    "store): copy one (a = a.copy()) before writing into it; see docs/guides/ray.md"
)


class Failed(NamedTuple):
    """What a call returns when user code raised: the failure to re-raise at the call site."""

    failure: RemoteFailure


class Hiding(NamedTuple):
    """What a request returns when the methods that the instance's attributes hide changed
    (see :mod:`parl.wire.hiding`): its value, and the names."""

    value: Any
    names: frozenset[str]


class ParlActor:
    """The Ray actor class behind every proxy. ``label`` (the user's class name) is its
    ``repr``, which Ray prints before each line of the actor's output: ``(Sampler pid=12)``."""

    def __init__(self, label: str, num_threads: int | None = None) -> None:
        self._label = label
        self._instance: Any = None
        self._hidden: HiddenMethods | None = None
        limit_threads(num_threads)

    def __repr__(self) -> str:
        return self._label

    def where(self) -> tuple[int, str, str]:
        """(pid, host name, Ray node id): names the actor in errors once it is placed."""
        import ray

        return os.getpid(), socket.gethostname(), ray.get_runtime_context().get_node_id()

    def init(self, spec: Any, args: tuple, kwargs: dict) -> Any:
        try:
            cls = spec.resolve() if isinstance(spec, ClassRef) else spec
            self._instance = cls(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - re-raised at the call site
            return _failed(exc)
        self._hidden = HiddenMethods(self._instance)
        return self._with_hidden(None)

    def _with_hidden(self, value: Any) -> Any:
        """``value``, as a :class:`Hiding` when the hidden methods changed. (A reply whose
        future was dropped carries them to nobody: they are seen at their next change.)"""
        hidden = self._hidden
        if hidden is not None and hidden.changed():
            return Hiding(value, hidden.names)
        return value

    def call(self, _parl_method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            result = getattr(self._instance, _parl_method)(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - re-raised at the call site
            return _failed(exc)
        try:  # Ray would hand the caller a copy of a parl.shm array this actor made
            refuse_handles(result, f"the return value of {_parl_method}()")
        except SharedHandleError as exc:
            return _failed(exc)
        if isinstance(result, types.GeneratorType):  # Ray would stream its items instead
            return Failed(
                failure_of(
                    SerializationError(
                        f"the return value of {_parl_method}() cannot be sent back to the "
                        "caller: cannot pickle 'generator' object"
                    )
                )
            )
        return self._with_hidden(result)

    def get_attr(self, name: str) -> Any:
        try:
            value = getattr(self._instance, name)
        except Exception as exc:  # noqa: BLE001
            return _failed(exc)
        if getattr(value, "__self__", None) is self._instance and callable(value):
            return MethodRef(name)
        try:
            refuse_handles(value, f"attribute {name!r}")
        except SharedHandleError as exc:
            return _failed(exc)
        return value

    def stop(self) -> None:
        """End the actor as a local worker ends (``close_actor``, dropping the proxy): the
        instance is dropped (its ``__del__`` runs), then the worker exits through Ray, which
        runs the ``atexit`` handlers registered in it (``parl.utils.summary`` flushes its
        events). Queued after the calls already made, so those finish first."""
        import gc

        import ray

        self._instance = None
        gc.collect()
        ray.actor.exit_actor()

    def set_attr(self, name: str, value: Any) -> Failed | None:
        try:
            setattr(self._instance, name, value)
        except Exception as exc:  # noqa: BLE001
            return _failed(exc)
        return self._with_hidden(None)


def _failed(exc: Exception) -> Failed:
    if isinstance(exc, ValueError) and "read-only" in str(exc):
        exc.add_note(READ_ONLY_HINT)
    return Failed(_as_parl_pickles(failure_of(exc)))


def _as_parl_pickles(failure: RemoteFailure) -> RemoteFailure:
    """``failure`` with each exception of its chain wrapped so that Ray's pickler rebuilds it
    as this project's does: plain pickle calls ``cls(*args)``, which fails for a user's
    ``__init__(self, code, message)`` (the caller would get that TypeError instead)."""
    exc: Any = failure.exception
    if isinstance(exc, ChainedFailure):
        inner, cause, context, suppress = exc.args
        exc = ChainedFailure(
            _Rebuilt(inner) if inner is not None else None,
            _as_parl_pickles(cause) if cause is not None else None,
            _as_parl_pickles(context) if context is not None else None,
            suppress,
        )
    elif exc is not None:
        exc = _Rebuilt(exc)
    return failure._replace(exception=exc)


class _Rebuilt:
    """Pickles as the exception it holds, reduced as :mod:`parl.wire.serialization` does."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __reduce__(self) -> Any:
        reduced = reduce_exception(self.exc)
        return (_same, (self.exc,)) if reduced is NotImplemented else reduced


def _same(value: Any) -> Any:
    return value
