"""V-trace off-policy targets (Espeholt et al. 2018, "IMPALA", https://arxiv.org/abs/1802.01561,
section 4.1), as pure torch functions.

All tensors are time-major: ``(T, B)`` where ``T`` is the trajectory length and ``B`` the number
of trajectories. The recursion of Remark 1 of the paper,
``v_s - V(x_s) = delta_s V + gamma_s c_s (v_{s+1} - V(x_{s+1}))``, runs backwards in one loop over
time, each step vectorised over the batch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["VTraceReturns", "from_importance_weights", "from_log_probs"]


class VTraceReturns(NamedTuple):
    """``vs``: value targets ``(T, B)``; ``pg_advantages``: policy-gradient advantages ``(T, B)``."""

    vs: torch.Tensor
    pg_advantages: torch.Tensor


def _check_shapes(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
) -> None:
    shape = log_rhos.shape
    if log_rhos.dim() < 1:
        raise ValueError(f"V-trace: log_rhos must be time-major (T, B, ...), got shape {shape}")
    for name, tensor in (("discounts", discounts), ("rewards", rewards), ("values", values)):
        if tensor.shape != shape:
            raise ValueError(
                f"V-trace: {name} has shape {tuple(tensor.shape)}, but log_rhos has "
                f"{tuple(shape)}; all of them are (T, B) time-major"
            )
    if bootstrap_value.shape != shape[1:]:
        raise ValueError(
            f"V-trace: bootstrap_value must be V(x_T), shape {tuple(shape[1:])}, "
            f"got {tuple(bootstrap_value.shape)}"
        )


@torch.no_grad()
def from_importance_weights(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
) -> VTraceReturns:
    r"""V-trace targets from log importance weights ``log(pi(a_t|x_t) / mu(a_t|x_t))``.

    Args:
        log_rhos: ``(T, B)`` log ratios of the target to the behaviour policy's probability of
            the action taken.
        discounts: ``(T, B)`` discount at each step: ``gamma``, or 0 where the episode ended.
        rewards: ``(T, B)``.
        values: ``(T, B)`` ``V(x_t)`` under the current (target) value function.
        bootstrap_value: ``(B,)`` ``V(x_T)``, the value after the last step.
        clip_rho_threshold: :math:`\bar\rho` (None: no clipping).
        clip_pg_rho_threshold: the clip on :math:`\rho_s` in the policy-gradient advantage
            :math:`\rho_s (r_s + \gamma v_{s+1} - V(x_s))` (None: no clipping).

    Returns ``VTraceReturns(vs, pg_advantages)``, both ``(T, B)`` and without gradient (targets).
    The traces ``c_s`` are ``min(1, rho_s)`` as in the paper.
    """
    _check_shapes(log_rhos, discounts, rewards, values, bootstrap_value)
    rhos = torch.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
    cs = rhos.clamp(max=1.0)
    values_t_plus_1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)  # delta_s V

    decay = discounts * cs
    vs_minus_v = torch.empty_like(deltas)
    acc = torch.zeros_like(bootstrap_value)
    for t in range(deltas.shape[0] - 1, -1, -1):
        acc = deltas[t] + decay[t] * acc
        vs_minus_v[t] = acc
    vs = vs_minus_v + values

    vs_t_plus_1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    pg_rhos = rhos if clip_pg_rho_threshold is None else rhos.clamp(max=clip_pg_rho_threshold)
    pg_advantages = pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def from_log_probs(
    behaviour_actions_log_probs: torch.Tensor,
    target_actions_log_probs: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
) -> VTraceReturns:
    """PARL's form of :func:`from_importance_weights`: the two policies' log-probabilities of
    the actions taken, ``(T, B)`` each, instead of their difference."""
    log_rhos = target_actions_log_probs.detach() - behaviour_actions_log_probs.detach()
    return from_importance_weights(
        log_rhos,
        discounts,
        rewards,
        values.detach(),
        bootstrap_value.detach(),
        clip_rho_threshold,
        clip_pg_rho_threshold,
    )
