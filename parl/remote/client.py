"""PARL 2.x's ``parl.remote.client`` import path of ``connect`` and ``disconnect``
(``from parl.remote.client import disconnect``); both are :mod:`parl.remote.context`'s."""

from __future__ import annotations

from parl.remote.context import connect, disconnect

__all__ = ["connect", "disconnect"]
