"""Proxy classes: built once per remote class from its methods.

A proxy instance owns one actor connection. Its methods (see :mod:`parl.remote.methods`) send
the method name and arguments (never the instance's state) and return the result, or a
:class:`Future` with ``wait=False``. Reading and writing other attributes is forwarded to the
actor. A subclass of a proxy class is made a remote class as well, so that its methods run in
the actor too.
"""

from __future__ import annotations

import sys
import types
import weakref
from typing import Any

from parl.errors import ActorClosedError, SerializationError, SharedHandleError
from parl.remote.context import current
from parl.remote.methods import argument_error, make_method, proxy_methods
from parl.wire.classes import MAIN_MODULES, module_travels_by_value
from parl.wire.contract import ActorConnection, RemoteOptions
from parl.wire.dispatch import ClassRef
from parl.wire.protocol import GETATTR, INIT, SETATTR, MethodRef
from parl.wire.serialization import dumps


class ProxyType(type):
    """The type of proxy classes: what a proxy class lacks is read from the original class
    (``Sampler.BATCH``, or ``cls.BATCH`` in a class method), as it would be without the
    decorator. Reads on an actor never come here: they go to the actor."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith(("__", "_parl_", "_original")):
            raise AttributeError(name)
        return getattr(type.__getattribute__(cls, "_original"), name)

    def _parl_reduce_class(cls) -> Any:
        """A proxy class that cannot be imported by name travels as its original class and
        options (see :mod:`parl.wire.serialization`) and is built again on arrival."""
        return _rebuild_proxy, (cls._original, cls._parl_options)


# original class -> its proxy class, so that a proxy class sent by value comes back as itself
_proxies: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()


def _rebuild_proxy(original: type, options: RemoteOptions) -> type:
    proxy = _proxies.get(original)
    if proxy is None or proxy._parl_options != options:  # type: ignore[attr-defined]
        proxy = build_proxy_class(original, options)
    return proxy


class RemoteProxy(metaclass=ProxyType):
    """Base of every proxy class; see :func:`parl.remote_class`."""

    _original: type
    _parl_options: RemoteOptions
    _parl_conn: ActorConnection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        original = cls._original
        context = current()
        conn = context.carrier.create(original.__name__, cls._parl_options)
        object.__setattr__(self, "_parl_conn", conn)
        context.connections.add(conn)
        spec = _class_spec(original)
        try:
            call_id = conn.submit(INIT, (spec, args, kwargs))
        except SerializationError as exc:
            conn.close()
            raise _class_error(spec) or argument_error(
                original, "__init__", args, kwargs, exc
            ) from None
        try:
            conn.wait(call_id)
        except BaseException:
            conn.close()
            raise

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """``class Sub(SomeRemoteClass)`` makes ``Sub`` a remote class too: see
        :func:`_make_subclass_remote`."""
        if "_original" not in cls.__dict__ and cls.__bases__ != (RemoteProxy,):
            # else built by build_proxy_class, or a proxy class that Ray's cloudpickle
            # rebuilds by value (its state, ``_original`` included, is set right after)
            _make_subclass_remote(cls, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_parl_") or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        value = self._parl_conn.call(GETATTR, name)
        if isinstance(value, MethodRef):
            method = make_method(value.name, type(self)._parl_options.wait, None)
            return method.__get__(self, type(self))
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_parl_"):
            object.__setattr__(self, name, value)
            return
        conn = self._parl_conn
        try:
            call_id = conn.submit(SETATTR, (name, value))
        except SharedHandleError as exc:
            raise SharedHandleError(
                f"the value for attribute {name!r} of {type(self).__name__} is or holds a "
                f"parl.shm array: {exc}"
            ) from None
        except SerializationError as exc:
            raise SerializationError(
                f"the value for attribute {name!r} of {type(self).__name__} cannot be pickled "
                f"to send it to the actor: {exc}"
            ) from None
        conn.wait(call_id)

    def destroy(self) -> None:
        """End the actor now, as :func:`parl.close_actor` does (PARL's name for it); later
        calls on it raise :class:`parl.ActorClosedError`. Calling it again does nothing. A
        remote class that defines its own ``destroy`` method keeps it: call
        ``parl.close_actor(actor)`` to end such an actor."""
        self._parl_conn.close()

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

    def __bool__(self) -> bool:
        """An actor is true (no remote call), unless its class defines ``__bool__``."""
        return True

    def __repr__(self) -> str:
        conn = self.__dict__.get("_parl_conn")
        where = conn.label if conn is not None else "not started"
        state = " closed" if conn is not None and conn.closed else ""
        return f"<remote {type(self).__qualname__} actor ({where}){state}>"


def close_actor(actor: RemoteProxy) -> None:
    """End ``actor``'s worker now, without waiting for the actor to be garbage-collected.

    Later calls on it raise :class:`parl.ActorClosedError`. ``del actor`` (the last
    reference) or leaving a ``with actor:`` block does the same.

    Args:
        actor: An instance of a ``@parl.remote_class`` class.

    Raises:
        TypeError: ``actor`` is not an actor.
    """
    if not isinstance(actor, RemoteProxy):
        raise TypeError(
            f"close_actor() takes an actor made by a @parl.remote_class class, got "
            f"{type(actor).__name__}"
        )
    actor._parl_conn.close()


def build_proxy_class(cls: type, options: RemoteOptions, base: type = RemoteProxy) -> type:
    namespace = _proxy_namespace(cls, options)
    namespace["_parl_decorated"] = True
    proxy = ProxyType(cls.__name__, (base,), namespace)
    _proxies[cls] = proxy
    return proxy


def _proxy_namespace(cls: type, options: RemoteOptions) -> dict[str, Any]:
    namespace: dict[str, Any] = {
        "_original": cls,
        "_parl_options": options,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    namespace.update(proxy_methods(cls, options.wait))
    return namespace


_KEPT = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__"})


def _make_subclass_remote(cls: type, class_kwargs: dict[str, Any]) -> None:
    """``class Sub(Remote): body``: the body joins the original classes instead, as the class
    ``Sub(Remote._original): body``, and ``cls`` becomes its proxy, with the options of its
    first base. Without this, the body's methods would run here, on the proxy."""
    bases = cls.__bases__
    local = [b for b in bases if not issubclass(b, RemoteProxy)]
    if local:
        remote = ", ".join(b.__qualname__ for b in bases if b not in local)
        raise TypeError(
            f"class {cls.__qualname__} derives from the remote class {remote} and from the "
            f"ordinary class {local[0].__qualname__}; an actor cannot be partly here: derive "
            f"from the undecorated class ({remote}._original) and decorate the subclass with "
            "@parl.remote_class"
        )
    cell = types.CellType()
    body = {
        k: _with_class_cell(v, cell)
        for k, v in cls.__dict__.items()
        if k not in ("__dict__", "__weakref__")
    }
    for slot in _slot_names(body):
        body.pop(slot, None)
    original = types.new_class(
        cls.__name__,
        tuple(b._original for b in bases),  # type: ignore[attr-defined]
        class_kwargs,
        lambda ns: ns.update(body),
    )
    cell.cell_contents = original
    for name in list(cls.__dict__):
        if name not in _KEPT:
            delattr(cls, name)
    for name, value in _proxy_namespace(original, cls._parl_options).items():  # type: ignore[attr-defined]
        setattr(cls, name, value)
    _proxies[original] = cls


def _slot_names(body: dict[str, Any]) -> list[str]:
    slots = body.get("__slots__", ())
    return [slots] if isinstance(slots, str) else list(slots)


def _with_class_cell(value: Any, cell: types.CellType) -> Any:
    """``value`` (a function, or a static/class method or property made of functions) with its
    ``__class__`` cell replaced by ``cell``. ``super()`` and ``__class__`` in a class body refer
    to the class the ``class`` statement made, which is the proxy: the copies in the original
    class must refer to the original class instead."""
    if isinstance(value, (staticmethod, classmethod)):
        return type(value)(_with_class_cell(value.__func__, cell))
    if isinstance(value, property):
        fget, fset, fdel = (_with_class_cell(f, cell) for f in (value.fget, value.fset, value.fdel))
        return property(fget, fset, fdel, value.__doc__)
    if not isinstance(value, types.FunctionType) or value.__closure__ is None:
        return value
    names = value.__code__.co_freevars
    if "__class__" not in names:
        return value
    closure = list(value.__closure__)
    closure[names.index("__class__")] = cell
    copy = types.FunctionType(
        value.__code__, value.__globals__, value.__name__, value.__defaults__, tuple(closure)
    )
    copy.__kwdefaults__ = value.__kwdefaults__
    copy.__dict__.update(value.__dict__)
    for attr in ("__qualname__", "__module__", "__doc__", "__annotations__"):
        setattr(copy, attr, getattr(value, attr))
    return copy


def _class_spec(cls: type) -> Any:
    """How the worker finds the class: by name when importable, else the class by value (the
    main script, ``__mp_main__`` in a multiprocessing child, a class made in a function, or a
    module that a cluster's hosts lack: see ``parl.wire.classes.send_by_value``)."""
    module = sys.modules.get(cls.__module__)
    if (
        not module_travels_by_value(cls.__module__)
        and module is not None
        and "<locals>" not in cls.__qualname__
    ):
        obj: Any = module
        for part in cls.__qualname__.split("."):
            obj = getattr(obj, part, None)
        if obj is cls or getattr(obj, "_original", None) is cls:
            return ClassRef(cls.__module__, cls.__qualname__)
    return cls


def _class_error(spec: Any) -> SerializationError | None:
    """When a class travelling by value cannot be pickled, say so and what in it fails."""
    if isinstance(spec, ClassRef):
        return None
    try:
        dumps(spec)
    except SerializationError as exc:
        if spec.__module__ in MAIN_MODULES:
            where = "defined in the main script"
        elif "<locals>" in spec.__qualname__:
            where = "defined in a function"
        else:
            where = f"not found as {spec.__module__}.{spec.__qualname__}"
        return SerializationError(
            f"class {spec.__qualname__} is {where}, so it travels to its worker by "
            f"value, and part of it cannot be pickled: {exc}. Move what fails into an "
            "importable module, or create it inside the method or in __init__"
        )
    return None


__all__ = [
    "ActorClosedError",
    "ProxyType",
    "RemoteOptions",
    "RemoteProxy",
    "build_proxy_class",
    "close_actor",
]
