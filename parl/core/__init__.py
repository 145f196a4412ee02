"""PARL's three abstractions on PyTorch: ``Model`` (the network), ``Algorithm`` (losses and
optimizers) and ``Agent`` (numpy in and out, checkpoints). Imports only torch, numpy and the
standard library."""

from __future__ import annotations

from parl.core.agent import Agent
from parl.core.algorithm import Algorithm, require_model_methods, resolve_device
from parl.core.checkpoint import TrainingState
from parl.core.model import Model

__all__ = [
    "Agent",
    "Algorithm",
    "Model",
    "TrainingState",
    "require_model_methods",
    "resolve_device",
]
