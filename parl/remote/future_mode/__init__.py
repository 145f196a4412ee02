"""PARL 2.x's ``parl.remote.future_mode`` import path: ``FutureObject`` is :class:`parl.Future`,
what a method of a ``@parl.remote_class(wait=False)`` actor returns. PARL's module
``parl.remote.future_mode.future_object`` is here too."""

from __future__ import annotations

from parl.remote.future_mode.future_object import FutureObject

__all__ = ["FutureObject"]
