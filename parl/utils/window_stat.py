"""PARL's import path ``parl.utils.window_stat`` (the class lives in ``parl.utils.stats``)."""

from __future__ import annotations

from parl.utils.stats import WindowStat

__all__ = ["WindowStat"]
