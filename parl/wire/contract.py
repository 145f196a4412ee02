"""What every carrier offers the user face: the ``Carrier`` and ``ActorConnection`` protocols.

``parl.remote`` (proxies, futures, ``parl.wait``) talks to actors through these two protocols
only; the local workers (``parl.shm``), a cluster (``parl.cluster``), SSH hosts (``parl.ssh``)
and Ray (``parl.ray``) implement them. The module sits below the carriers, so that each of them
imports it without importing ``parl.remote`` (which chooses among them).

It also holds what crosses the line in both directions: :class:`RemoteOptions`, an actor's
options as the decorator checked them, which a carrier reads when it creates the actor, and
:class:`CallTimeout`, which ``wait`` raises on every carrier. :class:`CallBook` is the part of
a connection that does not depend on how requests travel (call numbering, the wait that forgets
an abandoned call), shared by every connection.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from parl.errors import ActorClosedError, ParlError
from parl.validation import check_bool, check_float, check_int


class CallTimeout(ParlError, TimeoutError):
    """No reply arrived within the given timeout."""


@dataclass(frozen=True)
class RemoteOptions:
    """An actor's options, as ``@parl.remote_class(...)`` took them (checked once, there)."""

    wait: bool = True
    max_memory: float | None = None  # MB
    num_threads: int | None = None  # None: 1, or the caller's OMP_NUM_THREADS when set
    n_gpu: int = 0  # GPUs of a cluster host (ignored by local workers)
    num_cpus: float | None = None  # Ray's CPUs for the actor (None: 1); others ignore it
    num_gpus: float | None = None  # Ray's GPUs for the actor (None: n_gpu); others ignore it

    def __post_init__(self) -> None:
        wait = check_bool("wait", self.wait)
        n_gpu = check_int(
            "n_gpu", self.n_gpu, low=0, hint="the GPUs the actor takes on a cluster host"
        )
        num_cpus, num_gpus = (
            _check_resource(name, getattr(self, name)) for name in ("num_cpus", "num_gpus")
        )
        if num_gpus is not None and n_gpu and num_gpus != n_gpu:
            raise ValueError(
                f"n_gpu={self.n_gpu} and num_gpus={self.num_gpus} disagree: give one (n_gpu "
                "places the actor on a cluster, num_gpus on Ray, where n_gpu counts too)"
            )
        # the checked values replace the given ones: a numpy int would reach the cluster's JSON
        # messages (n_gpu, num_threads, max_memory) unconverted, a numpy bool fail `wait is False`
        checked = {
            "wait": wait,
            "n_gpu": n_gpu,
            "num_cpus": num_cpus,
            "num_gpus": num_gpus,
            "num_threads": check_num_threads(self.num_threads),
            "max_memory": check_max_memory(self.max_memory),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)  # (frozen: the dataclass's own way round)


def _check_resource(name: str, value: object) -> float | None:
    if value is None:
        return None
    return check_float(
        name, value, low=0, what="a finite number >= 0",
        hint=f"Ray's resource for the actor, e.g. {name}=0.5",
    )  # fmt: skip


def check_max_frame(max_frame: object) -> int:
    """The largest message on an actor's connection, in bytes (at least 64 KiB)."""
    return check_int("max_frame", max_frame, low=1 << 16, what="an int of at least 65536 (bytes)")


def check_stop_timeout(stop_timeout: object) -> float:
    """Seconds a closed actor's worker may take to finish before it is killed."""
    return check_float(
        "stop_timeout", stop_timeout, low=0, what="a finite number of seconds >= 0",
        hint="e.g. stop_timeout=5",
    )  # fmt: skip


def check_num_threads(threads: object) -> int | None:
    if threads is None:
        return None
    return check_int(
        "num_threads", threads, low=1, what="a positive int (threads per worker)",
        hint="e.g. num_threads=4; leave it out for the default of one thread per worker",
    )  # fmt: skip


def check_max_memory(memory: object) -> float | None:
    if memory is None:
        return None
    megabytes = check_float(
        "max_memory", memory, low=0, low_open=True,
        what="a positive number of megabytes", hint="e.g. max_memory=1024",
    )  # fmt: skip
    # a whole number stays an int (numpy's too): messages say "max_memory of 100 MB"
    return int(memory) if isinstance(memory, numbers.Integral) else megabytes


