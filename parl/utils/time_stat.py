"""PARL's import path ``parl.utils.time_stat`` (the class lives in ``parl.utils.stats``)."""

from __future__ import annotations

from parl.utils.stats import TimeStat

__all__ = ["TimeStat"]
