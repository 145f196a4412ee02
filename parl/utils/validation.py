"""Checks for hyperparameters: they raise ``TypeError``/``ValueError`` naming the argument, the
value received and what is expected. Standard library only."""

from __future__ import annotations

import math
import numbers

__all__ = ["check_bool", "check_float", "check_int"]


def _prefix(owner: str | None) -> str:
    return f"{owner}: " if owner else ""


def _range_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {low}"
    if high is not None:
        return f" {'<' if high_open else '<='} {high}"
    return ""


def check_float(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    owner: str | None = None,
) -> float:
    """Return ``value`` as a float if it is a finite real number within the bounds.

    ``low_open``/``high_open`` exclude the bound itself: ``check_float("lr", lr, low=0,
    low_open=True)`` accepts any positive learning rate. Integers are accepted, bools are not.
    """
    expected = f"a float{_range_text(low, high, low_open, high_open)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{_prefix(owner)}{name} must be {expected}, got {value!r} ({type(value).__name__})"
        )
    result = float(value)
    bad = (
        not math.isfinite(result)
        or (low is not None and (result <= low if low_open else result < low))
        or (high is not None and (result >= high if high_open else result > high))
    )
    if bad:
        raise ValueError(f"{_prefix(owner)}{name} must be {expected}, got {value!r}")
    return result


def check_int(
    name: str,
    value: object,
    *,
    low: int | None = None,
    high: int | None = None,
    owner: str | None = None,
) -> int:
    """Return ``value`` as an int if it is an integer (not a bool) in ``[low, high]``."""
    expected = f"an int{_range_text(low, high, False, False)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{_prefix(owner)}{name} must be {expected}, got {value!r} ({type(value).__name__})"
        )
    result = int(value)
    if (low is not None and result < low) or (high is not None and result > high):
        raise ValueError(f"{_prefix(owner)}{name} must be {expected}, got {value!r}")
    return result


def check_bool(name: str, value: object, *, owner: str | None = None) -> bool:
    """Return ``value`` if it is a bool (numpy bools included)."""
    if type(value).__name__ not in ("bool", "bool_"):
        raise TypeError(
            f"{_prefix(owner)}{name} must be True or False, got {value!r} ({type(value).__name__})"
        )
    return bool(value)
