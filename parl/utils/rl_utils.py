"""PARL's import path ``parl.utils.rl_utils``: returns and advantages (see ``parl.utils.returns``).

``calc_gae(rewards, values, next_value, gamma, lam)`` and ``calc_discount_sum_rewards(rewards,
gamma)`` take PARL's arguments in PARL's order.
"""

from __future__ import annotations

from parl.utils.returns import calc_discount_sum_rewards, calc_gae

__all__ = ["calc_discount_sum_rewards", "calc_gae"]
