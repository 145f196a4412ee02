"""The methods of a proxy class, made once per remote class from the original class's members.

A method sends its name and arguments and returns the result (``wait=True``) or a
:class:`Future`. Special methods that Python's own protocols call (``len``, ``in``, ``iter``,
``next``, ``bool``, item assignment and deletion) need their result at once and of a fixed type,
so they always wait, whatever ``wait`` says; ``actor[k]`` and ``actor(...)`` follow ``wait``.

Static and class methods run here when called on the proxy class (there is no actor to send them
to) and in the actor when called on an actor, like any method.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import MethodType
from typing import Any

from parl.errors import SerializationError, SharedHandleError
from parl.remote.future import Future
from parl.shm.handles import find_handle, holds_handle
from parl.wire.contract import ActorConnection
from parl.wire.protocol import CALL
from parl.wire.serialization import dumps

# special methods forwarded when the remote class defines them (Python looks them up on the type)
FORWARDED_DUNDERS = frozenset(
    {
        "__call__",
        "__getitem__",
        "__setitem__",
        "__delitem__",
        "__len__",
        "__contains__",
        "__iter__",
        "__next__",
        "__bool__",
    }
)
# Python needs their result now (an int, a bool, an iterator) or throws it away (item
# assignment): a Future would be wrong or lost, so they wait even with wait=False
_ALWAYS_WAIT = frozenset(
    {"__setitem__", "__delitem__", "__len__", "__contains__", "__iter__", "__next__", "__bool__"}
)


def proxy_methods(cls: type, wait: bool) -> dict[str, Any]:
    """The proxy class's namespace entries for the methods of ``cls``."""
    namespace: dict[str, Any] = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("__") and name not in FORWARDED_DUNDERS:
            continue
        if name.startswith("_parl_"):
            raise TypeError(f"{cls.__qualname__}.{name}: names starting with _parl_ are reserved")
        static = inspect.getattr_static(cls, name, None)
        if isinstance(static, property) or not callable(member) or inspect.isclass(member):
            continue
        remote = make_method(name, wait or name in _ALWAYS_WAIT, member)
        if isinstance(static, (staticmethod, classmethod)):
            namespace[name] = ClassOrActorMethod(static, ActorMethod(remote))
        elif name.startswith("__"):  # Python looks special methods up on the class only
            namespace[name] = remote
        else:
            namespace[name] = ActorMethod(remote)
    if "__next__" in namespace:
        namespace["__iter__"] = _self_iter  # the actor is its own iterator
    elif "__iter__" in namespace:
        namespace["__iter__"] = _iter_by_value(namespace["__iter__"])
    else:
        namespace["__iter__"] = None  # never iterate by indexing: see _iter_by_value
    return namespace


def make_method(name: str, wait: bool, original: Any) -> Callable[..., Any]:
    if wait:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            conn = self._parl_conn
            try:
                call_id = conn.submit(CALL, (name, args, kwargs))
            except SerializationError as exc:
                raise argument_error(type(self)._original, name, args, kwargs, exc) from None
            return conn.wait(call_id)

    else:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            conn = self._parl_conn
            try:
                call_id = conn.submit(CALL, (name, args, kwargs))
            except SerializationError as exc:
                raise argument_error(type(self)._original, name, args, kwargs, exc) from None
            return Future(conn, call_id)

    method.__name__ = name
    method.__qualname__ = name
    if original is not None:
        method.__doc__ = original.__doc__
    return method


class ActorMethod:
    """A method of the remote class, on the proxy class. Read on an actor, it is the method
    bound to the actor (a call runs it remotely), unless an attribute of the actor's instance
    has its name: that attribute hides the method, in the actor as in any Python object, so
    ``actor.name`` reads the attribute's value instead (the connection's ``hidden`` names,
    which the actor sends whenever they change: see :mod:`parl.wire.hiding`). Those names
    are as of the last reply read: with ``wait=False``, what a call whose reply has not been
    read yet did is seen once its reply is (its future's ``get``, or any later reply: they
    come in order). Read on the proxy class, it is the function."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.name = function.__name__
        self.function = function
        self.__doc__ = function.__doc__

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self.function
        if self.name in instance._parl_conn.hidden:
            return type(instance).__getattr__(instance, self.name)  # the attribute, remotely
        return MethodType(self.function, instance)

    def __repr__(self) -> str:
        return f"<actor method {self.name}>"


class ClassOrActorMethod:
    """A static or class method of the remote class. Looked up on the proxy class it is the
    original (a class method gets the proxy class as ``cls``, so ``cls(...)`` makes an actor);
    looked up on an actor it is a remote call."""

    def __init__(self, local: staticmethod | classmethod, remote: ActorMethod) -> None:
        self._local = local
        self._remote = remote
        self.__doc__ = getattr(local, "__doc__", None)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self._local.__get__(None, owner)
        return self._remote.__get__(instance, owner)


def _self_iter(self: Any) -> Any:
    """``iter(actor)`` of a class with ``__next__``: each ``next()`` is one remote call."""
    return self


def _iter_by_value(remote_iter: Callable[..., Any]) -> Callable[..., Any]:
    """``iter(actor)`` calls the remote ``__iter__`` once and iterates over the iterator it
    returns, which arrives by value like any result (a snapshot: it must pickle, so return
    ``iter(self.items)`` rather than a generator).

    Without a remote ``__iter__`` the proxy's is None: Python would otherwise iterate by calling
    ``actor[0]``, ``actor[1]``... until IndexError, which never comes from a dict-like actor or
    from a ``wait=False`` one (it returns futures)."""

    def __iter__(self: Any) -> Any:
        return iter(remote_iter(self))

    __iter__.__doc__ = remote_iter.__doc__
    return __iter__


def submit_call(proxy: Any, conn: ActorConnection, name: str, args: tuple, kwargs: dict) -> int:
    try:
        return conn.submit(CALL, (name, args, kwargs))
    except SerializationError as exc:
        raise argument_error(type(proxy)._original, name, args, kwargs, exc) from None


def argument_error(
    cls: type, method: str, args: tuple, kwargs: dict, exc: SerializationError
) -> SerializationError:
    """Name the first argument that cannot be pickled, or that holds a ``parl.shm`` array the
    actor cannot share (:class:`SharedHandleError`, kept as such)."""
    named: list[tuple[str, Any]]
    unbound = not isinstance(inspect.getattr_static(cls, method, None), (staticmethod, classmethod))
    try:
        signature = inspect.signature(getattr(cls, method))
        bound = signature.bind(*((None,) if unbound else ()), *args, **kwargs)
        named = list(bound.arguments.items())[1 if unbound else 0 :]
    except (TypeError, ValueError):
        named = [(f"#{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    if isinstance(exc, SharedHandleError):
        return _handle_error(f"{cls.__qualname__}.{method}()", named, exc)
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


def _handle_error(
    call: str, named: list[tuple[str, Any]], exc: SharedHandleError
) -> SharedHandleError:
    """The refusal of a ``parl.shm`` array, naming the argument that holds it."""
    for arg_name, value in named:
        if holds_handle(value):
            where = find_handle(value)
            inside = f" at {where}" if where else ""
            return SharedHandleError(
                f"argument {arg_name!r} of {call} is or holds a parl.shm array{inside}: {exc}"
            )
    return SharedHandleError(f"an argument of {call} is or holds a parl.shm array: {exc}")
