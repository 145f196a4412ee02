"""PARL 2.x's ``parl.remote.future_mode.future_object`` import path of ``FutureObject``."""

from __future__ import annotations

from parl.remote.future import Future

FutureObject = Future

__all__ = ["FutureObject"]
