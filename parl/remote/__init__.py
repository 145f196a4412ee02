"""The user face of the runtime: ``remote_class``, futures and ``connect``."""

from __future__ import annotations

from parl.remote.context import connect, disconnect
from parl.remote.decorator import remote_class
from parl.remote.future import Future
from parl.remote.proxy import close_actor

__all__ = ["Future", "close_actor", "connect", "disconnect", "remote_class"]