class ActorConnection(Protocol):
    """The caller's end of one actor: numbered requests and their replies.

    ``label`` names the actor in errors (``Sampler pid=123``); ``hidden`` holds the methods of
    the actor's class that attributes of its instance hide (see :mod:`parl.wire.hiding`).
    """

    label: str
    hidden: frozenset[str]

    def submit(self, kind: int, payload: Any) -> int:
        """Send a request (a :mod:`parl.wire.protocol` kind); returns its call id."""

    def call(self, kind: int, payload: Any, timeout: float | None = None) -> Any:
        """Send a request and wait for its result."""

    def wait(self, call_id: int, timeout: float | None = None, keep: bool = False) -> Any:
        """The result of ``call_id`` (re-raises the remote exception); CallTimeout on timeout.
        An interrupted wait forgets the call unless ``keep`` (a future may wait again)."""

    def ready(self, call_id: int) -> bool:
        """True when the reply for ``call_id`` (or the connection's failure) is in."""

    def discard(self, call_id: int) -> None:
        """Forget a call whose result nobody will collect."""

    def outstanding(self) -> int:
        """How many calls were submitted and not collected (nor dropped) yet."""

    def pending_calls(self) -> list[int]:
        """The call ids sent whose reply has not arrived yet (for monitors)."""

    @property
    def submitted(self) -> int:
        """How many requests were sent on this connection, the actor's creation included."""

    @property
    def wait_fds(self) -> list[int]:
        """Descriptors that become readable when a reply arrives or the actor dies; empty when
        none tells (then :meth:`wait_any` blocks instead) or once the connection failed."""

    def wait_any(self, calls: Sequence[tuple[ActorConnection, int]], timeout: float) -> None:
        """Block until one of ``calls`` (connection, call id; connections without
        ``wait_fds``, this one among them) may be answered, or ``timeout`` seconds pass."""

    @property
    def closed(self) -> bool: ...

    @property
    def failure(self) -> ParlError | None:
        """The error every call raises from now on (None while the connection works)."""

    def close(self) -> None:
        """Close the connection (the actor ends). Idempotent."""

    def poll_death(self) -> ParlError | None:
        """For monitors: the connection's failure, after checking whether the actor died."""


class Carrier(Protocol):
    """What every carrier offers: actors' connections, and an end."""

    def create(self, class_name: str, options: RemoteOptions) -> ActorConnection:
        """Start a worker for an actor of ``class_name``; its connection (no INIT sent)."""

    def close(self) -> None: ...

    @property
    def live_actors(self) -> int: ...

    @property
    def server_pid(self) -> int | None:
        """A local process the carrier runs for its actors (None: none now)."""


class CallBook:
    """What every connection does alike, whatever carries its requests: number the calls,
    turn an interrupted wait into a forgotten call, name the actor in its errors.

    A subclass supplies ``submit``, ``_wait`` (the result of one call, or its exception),
    ``discard`` and ``_is_pending`` (submitted, reply not collected); one whose replies no
    descriptor announces also ``wait_any``."""

    label: str

    def __init__(self, label: str) -> None:
        self.label = label
        self._last_id = 0

    @property
    def submitted(self) -> int:
        return self._last_id

    def call(self, kind: int, payload: Any, timeout: float | None = None) -> Any:
        return self.wait(self.submit(kind, payload), timeout)

    def submit(self, kind: int, payload: Any) -> int:
        raise NotImplementedError

    def wait(self, call_id: int, timeout: float | None = None, keep: bool = False) -> Any:
        """The result of ``call_id``; re-raises the remote exception. CallTimeout on timeout
        (the call stays pending: the caller may wait again).

        When the wait itself is interrupted (Ctrl-C), the call is forgotten unless ``keep``
        (a future, whose owner may wait again)."""
        try:
            return self._wait(call_id, timeout)
        except CallTimeout:
            raise
        except BaseException as exc:
            if not keep and (not isinstance(exc, ParlError) or self._is_pending(call_id)):
                self.discard(call_id)  # nobody will collect this reply
            raise

    def _wait(self, call_id: int, timeout: float | None) -> Any:
        raise NotImplementedError

    def _is_pending(self, call_id: int) -> bool:
        raise NotImplementedError

    def discard(self, call_id: int) -> None:
        raise NotImplementedError

    def wait_any(self, calls: Sequence[tuple[ActorConnection, int]], timeout: float) -> None:
        """Nothing to block on: a connection that has ``wait_fds`` is polled by ``parl.wait``
        itself, and one that lost them has failed (its calls are answered)."""

    def _timed_out(self, timeout: float | None) -> CallTimeout:
        return CallTimeout(f"no reply from {self.label} within {timeout} s")

    def _collected(self, call_id: int) -> ValueError:
        return ValueError(f"call {call_id} on {self.label} was already collected")

    def _closed_error(self) -> ActorClosedError:
        return ActorClosedError(f"actor {self.label} was closed")
