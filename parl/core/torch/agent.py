"""PARL's import path ``parl.core.torch.agent``: the same ``Agent`` as ``parl.Agent``."""

from __future__ import annotations

from parl.core.agent import Agent

__all__ = ["Agent"]
