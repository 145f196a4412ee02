"""The cluster's control messages: one ``TypedDict`` per op, and the one check of them.

Every control message is a JSON object whose ``op`` names its kind. The classes below say which
fields each op carries; :func:`check` holds a received message to its op's required fields
(present, of the right JSON type) and raises :class:`MessageError` naming the op and the field
otherwise. :func:`parl.cluster.control.recv` runs it on every message, so the master, the host
agents and the carrier read fields that are there. Optional fields (``NotRequired``) are checked
by their receivers, which answer a bad one with an error of their own (e.g. a ``place`` whose
``timeout`` is not a number of seconds). An op not listed here passes unchecked: a newer peer's
message is ignored by its receiver, as before.
"""

from __future__ import annotations

import types
from typing import (
    Any,
    Literal,
    NotRequired,
    TypedDict,
    TypeGuard,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

# -- a host agent and the master ----------------------------------------------------------------


class Register(TypedDict):
    """A host agent's first message to the master: where callers reach it, what it offers, and
    what its actors use already (an agent registering again with a restarted master)."""

    op: Literal["register"]
    host: str
    port: int
    slots: int
    gpus: NotRequired[int]
    hostname: NotRequired[str]
    versions: NotRequired[dict[str, Any]]
    label: NotRequired[str]
    used: NotRequired[int]
    gpu_used: NotRequired[int]


class Registered(TypedDict):
    """The master's answer to ``register``: the host's id."""

    op: Literal["registered"]
    id: int


class Used(TypedDict):
    """A host agent's report of its used slots (``token``: the grant an actor just took)."""

    op: Literal["used"]
    used: NotRequired[int]
    gpu_used: NotRequired[int]
    token: NotRequired[str | None]


class Stats(TypedDict):
    """A host agent's figures for the monitor page (see :mod:`parl.cluster.monitor`): the
    machine's CPU use, load, CPU count and memory in bytes, and each worker's."""

    op: Literal["stats"]
    cpu_percent: NotRequired[float]
    load: NotRequired[list[float]]
    cpus: NotRequired[int]
    memory_used: NotRequired[int]
    memory_total: NotRequired[int]
    workers: NotRequired[list[Any]]


# -- a caller and the master --------------------------------------------------------------------


class Client(TypedDict):
    """A caller's first message to the master."""

    op: Literal["client"]


class Welcome(TypedDict):
    """The master's (``hosts``, ``monitor``) or a host agent's (``host``, ``slots``,
    ``versions``, ``has_code``) answer to a caller's first message."""

    op: Literal["welcome"]
    hosts: NotRequired[list[Any]]
    monitor: NotRequired[bool]
    host: NotRequired[str]
    slots: NotRequired[int]
    versions: NotRequired[dict[str, Any]]
    has_code: NotRequired[bool]


class Place(TypedDict):
    """A caller asks for a slot (``n_gpu`` 0) or GPUs, waiting up to ``timeout`` seconds."""

    op: Literal["place"]
    timeout: NotRequired[float]
    n_gpu: NotRequired[int]


class Waiting(TypedDict):
    """The master's note that no slot is free yet (one before ``placed`` or ``error``)."""

    op: Literal["waiting"]
    slots: NotRequired[int]
    used: NotRequired[int]


class Placed(TypedDict):
    """The master's grant: the host agent to start the actor on, and the grant's token."""

    op: Literal["placed"]
    host: str
    port: int
    token: str
    hostname: NotRequired[str]
    label: NotRequired[str]


class Release(TypedDict):
    """A caller gives back a grant no actor took."""

    op: Literal["release"]
    token: NotRequired[str]


class Extend(TypedDict):
    """A caller keeps a grant it still uses (an upload under way)."""

    op: Literal["extend"]
    token: NotRequired[str]


class Status(TypedDict):
    """``xparl status``'s request (``full``: the monitor's data too), and the answer: the
    hosts, how many callers are connected, and with ``full`` the monitor page's data."""

    op: Literal["status"]
    full: NotRequired[bool]
    hosts: NotRequired[list[Any]]
    clients: NotRequired[int]
    monitor: NotRequired[dict[str, Any]]


class Host(TypedDict):
    """A request for a host agent's own status (its actors); answered with ``status``."""

    op: Literal["host"]


class Actors(TypedDict):
    """A caller's report of its actors to a monitoring master (``client``: its id;
    ``hostname`` and ``pid``: where the caller runs)."""

    op: Literal["actors"]
    client: NotRequired[str]
    hostname: NotRequired[str]
    pid: NotRequired[int]
    actors: NotRequired[list[Any]]


class Error(TypedDict):
    """A refusal or failure, in words for the user."""

    op: Literal["error"]
    message: NotRequired[str]
    reason: NotRequired[str]


# -- a caller and a host agent ------------------------------------------------------------------


class Caller(TypedDict):
    """A caller's control connection to a host agent (``code``: the archive it will use)."""

    op: Literal["caller"]
    client: NotRequired[str]
    forward: NotRequired[bool]
    code: NotRequired[str | None]


class Actor(TypedDict):
    """A caller's request to start an actor on the connection it arrives on."""

    op: Literal["actor"]
    client: NotRequired[str]
    token: NotRequired[str]
    label: NotRequired[str]
    code: NotRequired[str | None]
    max_frame: NotRequired[int]
    options: NotRequired[dict[str, Any]]


class Started(TypedDict):
    """A host agent's answer to ``actor``: the worker's pid."""

    op: Literal["started"]
    pid: int
    host: NotRequired[str]


class Output(TypedDict):
    """Lines an actor printed, from its host agent to its caller."""

    op: Literal["output"]
    stream: NotRequired[str]
    text: NotRequired[str]


class Exited(TypedDict):
    """An actor's worker ended (``code``: its exit status)."""

    op: Literal["exited"]
    pid: int
    code: NotRequired[int | None]


class Stop(TypedDict):
    """A caller closes one of its actors."""

    op: Literal["stop"]
    pid: int


# -- uploads of code (see parl.cluster.upload) --------------------------------------------------


class Code(TypedDict):
    """An upload's first message: the archive's digest and size."""

    op: Literal["code"]
    digest: NotRequired[str]
    size: NotRequired[int]


class Send(TypedDict):
    """The host agent lacks the archive: send it."""

    op: Literal["send"]


class Stored(TypedDict):
    """The host agent holds the archive now."""

    op: Literal["stored"]
    digest: NotRequired[str]


MESSAGES: tuple[type, ...] = (
    Register, Registered, Used, Stats, Client, Welcome, Place, Waiting, Placed, Release,
    Extend, Status, Host, Actors, Error, Caller, Actor, Started, Output, Exited, Stop, Code,
    Send, Stored,
)  # fmt: skip


ControlMessage = (
    Register | Registered | Used | Stats | Client | Welcome | Place | Waiting | Placed
    | Release | Extend | Status | Host | Actors | Error | Caller | Actor | Started | Output
    | Exited | Stop | Code | Send | Stored
)  # fmt: skip


class MessageError(ConnectionError):
    """A control message that lacks a field its op requires, or has one of the wrong type:
    the peer is out of step (a ConnectionError, as a frame that is not JSON)."""


def check(message: object) -> TypeGuard[ControlMessage]:
    """Whether ``message`` (a decoded JSON value) is a control message: False when it is not
    an object with a string ``op``; :class:`MessageError`, naming the op and the field, when
    it lacks a field its op requires or has one of the wrong type. A message whose op is not
    listed here passes as it is (its receiver ignores it)."""
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        return False
    op = message["op"]
    required = _required().get(op)
    if required is None:
        return True  # an op of a newer peer: its receiver ignores it
    for name, kinds in required:
        if name not in message:
            raise MessageError(f"control message {op!r} lacks its field {name!r}")
        value = message[name]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            expected = " or ".join(_JSON_NAMES.get(k, k.__name__) for k in kinds)
            raise MessageError(
                f"control message {op!r}: field {name!r} must be {expected}, got {value!r}"
            )
    return True


def op_of(kind: type) -> str:
    """The op of a message class above (``Register`` -> ``"register"``)."""
    (op,) = get_args(get_type_hints(kind)["op"])
    return str(op)


_JSON_NAMES = {int: "an int", float: "a number", str: "a string", bool: "true or false",
               dict: "an object", list: "a list", type(None): "null"}  # fmt: skip
_checks: dict[str, tuple[tuple[str, tuple[type, ...]], ...]] | None = None


def _required() -> dict[str, tuple[tuple[str, tuple[type, ...]], ...]]:
    """Each op's required fields and their types, read once from the TypedDicts above (from
    the annotations themselves: under ``from __future__ import annotations`` Python 3.11's
    ``__required_keys__`` counts ``NotRequired`` fields as required)."""
    global _checks
    if _checks is None:
        checks = {}
        for cls in MESSAGES:
            hints = get_type_hints(cls, include_extras=True)
            checks[op_of(cls)] = tuple(
                (name, _kinds(hint))
                for name, hint in hints.items()
                if name != "op" and get_origin(hint) is not NotRequired
            )
        _checks = checks
    return _checks


def _kinds(annotation: Any) -> tuple[type, ...]:
    """The Python types a JSON value of ``annotation`` may arrive as."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return tuple(k for arg in get_args(annotation) for k in _kinds(arg))
    if annotation is float:
        return (int, float)  # JSON writes 60.0 as 60 too
    if annotation is type(None):
        return (type(None),)
    return (origin or annotation,)
