"""PARL's import path ``parl.core.torch.model``: the same ``Model`` as ``parl.Model``."""

from __future__ import annotations

from parl.core.model import Model

__all__ = ["Model"]
