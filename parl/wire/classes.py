"""Classes that travel by value keep their identity: one id per class, one copy per process.

A class that the receiver cannot import (defined in the main script, ``__mp_main__`` in a
``multiprocessing`` child, or inside a function) is sent by value. Left at that, every message
would rebuild it as a new class: ``isinstance``, ``except MyError`` and ``Color.RED is
Color.RED`` would fail, and each message would pay for the class's definition. Instead:

- Each such class gets an id (a random hex string) the first time it is pickled. Every process
  keeps a weak map between ids and classes, so a class that comes back to the process that
  defined it is the original class, and a class received twice is rebuilt once.
- Each connection has a :class:`ClassTable`: the classes its peer is known to hold. Those travel
  as their id alone (:func:`known_class`), so a message carrying an instance costs about what a
  dict of the same size costs; the definition travels once per connection. A class counts as
  held by the peer once its definition has gone from the caller to the actor: the actor reads
  every request, whereas the caller skips the replies of dropped futures. Both ends keep those
  classes alive as long as the connection lives.

The definition itself is cloudpickle's reduction of the class (skeleton, then state), wrapped
so that the receiver looks the id up first (:func:`define_class`) and fills only a class that
is new to it (:func:`fill_class`): the original class is never overwritten. The text of the
files that define the class's methods travels with it, and a receiver that lacks those files
(a cluster's host) puts it in :mod:`linecache`: its tracebacks show the lines of the user's
script, under the script's own path.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
import types
import uuid
import weakref
from collections.abc import Callable
from typing import Any

MAIN_MODULES = ("__main__", "__mp_main__")

_lock = threading.Lock()
_class_by_id: weakref.WeakValueDictionary[str, type] = weakref.WeakValueDictionary()
# id(class) -> (weak reference, class id): asked for every by-value class in every message, so
# a plain dict rather than a WeakKeyDictionary (which makes a weak reference per lookup)
_id_by_class: dict[int, tuple[weakref.ref[type], str]] = {}
_unfilled: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()  # new skeletons
# importable classes seen so far: module attributes, which live as long as their module anyway
# (a plain set, as this is asked for every class in every message)
_by_reference: set[type] = set()
# modules the receivers may lack (a cluster's hosts have only the caller's project folder)
_by_value_modules: set[str] = set()
_local = threading.local()  # .sending: _Send | None, .receiving: ClassTable | None (an actor's)
# an actor's serve loop sets ``current.receiving`` around each load (cheaper than ``with``)
current = _local


def travels_by_value(cls: type) -> bool:
    """True when a receiver could not import ``cls`` by its module and qualified name."""
    if cls in _by_reference:
        return False
    if _known_id(cls) is not None:
        return True
    module_name = getattr(cls, "__module__", None)
    if (
        not isinstance(module_name, str)
        or module_name in MAIN_MODULES
        or module_name in _by_value_modules
    ):
        return True
    if module_name != "builtins":  # builtins: NoneType and the like are not found by name
        target: Any = sys.modules.get(module_name)
        for part in str(getattr(cls, "__qualname__", "<unknown>")).split("."):
            target = getattr(target, part, None)  # "<locals>" is never found
        if target is not cls:
            return True
    _by_reference.add(cls)
    return False


def module_travels_by_value(module_name: str) -> bool:
    """Whether what is defined in the module ``module_name`` travels by value."""
    return module_name in MAIN_MODULES or module_name in _by_value_modules


def send_by_value(module_name: str) -> None:
    """From now on, classes and functions of the module ``module_name`` travel by value, like
    those of ``__main__``: receivers need not be able to import it."""
    module = sys.modules.get(module_name)
    if module is None or module_name in _by_value_modules:
        return
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    with _lock:
        _by_value_modules.add(module_name)
        for cls in [c for c in _by_reference if getattr(c, "__module__", None) == module_name]:
            _by_reference.discard(cls)


def by_value_modules() -> frozenset[str]:
    """The modules registered with :func:`send_by_value` in this process."""
    return frozenset(_by_value_modules)


def send_by_reference(module_name: str) -> None:
    """Undo :func:`send_by_value`: classes and functions of ``module_name`` travel by reference
    again (for a program that connects to carriers with other project folders in turn)."""
    module = sys.modules.get(module_name)
    with _lock:
        if module_name not in _by_value_modules:
            return
        _by_value_modules.discard(module_name)
        # its classes sent by value so far go by reference from now on; their ids stay known
        # the other way (_class_by_id), for the objects actors still send back with them
        for key, (ref, _) in list(_id_by_class.items()):
            cls = ref()
            if cls is not None and getattr(cls, "__module__", None) == module_name:
                del _id_by_class[key]
    if module is None:
        return
    import cloudpickle

    try:
        cloudpickle.unregister_pickle_by_value(module)
    except ValueError:  # not registered there
        pass
    ray_pickle = sys.modules.get("ray.cloudpickle")  # the Ray carrier registers it there too
    if ray_pickle is not None:
        try:
            ray_pickle.unregister_pickle_by_value(module)
        except ValueError:
            pass


def class_id(cls: type) -> str:
    """The id of a class that travels by value (assigned on first use)."""
    found = _known_id(cls)
    if found is not None:
        return found
    with _lock:
        found = _known_id(cls)
        if found is None:
            found = uuid.uuid4().hex
            _remember(cls, found)
    return found


def _known_id(cls: type) -> str | None:
    entry = _id_by_class.get(id(cls))
    if entry is not None and entry[0]() is cls:
        return entry[1]
    return None


def _remember(cls: type, cid: str) -> None:
    """Map ``cls`` and ``cid`` both ways, until ``cls`` is garbage (call with the lock held)."""
    key = id(cls)
    by_class = _id_by_class  # held here: at interpreter exit module globals may be None

    def forget(ref: weakref.ref[type]) -> None:
        entry = by_class.get(key)
        if entry is not None and entry[0] is ref:
            del by_class[key]

    by_class[key] = (weakref.ref(cls, forget), cid)
    _class_by_id[cid] = cls


class ClassTable:
    """The by-value classes that one connection's peer holds, by id (see the module doc).

    ``role`` is ``"caller"`` (a class counts as held by the peer once sent) or ``"actor"``
    (once received). Encode each message inside ``with table.sending:``; an actor loads each
    request inside ``with table.receiving:`` (a caller needs no scope to load replies)."""

    def __init__(self, role: str) -> None:
        if role not in ("caller", "actor"):
            raise ValueError(f"role must be 'caller' or 'actor', got {role!r}")
        self.held: dict[str, type] = {}
        self.held_on_send = role == "caller"
        # one scope object each, reused: a connection encodes (and loads) one message at a time
        self.sending = _Send(self)
        self.receiving = _Receive(self)


class _Send:
    """While encoding one message: short references for held classes; the definitions sent
    count as held (by a caller's peer) only if the whole message was encoded."""

    __slots__ = ("table", "defined", "references", "_outer")

    def __init__(self, table: ClassTable) -> None:
        self.table = table
        self.defined: dict[str, type] = {}
        # held classes -> their short reduction, asked by the pickler before anything else
        self.references: dict[type, tuple[Callable[..., type], tuple[str, str]]] = {}
        self._outer: _Send | None = None

    def __enter__(self) -> _Send:
        self._outer = getattr(_local, "sending", None)
        _local.sending = self
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        _local.sending = self._outer
        if self.defined:
            self.finish(exc_type is None)

    def finish(self, ok: bool) -> None:
        """End a message encoded with this scope passed to ``dumps`` (the hot path: no
        ``with``); only needed when ``defined`` is not empty."""
        if ok and self.table.held_on_send:
            self.table.held.update(self.defined)
        self.defined = {}


class _Receive:
    __slots__ = ("table", "_outer")

    def __init__(self, table: ClassTable) -> None:
        self.table = table
        self._outer: ClassTable | None = None

    def __enter__(self) -> _Receive:
        self._outer = getattr(_local, "receiving", None)
        _local.receiving = self.table
        return self

    def __exit__(self, *exc_info: object) -> None:
        _local.receiving = self._outer


def reference(
    cls: type, sending: _Send | None = None
) -> tuple[Callable[..., type], tuple[str, str]] | None:
    """A short reduction of ``cls`` when the peer of the message being encoded holds it
    (``sending``: that message's scope, else the one entered with ``with``)."""
    send: _Send | None = sending if sending is not None else getattr(_local, "sending", None)
    if send is None:
        return None
    cid = class_id(cls)
    if cid in send.table.held:
        reduced = known_class, (cid, cls.__qualname__)
        send.references[cls] = reduced
        return reduced
    return None


def definition(cls: type, reduced: tuple, sending: _Send | None = None) -> tuple:
    """Wrap cloudpickle's reduction of ``cls`` (a 6-tuple whose state is set by a function)."""
    make, args, state, _, _, set_state = reduced
    slots = vars(cls).get("__slots__")
    if slots is not None and getattr(make, "__name__", "") == "_make_skeleton_class":
        # cloudpickle sets __slots__ after creating the class, where it does nothing: instances
        # would get a __dict__ and fail to load where the class has real slots
        kind, name, bases, type_kwargs, *rest = args
        args = (kind, name, bases, {**type_kwargs, "__slots__": slots}, *rest)
    cid = class_id(cls)
    send: _Send | None = sending if sending is not None else getattr(_local, "sending", None)
    if send is not None:
        send.defined[cid] = cls
    sources = _sources(cls)
    return define_class, (cid, make, args, sources), (set_state, state), None, None, fill_class


_SOURCE_LIMIT = 1 << 20  # bytes of source sent with one class, at most


def _sources(cls: type) -> tuple[tuple[str, str], ...]:
    """(file name, text) of the files that define ``cls``'s methods, for the receiver's
    tracebacks; nothing for files that cannot be read or are too large."""
    names: set[str] = set()
    for value in vars(cls).values():
        for part in (value, getattr(value, "__func__", None), getattr(value, "fget", None)):
            code = getattr(part, "__code__", None)
            if isinstance(code, types.CodeType):
                names.add(code.co_filename)
    out, size = [], 0
    for name in sorted(names):
        text = "".join(linecache.getlines(name))
        size += len(text)
        if text and size <= _SOURCE_LIMIT:
            out.append((name, text))
    return tuple(out)


def _register_sources(sources: tuple[tuple[str, str], ...]) -> None:
    """Let tracebacks here show the lines of files that exist only on the sender's machine."""
    for name, text in sources:
        if name not in linecache.cache and not os.path.exists(name):
            # no modification time: linecache.checkcache keeps the entry as it is
            linecache.cache[name] = (len(text), None, text.splitlines(keepends=True), name)


# -- called by the unpickler ------------------------------------------------------------------


def define_class(
    cid: str, make: Callable[..., type], args: tuple, sources: tuple[tuple[str, str], ...] = ()
) -> type:
    """The class known here under ``cid``, else a new skeleton that :func:`fill_class` fills
    (``sources``: the text of the files that define it, for tracebacks here)."""
    cls = _class_by_id.get(cid)
    if cls is None:
        _register_sources(sources)
        cls = make(*args)  # cloudpickle's own tracking may return a class it knows
        if _known_id(cls) is None:
            _unfilled[cls] = cid
            return cls
        _class_by_id.setdefault(cid, cls)
    _note_received(cid, cls)
    return cls


def fill_class(cls: type, payload: tuple[Callable[[type, Any], Any], Any]) -> None:
    """Give a new skeleton its attributes; a class that existed here keeps its own."""
    cid = _unfilled.pop(cls, None)
    if cid is None:
        return
    set_state, state = payload
    set_state(cls, state)
    with _lock:
        cls = _class_by_id.setdefault(cid, cls)  # another thread may have been first
        if _known_id(cls) is None:
            _remember(cls, cid)
    _note_received(cid, cls)


def known_class(cid: str, qualname: str) -> type:
    """A class sent by id alone: its definition came earlier on this connection (so a class
    table holds it, and it is alive in the registry)."""
    cls = _class_by_id.get(cid)
    if cls is None:
        raise LookupError(
            f"class {qualname} arrived by reference to its definition (id {cid}), but this "
            "process never loaded that definition (the message carrying it failed to load)"
        )
    return cls


def _note_received(cid: str, cls: type) -> None:
    table: ClassTable | None = getattr(_local, "receiving", None)
    if table is not None and not table.held_on_send:
        table.held[cid] = cls
