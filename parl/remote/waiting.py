"""``parl.wait`` and ``parl.get``: results of futures of many actors, whichever come first.

One ``poll`` covers the connections of every pending future (their sockets and their workers'
liveness descriptors), so an asynchronous learner takes the first actor that answers instead of
blocking on one future after another.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from parl.errors import ParlError
from parl.remote.future import Future
from parl.validation import check_float, check_int
from parl.wire.framing import wait_readable

_POLL_S = 0.25  # re-check at least this often (a reply read by another thread wakes nobody)
_MIXED_POLL_S = 0.005  # futures of Ray and of our carriers in one wait: poll each this often


class GetTimeoutError(ParlError, TimeoutError):
    """``parl.get`` or ``parl.wait`` ran out of time; ``pending`` holds the futures left."""

    def __init__(self, message: str, pending: list[Future] | None = None) -> None:
        super().__init__(message)
        self.pending = pending or []


def wait(
    futures: Sequence[Future], num_returns: int = 1, timeout: float | None = None
) -> tuple[list[Future], list[Future]]:
    """Wait until ``num_returns`` of ``futures`` are done, or until ``timeout`` seconds pass.

    A future is done when its result, a remote error or the news of a dead actor has arrived;
    nothing is raised for the last two here (the future's ``get`` raises them).

    Args:
        futures: Futures of ``@parl.remote_class(wait=False)`` actors (a list or tuple).
        num_returns: How many done futures to wait for, from 0 to ``len(futures)``.
        timeout: Seconds to wait at most; None waits as long as it takes.

    Returns:
        ``(done, pending)``: two lists, each in the order of ``futures``, with at most
        ``num_returns`` futures in ``done`` and all the others in ``pending``.

    Raises:
        TypeError: ``futures`` is not a list of futures, ``num_returns`` not an int, or
            ``timeout`` not a number.
        ValueError: ``num_returns`` is out of range, or ``timeout`` is negative or NaN.
    """
    futures = _check(futures, "wait")
    num_returns = check_int(
        "num_returns", num_returns, low=0, high=len(futures),
        what=f"an int between 0 and the number of futures ({len(futures)})",
    )  # fmt: skip
    deadline = None if timeout is None else time.monotonic() + _check_timeout(timeout)
    while True:
        done = [f for f in futures if not f.empty()]
        if len(done) >= num_returns:
            break
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        finished = {id(f) for f in done}
        _block([f for f in futures if id(f) not in finished], remaining)
    chosen = {id(f) for f in done[:num_returns]}
    return [f for f in futures if id(f) in chosen], [f for f in futures if id(f) not in chosen]


def _block(pending: list[Future], remaining: float | None) -> None:
    """Wait (at most ``_POLL_S``) until a pending future may be done. Connections with
    descriptors are polled together; those without (Ray's) block in ``wait_any`` on all
    their calls at once. Both kinds at once: short polls of each."""
    wait_s = _POLL_S if remaining is None else min(remaining, _POLL_S)
    fds = {fd for f in pending for fd in f._conn.wait_fds}
    others = [f for f in pending if not f._conn.wait_fds]
    if others:
        if fds:
            wait_s = min(wait_s, _MIXED_POLL_S)
        calls = [(f._conn, f._call_id) for f in others]
        others[0]._conn.wait_any(calls, 0 if fds else wait_s)
    wait_readable(sorted(fds), 0 if others and not fds else wait_s)


def get(futures: Future | Sequence[Future], timeout: float | None = None) -> Any:
    """The results of ``futures``, waiting for them.

    Args:
        futures: One future, or a list or tuple of futures.
        timeout: Seconds to wait at most for all of them; None waits as long as it takes.

    Returns:
        The future's result when ``futures`` is one future; for a list, the results in the
        order of ``futures``.

    Raises:
        GetTimeoutError: Some futures were still pending after ``timeout`` seconds (its
            ``pending`` names them); for one future, the future's own timeout error.
        Exception: The first remote error, in the order of ``futures``.
        TypeError: ``futures`` is not a future or a list of futures.
    """
    if isinstance(futures, Future):
        return futures.get(timeout=_check_timeout(timeout) if timeout is not None else None)
    futures = _check(futures, "get")
    _, pending = wait(futures, len(futures), timeout)
    if pending:
        raise GetTimeoutError(
            f"parl.get: {len(pending)} of {len(futures)} futures still pending after {timeout} s",
            pending,
        )
    return [f.get() for f in futures]


def _check(futures: Any, name: str) -> list[Future]:
    if isinstance(futures, Future) or not isinstance(futures, (list, tuple)):
        raise TypeError(
            f"parl.{name}() takes a list of futures (from @parl.remote_class(wait=False) actors), "
            f"got {type(futures).__name__}"
        )
    for i, future in enumerate(futures):
        if not isinstance(future, Future):
            raise TypeError(
                f"parl.{name}(): item {i} is a {type(future).__name__}, not a parl.Future; call "
                "the methods of a @parl.remote_class(wait=False) actor to get futures"
            )
    return list(futures)


def _check_timeout(timeout: Any) -> float:
    return check_float(
        "timeout", timeout, low=0, finite=False, what="None or a number of seconds >= 0"
    )
