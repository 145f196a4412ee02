"""Closed-form log-probabilities, entropies and samples of the two action distributions of the
on-policy algorithms: categorical (discrete actions, from logits) and diagonal Gaussian
(continuous actions, from a mean and a standard deviation).

Why not ``torch.distributions``: building a ``Categorical`` or an ``Independent(Normal)`` per
minibatch costs more than the maths it wraps (argument broadcasting, lazily cached
``probs``/``logits``, a ``logsumexp`` normalisation, shape bookkeeping); on the small batches of
PPO the update is dominated by that per-call overhead, not by arithmetic. These functions compute
the same quantities with a few tensor operations each. The samples draw from torch's generator
exactly as ``torch.distributions`` does (``multinomial`` on the probabilities, ``torch.normal``
on the expanded mean and std), so the same seed gives the same actions.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = [
    "categorical_log_prob_entropy",
    "categorical_sample",
    "check_finite_loss",
    "gaussian_mean_log_std",
    "logits_of",
    "gaussian_entropy",
    "gaussian_log_prob",
    "gaussian_sample",
]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_HALF_LOG_2PI_E = 0.5 + _HALF_LOG_2PI  # entropy of a unit Gaussian, per dimension


def categorical_log_prob_entropy(
    logits: torch.Tensor, action: torch.Tensor, entropy_grad: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log pi(action), entropy)``, both ``(B,)``, for ``logits (B, n)`` and integer
    ``action (B,)``; ``entropy_grad=False`` computes the entropy outside autograd (when it is
    only reported, its operations are then not recorded for a backward pass).

    Log-probabilities of actions whose logit is ``-inf`` (masked) are clamped to the most negative
    float before the ``p * log p`` product, as ``Categorical.entropy`` does, so a masked action
    adds 0 (not NaN) to the entropy.
    """
    logp = logits.log_softmax(-1)
    log_prob = logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = -(logp.exp() * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(-1)
    return log_prob, entropy


def categorical_sample(logits: torch.Tensor) -> torch.Tensor:
    """An int64 action ``(B,)`` drawn from ``softmax(logits (B, n))`` (one ``multinomial`` call,
    the draw ``Categorical(logits=...).sample()`` makes)."""
    return torch.multinomial(logits.softmax(-1), 1, True).squeeze(-1)


def gaussian_log_prob(
    mean: torch.Tensor,
    std: torch.Tensor,
    action: torch.Tensor,
    log_std: torch.Tensor | None = None,
) -> torch.Tensor:
    """``log N(action; mean, std^2)`` summed over the last (action) dimension: ``(B,)`` for
    ``mean, action (B, d)`` and ``std`` broadcastable to them (``log_std``: ``std.log()``, when
    the caller has it already)."""
    if log_std is None:
        log_std = std.log()
    z = (action - mean) / std
    return (-0.5 * z.square() - log_std).sum(-1) - _HALF_LOG_2PI * mean.shape[-1]


def gaussian_entropy(mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Entropy ``(B,)`` of the diagonal Gaussian: ``sum_d (1/2 + log(2 pi)/2 + log_std_d)``.

    It does not depend on the mean; a state-independent ``log_std (1, d)`` is summed once and
    broadcast over the batch instead of being expanded to ``(B, d)`` first.
    """
    if log_std.shape[-1:] != mean.shape[-1:]:  # e.g. (B, 1) shared by every dimension
        log_std = log_std.expand_as(mean)
    per_sample = log_std.sum(-1) + _HALF_LOG_2PI_E * mean.shape[-1]
    return per_sample.expand(mean.shape[:-1])


def gaussian_sample(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """An action ``(B, d)`` drawn from ``N(mean, std^2)`` (``Normal(mean, std).sample()``'s
    ``torch.normal`` call on the expanded arguments)."""
    return torch.normal(mean, std.expand_as(mean))


def check_finite_loss(
    owner: str, total_loss: torch.Tensor, pi_loss: torch.Tensor, vf_loss: torch.Tensor,
    entropy: torch.Tensor,
) -> None:  # fmt: skip
    """Raise ``FloatingPointError`` before a NaN or infinite loss reaches the optimizer: one such
    step turns every weight into NaN, and the actors that load them fail far from the cause."""
    if bool(torch.isfinite(total_loss)):
        return
    raise FloatingPointError(
        f"{owner}: the loss is {total_loss.item()} (pi_loss {pi_loss.item()}, vf_loss "
        f"{vf_loss.item()}, entropy {entropy.item()}); the model was not updated. Look for a "
        "standard deviation of 0 or inf (bound log_std), NaN/inf observations or rewards, or "
        "behaviour_logits of the wrong kind"
    )


def gaussian_mean_log_std(policy: Any, owner: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean (B, d), log_std (B, d))`` of a model's ``policy(obs) -> (mean, std)``, where
    ``std`` is a float or a tensor broadcastable to the mean; ``owner`` (``"IMPALA"``...) names
    the algorithm in the error a model returning something else gets."""
    if not (isinstance(policy, tuple | list) and len(policy) == 2):
        raise TypeError(
            f"{owner}(continuous_action=True): model.policy(obs) must return (mean, std), got "
            f"{type(policy).__name__}; return logits and leave continuous_action False for "
            "discrete actions"
        )
    mean, std = policy
    return mean, torch.as_tensor(std, device=mean.device).log().expand_as(mean)


def logits_of(policy: Any, owner: str) -> torch.Tensor:
    """A model's logits ``(B, act_dim)``; a ``(mean, std)`` pair means a Gaussian model used
    without ``continuous_action`` (torch would otherwise fail on the tuple obscurely)."""
    if not isinstance(policy, torch.Tensor):
        raise TypeError(
            f"{owner}: model.policy(obs) returned a {type(policy).__name__}, not logits; a "
            "Gaussian policy returning (mean, std) needs continuous_action=True"
        )
    return policy
