"""The user face of the runtime: ``remote_class``, futures and ``connect``."""

from __future__ import annotations

from parl.remote.context import actors_share_memory, connect, disconnect
from parl.remote.decorator import remote_class
from parl.remote.exceptions import (  # PARL's names, as its parl.remote exported them
    FutureFunctionError,
    FutureGetRepeatedlyError,
    FutureObjectEmpty,
    RemoteAttributeError,
    RemoteDeserializeError,
    RemoteError,
    RemoteSerializeError,
    ResourceError,
)
from parl.remote.future import Future
from parl.remote.proxy import close_actor
from parl.remote.waiting import GetTimeoutError, get, wait

__all__ = [
    "Future",
    "FutureFunctionError",
    "FutureGetRepeatedlyError",
    "FutureObjectEmpty",
    "RemoteAttributeError",
    "RemoteDeserializeError",
    "RemoteError",
    "RemoteSerializeError",
    "ResourceError",
    "GetTimeoutError",
    "actors_share_memory",
    "close_actor",
    "connect",
    "disconnect",
    "get",
    "remote_class",
    "wait",
]
