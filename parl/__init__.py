"""PARL on PyTorch: RL abstractions (Model / Algorithm / Agent) and parallel actors.

``import parl`` has no side effects: it starts no process or thread, reads no environment
variable, writes no file and does not import torch. The RL names (``Model``, ``Algorithm``,
``Agent``, ``algorithms``, ``utils``) are loaded on first access; the remote API
(``remote_class``, ``connect``) never needs torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parl._lazy import lazy_attributes
from parl._version import __version__ as __version__
from parl.errors import (
    ActorClosedError,
    ActorDiedError,
    ActorForkedError,
    ActorMemoryError,
    AuthenticationError,
    ClusterError,
    DeploymentError,
    DeserializationError,
    ParlError,
    RemoteError,
    ResourceError,
    SerializationError,
    SharedHandleError,
    VersionMismatchError,
    WeightsMismatchError,
)

# name -> (module, attribute or None for the module itself); resolved on first access.
_LAZY: dict[str, tuple[str, str | None]] = {
    "remote_class": ("parl.remote.decorator", "remote_class"),
    "connect": ("parl.remote.context", "connect"),
    "disconnect": ("parl.remote.context", "disconnect"),
    "close_actor": ("parl.remote.proxy", "close_actor"),
    "Future": ("parl.remote.future", "Future"),
    "wait": ("parl.remote.waiting", "wait"),
    "get": ("parl.remote.waiting", "get"),
    "GetTimeoutError": ("parl.remote.waiting", "GetTimeoutError"),
    "remote": ("parl.remote", None),
    "Model": ("parl.core.model", "Model"),
    "Algorithm": ("parl.core.algorithm", "Algorithm"),
    "Agent": ("parl.core.agent", "Agent"),
    "core": ("parl.core", None),
    "algorithms": ("parl.algorithms", None),
    "utils": ("parl.utils", None),
    "env": ("parl.env", None),
    "shm": ("parl.shm", None),
    "monitor": ("parl.monitoring", "monitor"),
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from parl import algorithms, core, env, shm, utils
    from parl.core.agent import Agent
    from parl.core.algorithm import Algorithm
    from parl.core.model import Model
    from parl.monitoring import monitor
    from parl.remote.context import connect, disconnect
    from parl.remote.decorator import remote_class
    from parl.remote.future import Future
    from parl.remote.proxy import close_actor
    from parl.remote.waiting import GetTimeoutError, get, wait


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "ActorClosedError",
    "ActorDiedError",
    "ActorForkedError",
    "ActorMemoryError",
    "Agent",
    "AuthenticationError",
    "ClusterError",
    "DeploymentError",
    "DeserializationError",
    "Algorithm",
    "Future",
    "GetTimeoutError",
    "Model",
    "ParlError",
    "RemoteError",
    "ResourceError",
    "SerializationError",
    "SharedHandleError",
    "VersionMismatchError",
    "WeightsMismatchError",
    "algorithms",
    "close_actor",
    "core",
    "connect",
    "disconnect",
    "env",
    "get",
    "monitor",
    "remote_class",
    "shm",
    "utils",
    "wait",
]
