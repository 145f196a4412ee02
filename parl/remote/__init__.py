"""The user face of the runtime: ``remote_class``, futures and ``connect``."""

from __future__ import annotations

from parl.remote.context import connect, disconnect
from parl.remote.decorator import remote_class
from parl.remote.future import Future
from parl.remote.proxy import close_actor
from parl.remote.waiting import GetTimeoutError, get, wait

__all__ = [
    "Future",
    "GetTimeoutError",
    "close_actor",
    "connect",
    "disconnect",
    "get",
    "remote_class",
    "wait",
]
