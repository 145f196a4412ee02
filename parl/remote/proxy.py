"""Proxy classes: built once per remote class from its methods.

A proxy instance owns one actor connection. Its methods send the method name and arguments
(never the instance's state) and return the result, or a :class:`Future` with ``wait=False``.
Reading and writing other attributes is forwarded to the actor.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parl.errors import ActorClosedError, SerializationError
from parl.remote.context import current
from parl.remote.future import Future
from parl.wire.caller import Connection
from parl.wire.dispatch import ClassRef
from parl.wire.protocol import CALL, GETATTR, INIT, SETATTR, MethodRef
from parl.wire.serialization import dumps

# special methods forwarded when the remote class defines them (Python looks them up on the type)
_FORWARDED_DUNDERS = ("__call__", "__len__", "__getitem__", "__setitem__", "__contains__")


@dataclass(frozen=True)
class RemoteOptions:
    wait: bool = True
    max_memory: float | None = None  # MB
    num_threads: int | None = None  # None: 1, or the caller's OMP_NUM_THREADS when set

    def __post_init__(self) -> None:
        if not isinstance(self.wait, bool):
            raise TypeError(f"wait must be True or False, got {self.wait!r}")
        threads = self.num_threads
        if threads is not None:
            if isinstance(threads, bool) or not isinstance(threads, int):
                raise TypeError(
                    f"num_threads must be a positive int (threads per worker, e.g. "
                    f"num_threads=4), got {type(threads).__name__} {threads!r}"
                )
            if threads < 1:
                raise ValueError(
                    f"num_threads must be at least 1, got {threads!r}; leave it out for the "
                    "default of one thread per worker"
                )
        memory = self.max_memory
        if memory is not None:
            if isinstance(memory, bool) or not isinstance(memory, (int, float)):
                raise TypeError(
                    f"max_memory must be a number of megabytes (e.g. max_memory=1024), got "
                    f"{type(memory).__name__} {memory!r}"
                )
            if not math.isfinite(memory) or memory <= 0:
                raise ValueError(
                    f"max_memory must be a positive number of megabytes, got {memory!r}"
                )


class RemoteProxy:
    """Base of every proxy class; see :func:`parl.remote_class`."""

    _original: type
    _parl_options: RemoteOptions
    _parl_conn: Connection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        original = cls._original
        context = current()
        options = {
            "max_memory": cls._parl_options.max_memory,
            "num_threads": cls._parl_options.num_threads,
        }
        conn = context.carrier.create(original.__name__, options)
        object.__setattr__(self, "_parl_conn", conn)
        context.connections.add(conn)
        try:
            call_id = conn.submit(INIT, (_class_spec(original), args, kwargs))
        except SerializationError as exc:
            conn.close()
            raise _argument_error(original, "__init__", args, kwargs, exc) from None
        try:
            conn.wait(call_id)
        except BaseException:
            conn.close()
            raise

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_parl_") or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        value = self._parl_conn.call(GETATTR, name)
        if isinstance(value, MethodRef):
            method = _make_method(value.name, type(self)._parl_options.wait, None)
            return method.__get__(self, type(self))
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_parl_"):
            object.__setattr__(self, name, value)
            return
        conn = self._parl_conn
        try:
            call_id = conn.submit(SETATTR, (name, value))
        except SerializationError as exc:
            raise SerializationError(
                f"the value for attribute {name!r} of {type(self).__name__} cannot be pickled "
                f"to send it to the actor: {exc}"
            ) from None
        conn.wait(call_id)

    def __enter__(self) -> RemoteProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Leaving a ``with`` block closes the actor (its worker exits)."""
        self._parl_conn.close()

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a {type(self).__name__} actor proxy cannot be pickled or sent to another actor; "
            "pass the data it needs instead"
        )

    def __repr__(self) -> str:
        conn = self.__dict__.get("_parl_conn")
        where = conn.label if conn is not None else "not started"
        state = " closed" if conn is not None and conn.closed else ""
        return f"<remote {type(self).__qualname__} actor ({where}){state}>"


def close_actor(actor: RemoteProxy) -> None:
    """End ``actor``'s worker now; later calls on it raise :class:`parl.ActorClosedError`."""
    if not isinstance(actor, RemoteProxy):
        raise TypeError(
            f"close_actor() takes an actor made by a @parl.remote_class class, got "
            f"{type(actor).__name__}"
        )
    actor._parl_conn.close()


def build_proxy_class(cls: type, options: RemoteOptions) -> type:
    namespace: dict[str, Any] = {
        "_original": cls,
        "_parl_options": options,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    for name, member in inspect.getmembers(cls):
        if name.startswith("__") and name not in _FORWARDED_DUNDERS:
            continue
        if name.startswith("_parl_"):
            raise TypeError(f"{cls.__qualname__}.{name}: names starting with _parl_ are reserved")
        static = inspect.getattr_static(cls, name, None)
        if isinstance(static, property) or not callable(member):
            continue
        if inspect.isclass(member):
            continue
        namespace[name] = _make_method(name, options.wait, member)
    return type(cls.__name__, (RemoteProxy,), namespace)


def _make_method(name: str, wait: bool, original: Callable[..., Any] | None) -> Callable[..., Any]:
    if wait:

        def method(self: RemoteProxy, *args: Any, **kwargs: Any) -> Any:
            conn = self._parl_conn
            return conn.wait(_submit_call(self, conn, name, args, kwargs))

    else:

        def method(self: RemoteProxy, *args: Any, **kwargs: Any) -> Any:
            conn = self._parl_conn
            return Future(conn, _submit_call(self, conn, name, args, kwargs))

    method.__name__ = name
    method.__qualname__ = name
    if original is not None:
        method.__doc__ = original.__doc__
    return method


def _submit_call(proxy: RemoteProxy, conn: Connection, name: str, args: tuple, kwargs: dict) -> int:
    try:
        return conn.submit(CALL, (name, args, kwargs))
    except SerializationError as exc:
        raise _argument_error(type(proxy)._original, name, args, kwargs, exc) from None


def _class_spec(cls: type) -> Any:
    """How the worker finds the class: by name when importable, else the class by value."""
    module = sys.modules.get(cls.__module__)
    if cls.__module__ != "__main__" and module is not None and "<locals>" not in cls.__qualname__:
        obj: Any = module
        for part in cls.__qualname__.split("."):
            obj = getattr(obj, part, None)
        if obj is cls or getattr(obj, "_original", None) is cls:
            return ClassRef(cls.__module__, cls.__qualname__)
    return cls


def _argument_error(
    cls: type, method: str, args: tuple, kwargs: dict, exc: SerializationError
) -> SerializationError:
    """Name the first argument that cannot be pickled."""
    named: list[tuple[str, Any]]
    try:
        signature = inspect.signature(getattr(cls, method))
        bound = signature.bind(None, *args, **kwargs)
        named = list(bound.arguments.items())[1:]
    except (TypeError, ValueError):
        named = [(f"#{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    for arg_name, value in named:
        try:
            dumps(value)
        except SerializationError as arg_exc:
            return SerializationError(
                f"argument {arg_name!r} of {cls.__qualname__}.{method}() cannot be pickled to send "
                f"it to the actor ({type(value).__name__}): {arg_exc}"
            )
    return SerializationError(
        f"the arguments of {cls.__qualname__}.{method}() cannot be pickled: {exc}"
    )


__all__ = ["ActorClosedError", "RemoteOptions", "RemoteProxy", "build_proxy_class", "close_actor"]
