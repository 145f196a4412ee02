"""Name the part of an object that cannot be pickled.

Pickle's own errors say what failed ("cannot pickle '_struct.Struct' object") but not where:
in a class sent by value the culprit may be a global that one method uses. This walks into
classes (attributes), functions (the globals they use, closure variables, defaults),
containers and instances, and returns the path to the smallest part that still fails, such
as ``B.run -> global HEADER (a _struct.Struct)``. It runs only once pickling has failed.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

from parl.wire.classes import travels_by_value

_MAX_DEPTH = 8
_MAX_CHILDREN = 200  # per container: enough to find the culprit in any realistic object
_SKIPPED_CLASS_ATTRIBUTES = frozenset(
    ("__dict__", "__weakref__", "__module__", "__doc__", "__qualname__", "__slots__")
)


def find_unpicklable(obj: Any, can_pickle: Callable[[Any], bool]) -> str | None:
    """The path to the smallest part of ``obj`` that ``can_pickle`` rejects, or None when no
    part smaller than ``obj`` itself fails (then the message of the failure says enough)."""
    path = _search(obj, [_label(obj)], can_pickle, set(), 0)
    if path is None or len(path) < 3:  # [label, obj]: obj itself fails
        return None
    *steps, leaf = path
    text = steps[0]
    for step in steps[1:]:
        text += step if step[0] in ".[" else f" -> {step}"
    return f"{text} ({_a(leaf)})"


def _search(
    obj: Any, path: list[Any], can_pickle: Callable[[Any], bool], seen: set[int], depth: int
) -> list[Any] | None:
    if id(obj) in seen or depth > _MAX_DEPTH:
        return None
    seen.add(id(obj))
    if can_pickle(obj):
        return None
    for step, child in _children(obj):
        found = _search(child, [*path, step], can_pickle, seen, depth + 1)
        if found is not None:
            return found
    return [*path, obj]


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    """(step name, part) pairs: the parts that pickling ``obj`` pickles."""
    if isinstance(obj, type):
        for name, value in list(vars(obj).items())[:_MAX_CHILDREN]:
            if name not in _SKIPPED_CLASS_ATTRIBUTES:
                yield f".{name}", value
    elif isinstance(obj, types.FunctionType):
        yield from _function_parts(obj)
    elif isinstance(obj, (staticmethod, classmethod)):
        yield ".__func__", obj.__func__
    elif isinstance(obj, property):
        for name in ("fget", "fset", "fdel"):
            if getattr(obj, name) is not None:
                yield f".{name}", getattr(obj, name)
    elif isinstance(obj, dict):
        for key, value in list(obj.items())[:_MAX_CHILDREN]:
            yield f"[{key!r}]", value
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, value in enumerate(list(obj)[:_MAX_CHILDREN]):
            yield f"[{i}]", value
    else:
        if travels_by_value(type(obj)):  # its class is pickled with it
            yield type(obj).__qualname__, type(obj)
        if isinstance(getattr(obj, "__dict__", None), dict):
            for name, value in list(vars(obj).items())[:_MAX_CHILDREN]:
                yield f".{name}", value


def _function_parts(fn: types.FunctionType) -> Iterator[tuple[str, Any]]:
    for name in sorted(_global_names(fn.__code__)):
        if name in fn.__globals__:
            yield f"global {name}", fn.__globals__[name]
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
        try:
            yield f"variable {name}", cell.cell_contents
        except ValueError:  # an empty cell
            continue
    for i, value in enumerate(fn.__defaults__ or ()):
        yield f"default #{i}", value
    for name, value in (fn.__kwdefaults__ or {}).items():
        yield f"default of {name}", value


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # nested functions and comprehensions
            names |= _global_names(const)
    return names


def _label(obj: Any) -> str:
    if isinstance(obj, (type, types.FunctionType)):
        return obj.__qualname__
    return f"the {type(obj).__name__}"


def _a(obj: Any) -> str:
    kind = type(obj)
    module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    return f"a {module}{kind.__qualname__}"
