"""Checks of arguments, for every layer: the runtime, the envs and the RL code alike.

Each check returns the value it was given, converted (``check_float`` returns a float), or
raises: ``TypeError`` for a value of the wrong type, ``ValueError`` for one out of range. The
message names the argument, says what it must be and shows what it got, with the owner in
front and a hint behind when the caller gives them::

    check_int("num_envs", num_envs, low=1)
    # ValueError: num_envs must be an int >= 1, got 0
    check_float("linger", linger, low=0, what="a number of seconds >= 0")
    # TypeError: linger must be a number of seconds >= 0, got '5' (str)
    check_int("batch_size", 0, low=1, owner="ReplayMemory", hint="e.g. batch_size=256")
    # ValueError: ReplayMemory: batch_size must be an int >= 1, got 0; e.g. batch_size=256

Bools are not numbers here (``True`` is no batch size); numpy's integers and floats are.

``keyword_aliases`` lets a method take a second keyword name for a parameter (PARL's spelling
beside this package's), refusing a call that gives both.
Standard library only, and nothing of ``parl``: every package may import it.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["check_bool", "check_float", "check_int", "keyword_aliases"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _range_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {low}"
    if high is not None:
        return f" {'<' if high_open else '<='} {high}"
    return ""


def _message(name: str, expected: str, got: str, owner: str | None, hint: str | None) -> str:
    prefix = f"{owner}: " if owner else ""
    suffix = f"; {hint}" if hint else ""
    return f"{prefix}{name} must be {expected}, got {got}{suffix}"


def check_float(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
    owner: str | None = None,
    what: str | None = None,
    hint: str | None = None,
) -> float:
    """Return ``value`` as a float if it is a finite real number within the bounds.

    Args:
        name: the argument's name, as the caller wrote it.
        value: what was given.
        low: the smallest value allowed (``None``: no bound).
        high: the largest value allowed (``None``: no bound).
        low_open: exclude ``low`` itself (``low=0, low_open=True``: any positive number).
        high_open: exclude ``high`` itself.
        finite: refuse infinities (NaN is always refused).
        owner: the class or function the argument belongs to, put in front of the message.
        what: what the message says the value must be, instead of "a float" and the bounds
            (e.g. "a number of seconds >= 0").
        hint: what to do, put behind the message.

    Raises:
        TypeError: ``value`` is not a real number (bools are not).
        ValueError: ``value`` is NaN, infinite (where ``finite``) or outside the bounds.
    """
    expected = what or f"a float{_range_text(low, high, low_open, high_open)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(_message(name, expected, _shown(value), owner, hint))
    try:
        result = float(value)
    except OverflowError:  # an int beyond float's range: an infinity of its sign
        result = math.inf if value > 0 else -math.inf  # type: ignore[operator]  # (Real compares)
    bad = (
        math.isnan(result)
        or (finite and math.isinf(result))
        or (low is not None and (result <= low if low_open else result < low))
        or (high is not None and (result >= high if high_open else result > high))
    )
    if bad:
        raise ValueError(_message(name, expected, repr(value), owner, hint))
    return result


def check_int(
    name: str,
    value: object,
    *,
    low: int | None = None,
    high: int | None = None,
    owner: str | None = None,
    what: str | None = None,
    hint: str | None = None,
) -> int:
    """Return ``value`` as an int if it is an integer (not a bool) in ``[low, high]``.

    Args:
        name: the argument's name, as the caller wrote it.
        value: what was given (a Python or numpy integer).
        low: the smallest value allowed (``None``: no bound).
        high: the largest value allowed (``None``: no bound).
        owner: the class or function the argument belongs to, put in front of the message.
        what: what the message says the value must be, instead of "an int" and the bounds
            (e.g. "an int of at least 65536 (bytes)").
        hint: what to do, put behind the message.

    Raises:
        TypeError: ``value`` is not an integer (bools and floats are not).
        ValueError: ``value`` is outside the bounds.
    """
    expected = what or f"an int{_range_text(low, high, False, False)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(_message(name, expected, _shown(value), owner, hint))
    result = int(value)
    if (low is not None and result < low) or (high is not None and result > high):
        raise ValueError(_message(name, expected, repr(value), owner, hint))
    return result


def check_bool(name: str, value: object, *, owner: str | None = None) -> bool:
    """Return ``value`` if it is a bool (numpy bools included).

    Raises:
        TypeError: ``value`` is anything else (``1`` and ``"yes"`` included).
    """
    if type(value).__name__ not in ("bool", "bool_"):
        raise TypeError(_message(name, "True or False", _shown(value), owner, None))
    return bool(value)


def _shown(value: object) -> str:
    """A value of the wrong type, with its type: ``'5' (str)``."""
    return f"{value!r} ({type(value).__name__})"


def keyword_aliases(**aliases: str) -> Callable[[_F], _F]:
    """Decorate a function so that it also takes the keyword ``alias`` for its parameter ``name``
    (``@keyword_aliases(obs_batch="obs")``): the value is passed on as ``name``.

    The mapping is kept as the function's ``keyword_aliases`` attribute, and its signature stays
    the function's own. A call that gives both names (both as keywords, or ``name`` by position
    and ``alias`` as a keyword) raises ``TypeError`` naming both.
    """

    def decorate(func: _F) -> _F:
        params = inspect.signature(func).parameters
        positions = {
            n: i
            for i, (n, p) in enumerate(params.items())
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        }
        for alias, name in aliases.items():
            # a wrong table is a bug of the decorated code, found when its module loads
            assert name in params, f"{func.__qualname__} has no parameter {name!r}"
            assert alias not in params, f"{func.__qualname__} already has a parameter {alias!r}"

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for alias, name in aliases.items():
                if alias not in kwargs:
                    continue
                by_position = name in positions and len(args) > positions[name]
                if name in kwargs or by_position:
                    raise TypeError(
                        f"{func.__qualname__}() got {name!r} and its other name {alias!r}: "
                        f"give one of them"
                    )
                kwargs[name] = kwargs.pop(alias)
            return func(*args, **kwargs)

        wrapper.keyword_aliases = dict(aliases)  # type: ignore[attr-defined]
        return cast(_F, wrapper)

    return decorate
