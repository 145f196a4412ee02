"""PARL's import path ``parl.env.compat_wrappers`` (the code lives in ``compat_wrapper``)."""

from __future__ import annotations

from parl.env.compat_wrapper import (
    V_GYM_CHANGED,
    V_NPRANDOM_CHANGED,
    CompatWrapper,
    is_gym_version_ge,
)

__all__ = ["CompatWrapper", "V_GYM_CHANGED", "V_NPRANDOM_CHANGED", "is_gym_version_ge"]
