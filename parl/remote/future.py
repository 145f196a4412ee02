"""Futures returned by the methods of ``@parl.remote_class(wait=False)`` actors."""

from __future__ import annotations

import threading
import time
from typing import Any

from parl.errors import ParlError
from parl.wire.contract import ActorConnection, CallTimeout

_UNSET = object()


class FutureEmpty(ParlError, TimeoutError):
    """``get_nowait()`` on a future whose result has not arrived yet."""


class FutureTimeout(CallTimeout, FutureEmpty):
    """``get(timeout=s)`` on a future whose result did not arrive within ``s`` seconds (the
    call stays pending: ``get`` may be called again). Also a :class:`FutureEmpty`, as PARL's
    ``FutureObjectEmpty`` covers both cases."""


class Future:
    """The pending result of one remote call.

    ``get()`` blocks for the result (or re-raises the remote exception); ``get(timeout=s)``
    raises :class:`FutureTimeout` (a ``TimeoutError`` and a :class:`FutureEmpty`) after ``s``
    seconds; ``get_nowait()`` raises :class:`FutureEmpty`
    when the result is not in yet; ``empty()`` tells without blocking. ``get`` may be called
    again and returns the same result (or raises the same exception).
    """

    __slots__ = ("_conn", "_call_id", "_value", "_error", "_lock", "__weakref__")

    def __init__(self, conn: ActorConnection, call_id: int) -> None:
        self._conn = conn
        self._call_id = call_id
        self._value: Any = _UNSET
        self._error: BaseException | None = None
        self._lock = threading.Lock()  # one thread collects the result; others then read it

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Wait for the result of the call and return it.

        Args:
            block: False behaves as :meth:`get_nowait`.
            timeout: Seconds to wait at most; None waits as long as the call takes.

        Returns:
            What the remote method returned. Later calls return the same object.

        Raises:
            FutureTimeout: No reply came within ``timeout`` seconds; the call is still pending and
                ``get`` may be called again.
            FutureEmpty: ``block=False`` and the result is not in yet.
            Exception: The exception the remote method raised (or :class:`parl.ActorDiedError` and
                the like when the actor failed), raised again by every later ``get``.
        """
        if self._value is _UNSET and self._error is None:
            if not block:
                return self.get_nowait()
            deadline = None if timeout is None else time.monotonic() + timeout
            if not self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
                raise self._timeout(timeout)
            try:
                if self._value is _UNSET and self._error is None:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    try:
                        self._value = self._conn.wait(self._call_id, remaining, keep=True)
                    except CallTimeout:
                        raise self._timeout(timeout) from None  # it says what is left
                    except Exception as exc:  # noqa: BLE001 - kept and raised again by every get()
                        self._error = exc
            finally:
                self._lock.release()
        if self._error is not None:
            raise self._error
        return self._value

    def _timeout(self, timeout: float | None) -> FutureTimeout:
        return FutureTimeout(
            f"no reply to call {self._call_id} from {self._conn.label} within {timeout} s"
        )

    def get_nowait(self) -> Any:
        """The result if it has arrived, without waiting.

        Returns:
            What the remote method returned.

        Raises:
            FutureEmpty: The result has not arrived yet.
            Exception: The remote method's exception, as :meth:`get` raises it.
        """
        if self.empty():
            raise FutureEmpty(
                f"the result of call {self._call_id} on {self._conn.label} is not ready"
            )
        return self.get()

    def empty(self) -> bool:
        """True while the result has not arrived."""
        if self._value is not _UNSET or self._error is not None:
            return False
        return not self._conn.ready(self._call_id)

    def __copy__(self) -> Future:
        # one call, one future: a second object sharing the call would drop it when collected
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Future:
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            f"a parl.Future cannot be pickled: it stands for call {self._call_id} on "
            f"{self._conn.label}, reachable only from this process; call .get() on it and "
            "send the value instead"
        )

    def __del__(self) -> None:
        if getattr(self, "_error", None) is None and getattr(self, "_value", None) is _UNSET:
            try:
                self._conn.discard(self._call_id)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def __repr__(self) -> str:
        state = "pending" if self._value is _UNSET and self._error is None else "done"
        return f"<parl.Future call {self._call_id} on {self._conn.label}: {state}>"

    def __bool__(self) -> bool:
        """Always true, as for any object (without it, ``bool`` would ask the refusing
        ``__len__``): ``if future:`` and ``future or default`` keep working."""
        return True

    def __getattr__(self, name: str) -> Any:
        # only names a Future lacks get here: ``future.shape`` where ``future.get().shape`` was
        # meant; dunder probes (numpy's ``__array_interface__``, copy's hooks) stay quiet
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"a parl.Future has no attribute {name!r}: {_GET_FIRST}")

    def __format__(self, spec: str) -> str:
        if not spec:
            return repr(self)
        raise TypeError(f"format spec {spec!r} on a parl.Future: {_GET_FIRST}")


_GET_FIRST = (
    "it is the pending result of a remote call, not the value; call .get() on it (or "
    "parl.get(futures) on several) first and use what that returns"
)


def _refused(name: str, what: str) -> Any:
    def refuse(self: Future, *args: Any) -> Any:
        raise TypeError(f"{what} a parl.Future: {_GET_FIRST}")

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


# What would use the value a Future stands for: arithmetic, ordering, len, indexing, iteration,
# numbers and numpy arrays. Equality and hashing stay those of the object (futures are dict
# keys and set members), and so does truth: ``if future:`` and ``future or default`` are
# common idioms for "a call was made", which raising would break.
_OPERATORS = "add sub mul matmul truediv floordiv mod divmod pow lshift rshift and xor or"
for _op in _OPERATORS.split():
    setattr(Future, f"__{_op}__", _refused(f"__{_op}__", f"arithmetic ({_op}) on"))
    setattr(Future, f"__r{_op}__", _refused(f"__r{_op}__", f"arithmetic ({_op}) on"))
for _op in "lt le gt ge".split():
    setattr(Future, f"__{_op}__", _refused(f"__{_op}__", "comparing"))
for _op, _what in {
    "neg": "negating", "pos": "unary + on", "abs": "abs() of", "invert": "~ on",
    "int": "int() of", "float": "float() of", "complex": "complex() of",
    "index": "using as an index", "round": "round() of", "len": "len() of",
    "getitem": "indexing", "setitem": "assigning an item of", "delitem": "deleting an item of",
    "iter": "iterating over", "contains": "'in' on", "array": "a numpy array of",
}.items():  # fmt: skip
    setattr(Future, f"__{_op}__", _refused(f"__{_op}__", _what))
del _op, _what
