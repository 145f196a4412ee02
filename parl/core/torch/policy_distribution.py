"""PARL's policy distributions: ``sample``, ``entropy``, ``logp`` and ``kl`` on batches.

``parl.core.torch.policy_distribution`` is where PARL 2.x code and its multi-agent algorithms
import them from. Each takes the model's raw output for a batch of ``B`` states:

* :class:`DiagGaussianDistribution` ``((mean, logstd))``, each ``(B, d)``: continuous actions.
* :class:`CategoricalDistribution` ``(logits (B, n))``: discrete actions ``(B,)``.
* :class:`SoftCategoricalDistribution` ``(logits (B, n))``: a Gumbel-softmax draw ``(B, n)``
  (Jang et al. 2017, temperature 1), differentiable, as MADDPG uses for discrete actions.
* :class:`SoftMultiCategoricalDistribution` ``(logits, low, high)``: one soft categorical per
  part of a ``MultiDiscrete`` space, laid side by side along the last axis.

Entropies, log-probabilities and KL divergences are ``(B,)``, summed over action dimensions.
Random draws use torch's generator on the logits' device (``torch.manual_seed`` fixes them).
A malformed input raises :class:`DistributionInputError`, a ``ValueError`` naming what was
wrong (PARL asserted the shapes; an ``assert`` vanishes under ``python -O``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "CategoricalDistribution",
    "DiagGaussianDistribution",
    "DistributionInputError",
    "PolicyDistribution",
    "SoftCategoricalDistribution",
    "SoftMultiCategoricalDistribution",
]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_HALF_LOG_2PIE = 0.5 * math.log(2.0 * math.pi * math.e)


class DistributionInputError(ValueError):
    """Logits or actions of the wrong kind or shape for a policy distribution."""


def _require_2d(name: str, value: Any, owner: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise DistributionInputError(
            f"{owner}: {name} must be a torch.Tensor, got {type(value).__name__}"
        )
    if value.dim() != 2:
        raise DistributionInputError(
            f"{owner}: {name} must be 2-D (batch, actions), got shape {tuple(value.shape)}"
        )
    return value


class PolicyDistribution:
    """The interface: ``sample()``, ``entropy()``, ``logp(actions)`` and ``kl(other)``."""

    def sample(self) -> torch.Tensor:
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError

    def kl(self, other: PolicyDistribution) -> torch.Tensor:
        raise NotImplementedError

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class DiagGaussianDistribution(PolicyDistribution):
    """``N(mean, diag(exp(logstd))^2)`` from ``logits = (mean, logstd)``, each ``(B, d)``."""

    def __init__(self, logits: Sequence[torch.Tensor]) -> None:
        owner = "DiagGaussianDistribution"
        if isinstance(logits, torch.Tensor) or not isinstance(logits, (tuple, list)):
            raise DistributionInputError(
                f"{owner}: logits must be a (mean, logstd) pair of (batch, actions) tensors, "
                f"got {type(logits).__name__}"
            )
        if len(logits) != 2:
            raise DistributionInputError(
                f"{owner}: logits must be a (mean, logstd) pair, got {len(logits)} items"
            )
        self.logits = logits
        self.mean = _require_2d("mean", logits[0], owner)
        self.logstd = _require_2d("logstd", logits[1], owner)
        self.std = torch.exp(self.logstd)

    def sample(self) -> torch.Tensor:
        """``mean + std * eps`` with ``eps ~ N(0, I)``, shape ``(B, d)``."""
        noise = torch.randn(self.mean.shape, dtype=self.mean.dtype).to(self.mean.device)
        return self.mean + self.std * noise

    def entropy(self) -> torch.Tensor:
        """``sum_j logstd_j + 1/2 log(2 pi e)``."""
        return torch.sum(self.logstd + _HALF_LOG_2PIE, dim=1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        """``log N(actions; mean, std^2)`` for actions ``(B, d)``."""
        _require_2d("actions", actions, "DiagGaussianDistribution.logp")
        squared = torch.sum(torch.square((actions - self.mean) / self.std), dim=1)
        return -0.5 * squared - _HALF_LOG_2PI * actions.shape[1] - torch.sum(self.logstd, dim=1)

    def kl(self, other: PolicyDistribution) -> torch.Tensor:
        """``KL(self || other)`` for another diagonal Gaussian of the same shape."""
        if not isinstance(other, DiagGaussianDistribution):
            raise DistributionInputError(
                f"DiagGaussianDistribution.kl needs another DiagGaussianDistribution, "
                f"got {type(other).__name__}"
            )
        ratio = (torch.square(self.std) + torch.square(self.mean - other.mean)) / (
            2.0 * torch.square(other.std)
        )
        return torch.sum(other.logstd - self.logstd + ratio - 0.5, dim=1)


class CategoricalDistribution(PolicyDistribution):
    """``softmax(logits)`` over ``n`` actions, from ``logits (B, n)``."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = _require_2d("logits", logits, type(self).__name__)

    def _shifted(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits - max, log Z)`` of the shifted logits: stable for large logits."""
        shifted = self.logits - self.logits.max(dim=1, keepdim=True).values
        return shifted, torch.logsumexp(shifted, dim=1, keepdim=True)

    def sample(self) -> torch.Tensor:
        """An int64 action ``(B,)`` in ``[0, n)``."""
        shifted, log_z = self._shifted()
        return torch.multinomial(torch.exp(shifted - log_z), 1).squeeze(1)

    def entropy(self) -> torch.Tensor:
        """``-sum_a p(a) log p(a)``."""
        shifted, log_z = self._shifted()
        log_prob = shifted - log_z
        return -torch.sum(torch.exp(log_prob) * log_prob, dim=1)

    def logp(self, actions: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        """``log(p(actions) + eps)`` for int64 actions ``(B,)``; ``eps`` (PARL's) keeps the log
        finite for an action of probability 0."""
        if (
            not isinstance(actions, torch.Tensor)
            or actions.dim() != 1
            or actions.dtype.is_floating_point
            or actions.dtype.is_complex
        ):
            what = (
                f"a {actions.dtype} tensor of shape {tuple(actions.shape)}"
                if isinstance(actions, torch.Tensor)
                else repr(actions)
            )
            raise DistributionInputError(
                f"{type(self).__name__}.logp: actions must be a 1-D integer tensor (batch,) of "
                f"action indices, got {what}"
            )
        shifted, log_z = self._shifted()
        prob = torch.exp(shifted - log_z)
        chosen = prob.gather(1, actions.long().unsqueeze(1)).squeeze(1)
        return torch.log(chosen + eps)

    def kl(self, other: PolicyDistribution) -> torch.Tensor:
        """``sum_a p(a) (log p(a) - log q(a))`` for another categorical of the same width."""
        if not isinstance(other, CategoricalDistribution):
            raise DistributionInputError(
                f"{type(self).__name__}.kl needs a CategoricalDistribution, "
                f"got {type(other).__name__}"
            )
        shifted, log_z = self._shifted()
        other_shifted, other_log_z = other._shifted()
        log_p = shifted - log_z
        return torch.sum(torch.exp(log_p) * (log_p - other_shifted + other_log_z), dim=1)


class SoftCategoricalDistribution(CategoricalDistribution):
    """A categorical whose ``sample`` is a Gumbel-softmax draw: ``softmax(logits + g)`` with
    ``g = -log(-log(U))``, ``U ~ Uniform(0, 1)``; differentiable in the logits, ``(B, n)``."""

    def sample(self) -> torch.Tensor:
        uniform = torch.rand_like(self.logits)
        return F.softmax(self.logits - torch.log(-torch.log(uniform)), dim=-1)


class SoftMultiCategoricalDistribution(PolicyDistribution):
    """One :class:`SoftCategoricalDistribution` per part of a ``MultiDiscrete`` space.

    ``logits (..., sum(high - low + 1))`` is split along its last axis into parts of
    ``high[i] - low[i] + 1`` logits; ``sample`` lays the parts' draws side by side, each shifted
    by ``low[i]`` as PARL does, and ``entropy`` and ``kl`` add the parts' values.
    """

    def __init__(
        self,
        logits: torch.Tensor,
        low: Sequence[int] | np.ndarray,
        high: Sequence[int] | np.ndarray,
    ) -> None:
        owner = "SoftMultiCategoricalDistribution"
        if not isinstance(logits, torch.Tensor):
            raise DistributionInputError(
                f"{owner}: logits must be a torch.Tensor, got {type(logits).__name__}"
            )
        low_array = np.asarray(low)
        high_array = np.asarray(high)
        if low_array.shape != high_array.shape or low_array.ndim != 1 or low_array.size == 0:
            raise DistributionInputError(
                f"{owner}: low and high must be 1-D of the same length (one bound per part), "
                f"got shapes {low_array.shape} and {high_array.shape}"
            )
        sizes = [int(n) for n in high_array - low_array + 1]
        if min(sizes) < 1 or sum(sizes) != logits.shape[-1]:
            raise DistributionInputError(
                f"{owner}: the parts have {sizes} actions (high - low + 1), which needs "
                f"{sum(sizes)} logits on the last axis; got shape {tuple(logits.shape)}"
            )
        self.logits = logits
        self.low = low_array
        self.high = high_array
        parts = torch.split(logits, sizes, dim=logits.dim() - 1)
        self.categoricals = [SoftCategoricalDistribution(part) for part in parts]

    def sample(self) -> torch.Tensor:
        draws = [low + part.sample() for low, part in zip(self.low, self.categoricals, strict=True)]
        return torch.cat(draws, dim=-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([part.entropy() for part in self.categoricals]).sum(dim=0)

    def kl(self, other: PolicyDistribution) -> torch.Tensor:
        if not isinstance(other, SoftMultiCategoricalDistribution) or len(
            other.categoricals
        ) != len(self.categoricals):
            raise DistributionInputError(
                "SoftMultiCategoricalDistribution.kl needs another one with the same parts"
            )
        terms = [p.kl(q) for p, q in zip(self.categoricals, other.categoricals, strict=True)]
        return torch.stack(terms).sum(dim=0)
