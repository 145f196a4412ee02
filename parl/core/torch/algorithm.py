"""PARL's import path ``parl.core.torch.algorithm``: the same ``Algorithm`` as ``parl.Algorithm``."""

from __future__ import annotations

from parl.core.algorithm import Algorithm

__all__ = ["Algorithm"]
