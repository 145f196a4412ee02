"""PARL on PyTorch: RL abstractions (Model / Algorithm / Agent) and parallel actors.

``import parl`` has no side effects: it starts no process or thread, reads no environment
variable, writes no file and does not import torch. The RL names (``Model``, ``Algorithm``,
``Agent``, ``algorithms``, ``utils``) are loaded on first access; the remote API
(``remote_class``, ``connect``) never needs torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from parl.errors import (
    ActorClosedError,
    ActorDiedError,
    ActorMemoryError,
    ParlError,
    RemoteError,
)
from parl.remote import Future, close_actor, connect, disconnect, remote_class

__version__ = "0.1.0"

# name -> (module, attribute or None for the module itself); resolved on first access.
_LAZY: dict[str, tuple[str, str | None]] = {
    "Model": ("parl.core.model", "Model"),
    "Algorithm": ("parl.core.algorithm", "Algorithm"),
    "Agent": ("parl.core.agent", "Agent"),
    "core": ("parl.core", None),
    "algorithms": ("parl.algorithms", None),
    "utils": ("parl.utils", None),
    "shm": ("parl.shm", None),
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from parl import algorithms, core, shm, utils
    from parl.core.agent import Agent
    from parl.core.algorithm import Algorithm
    from parl.core.model import Model


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'parl' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ActorClosedError",
    "ActorDiedError",
    "ActorMemoryError",
    "Agent",
    "Algorithm",
    "Future",
    "Model",
    "ParlError",
    "RemoteError",
    "algorithms",
    "close_actor",
    "core",
    "connect",
    "disconnect",
    "remote_class",
    "shm",
    "utils",
]
