"""The caller's end of one actor on Ray: the proxy's requests as Ray actor-method calls.

It is an :class:`parl.wire.contract.ActorConnection` (``submit`` returns a call id, ``wait``
its result, ``ready``, ``discard``, ``close``...), so the user face is the same on every
carrier. A call id maps to the ``ObjectRef`` of the call; waiting is
``ray.get``, readiness ``ray.wait``. Ray's errors become this project's: a dead actor is
:class:`parl.ActorDiedError`, a value Ray cannot pickle a :class:`SerializationError` (a
``TypeError``), a failure in user code the exception it raised (see :mod:`parl.ray.host`).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray import exceptions as ray_errors

from parl.errors import (
    ActorDiedError,
    ActorForkedError,
    ParlError,
    RemoteError,
    SerializationError,
    SharedHandleError,
)
from parl.ray.host import Failed, Hiding
from parl.shm.handles import holds_handle
from parl.wire.contract import ActorConnection, CallBook
from parl.wire.failure import rebuild_exception
from parl.wire.protocol import CALL, GETATTR, INIT, SETATTR

_DIED = (ray_errors.RayActorError, ray_errors.ActorUnavailableError)


class RayConnection(CallBook):
    """One actor's calls. ``label`` names the actor in errors (``Sampler pid=123``)."""

    def __init__(self, handle: Any, label: str, end: Callable[[Any, bool], None]) -> None:
        super().__init__(label)
        self._handle = handle
        self._call = handle.call  # the method of every CALL, looked up once
        self._lock = threading.Lock()
        self._refs: dict[int, tuple[Any, str]] = {}  # call id -> (ObjectRef, what it returns)
        self._done: set[int] = set()  # call ids whose reply is known to be in
        self._failure: ParlError | None = None
        self._closed = False
        # methods of the actor's class that attributes of its instance hide (parl.wire.hiding)
        self.hidden: frozenset[str] = frozenset()
        self._pid = os.getpid()
        self._graceful = [True]  # False once Ray reported the actor dead: nothing to stop
        self._finalizer = weakref.finalize(self, _end, handle, end, self._graceful, self._pid)

    # -- requests -----------------------------------------------------------------------------

    def submit(self, kind: int, payload: Any) -> int:
        """Send a request; returns its call id. Raises SerializationError when Ray cannot
        pickle an argument (the actor stays usable)."""
        self._check_usable()
        handle = self._handle
        if holds_handle(payload):  # Ray would send a copy of it: refused, as on a cluster
            raise SharedHandleError()
        try:
            if kind == CALL:
                name, args, kwargs = payload
                ref = self._call.remote(name, *args, **kwargs)
                what = f"the return value of {name}()"
            elif kind == GETATTR:
                ref, what = handle.get_attr.remote(payload), f"attribute {payload!r}"
            elif kind == SETATTR:
                ref, what = handle.set_attr.remote(*payload), "None"
            elif kind == INIT:
                ref, what = handle.init.remote(*payload), "None"
            else:
                raise ValueError(f"unknown request kind {kind}")
        except TypeError as exc:  # Ray: "Could not serialize the argument ..."
            raise SerializationError(str(exc).split("\n", 1)[0]) from None
        except Exception as exc:  # a bare Exception: an actor of an ended Ray
            if type(exc) is not Exception or "Failed to submit task to actor" not in str(exc):
                raise
            raise self._died(exc) from None
        with self._lock:
            self._last_id = call_id = self._last_id + 1
            self._refs[call_id] = (ref, what)
        return call_id

    def _is_pending(self, call_id: int) -> bool:
        return call_id in self._refs

    def _wait(self, call_id: int, timeout: float | None) -> Any:
        """The result of ``call_id`` (see :meth:`CallBook.wait`); a call that failed is
        forgotten here, one that timed out stays pending."""
        self._note_shutdown()
        if self._failure is not None:
            self._forget(call_id)
            raise self._failure
        try:
            ref, what = self._refs[call_id]
        except KeyError:
            raise self._collected(call_id) from None
        try:
            value = ray.get(ref, timeout=timeout)
        except ray_errors.GetTimeoutError:
            raise self._timed_out(timeout) from None
        except _DIED as exc:
            self._forget(call_id)
            raise self._died(exc) from None
        except ray_errors.RayTaskError as exc:  # Ray could not send the request or result
            self._forget(call_id)
            if self._failure is not None:
                raise self._failure from None
            cause = exc.cause if exc.cause is not None else exc
            if isinstance(cause, ray_errors.RaySystemError):  # the request failed to unpickle
                raise self._unpickling_error(
                    cause, "in the actor, unpickling the request"
                ) from None
            raise SerializationError(f"{what} cannot be sent back to the caller: {cause}") from None
        except ray_errors.RaySystemError as exc:  # the reply failed to unpickle here
            self._forget(call_id)
            raise self._unpickling_error(exc, "here, unpickling the reply") from None
        except ray_errors.RayError as exc:  # e.g. the result was lost with its node
            self._forget(call_id)
            raise RemoteError(
                f"a call on actor {self.label} failed in Ray: {type(exc).__name__}: {exc}"
            ) from exc
        self._forget(call_id)
        if type(value) is Failed:
            raise rebuild_exception(value.failure, self.label)
        if type(value) is Hiding:
            value, self.hidden = value
        return value

    def ready(self, call_id: int) -> bool:
        """True when the reply for ``call_id`` (or the connection's failure) is in."""
        self._note_shutdown()
        if call_id in self._done or self._failure is not None:
            return True
        entry = self._refs.get(call_id)
        if entry is None:
            return True
        done, _ = ray.wait([entry[0]], timeout=0, fetch_local=False)
        if done:
            self._done.add(call_id)
        return bool(done)

    def wait_any(self, calls: Sequence[tuple[ActorConnection, int]], timeout: float) -> None:
        """Block until one of ``calls`` (connection, call id) is answered, or ``timeout``;
        notes every call answered by then, so that ``ready`` tells at once (``parl.wait``)."""
        by_ref = {}
        for conn, call_id in calls:
            if not isinstance(conn, RayConnection):
                return  # another carrier's connection without descriptors: it failed
            entry = conn._refs.get(call_id)
            if entry is None or conn._failure is not None:
                return
            by_ref[entry[0]] = (conn, call_id)
        refs = list(by_ref)
        done, _ = ray.wait(refs, num_returns=1, timeout=timeout, fetch_local=False)
        if done:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        for ref in done:
            conn, call_id = by_ref[ref]
            conn._done.add(call_id)

    @property
    def wait_fds(self) -> list[int]:
        """No descriptor tells of a Ray reply: ``parl.wait`` uses :meth:`wait_any`."""
        return []

    def outstanding(self) -> int:
        return len(self._refs)

    def pending_calls(self) -> list[int]:
        return [call_id for call_id in list(self._refs) if call_id not in self._done]

    def discard(self, call_id: int) -> None:
        """Forget a call whose result nobody will collect (Ray frees it with its ref)."""
        self._forget(call_id)

    def _forget(self, call_id: int) -> None:
        self._refs.pop(call_id, None)
        self._done.discard(call_id)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failure(self) -> ParlError | None:
        return self._failure

    def close(self) -> None:
        """End the actor as a local worker ends (see :meth:`parl.ray.host.ParlActor.stop`;
        killed if it has not ended ``stop_timeout`` seconds later). Idempotent."""
        if self._closed:
            return
        if self._failure is None:
            self._failure = self._closed_error()
        self._closed = True
        self._refs.clear()
        self._finalizer()

    def poll_death(self) -> ParlError | None:
        return self._failure

    def _unpickling_error(self, exc: Any, where: str) -> BaseException:
        """The exception that unpickling raised, as local workers raise it (a note says
        where), else a RemoteError with Ray's words."""
        error = exc.client_exc
        if not isinstance(error, BaseException):
            return RemoteError(f"a call on actor {self.label} failed in Ray: {exc}")
        error.add_note(f"raised {where} of a call on actor {self.label} (Ray)")
        return error

    def _note_shutdown(self) -> None:
        """Ray shut down in this process: the actor ended with it (and a call must not make
        Ray start a new one, as ``.remote()`` would)."""
        if self._failure is None and not ray.is_initialized():
            self._failure = ActorDiedError(
                f"actor {self.label} is gone: Ray was shut down in this process (ray.shutdown "
                "or parl.disconnect); create a new actor"
            )
            self._graceful[0] = False

    def _check_usable(self) -> None:
        self._note_shutdown()
        if self._pid != os.getpid():
            raise ActorForkedError(
                f"actor {self.label} belongs to process {self._pid}, and this process "
                f"(pid {os.getpid()}) is a fork of it: an actor can only be used by the "
                "process that created it; create the actors this process needs after the fork"
            )
        if self._failure is not None:
            raise self._failure

    def _died(self, exc: BaseException) -> ParlError:
        """The error of this and every later call once Ray reports the actor dead."""
        if self._failure is None:
            why = getattr(exc, "error_msg", None) or str(exc)
            detail = why.split("Worker exit detail:", 1)[-1].strip().split(". ", 1)[0]
            self._failure = ActorDiedError(
                f"actor {self.label} died (Ray: {detail}); the actor is gone, create a new one"
            )
            self._failure.__cause__ = exc
            self._graceful[0] = False
            self._finalizer()
        return self._failure


def _end(handle: Any, end: Callable[[Any, bool], None], graceful: list[bool], pid: int) -> None:
    """Hand the actor to the carrier to end (from ``close``, when the proxy is dropped, or
    once Ray reported it dead). Never in a forked child: the actor is its parent's."""
    if pid == os.getpid():
        end(handle, graceful[0])
