"""PARL's import paths under ``parl.core.torch``: the same ``Model``, ``Algorithm`` and
``Agent`` as ``parl.core``, and the policy distributions (``policy_distribution``)."""

from __future__ import annotations

from parl.core.agent import Agent
from parl.core.algorithm import Algorithm
from parl.core.model import Model

__all__ = ["Agent", "Algorithm", "Model"]
