"""Evolution strategies (Salimans et al. 2017, "Evolution Strategies as a Scalable Alternative to
Reinforcement Learning", https://arxiv.org/abs/1703.03864), PARL's ``ES(model)`` with the
learner's update built in.

Workers evaluate mirrored pairs of perturbations ``theta + sigma * eps`` and
``theta - sigma * eps`` (antithetic sampling, section 2.1), each ``eps`` a slice of a shared
noise table named by its offset. The learner ranks all returns (centred ranks in [-0.5, 0.5],
so the update ignores the scale of the returns and outliers), estimates
``g = sum_i (rank+_i - rank-_i) eps_i / (2 N)``, adds weight decay and steps its optimizer.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from parl.algorithms.es_noise import SharedNoiseTable
from parl.algorithms.es_optimizers import ESOptimizer, make_optimizer
from parl.core.algorithm import Algorithm
from parl.utils.weight_sync import flat_parameters, load_flat_parameters, parameter_count
from parl.validation import check_float

__all__ = ["ES", "ESLearnResult", "compute_centered_ranks"]


def compute_centered_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of ``x`` (any shape) over all its elements, scaled to [-0.5, 0.5].

    ``[[10, -3], [7, 100]]`` -> ranks ``[[2, 0], [1, 3]]`` -> ``[[1/6, -1/2], [-1/6, 1/2]]``.
    Equal values share their mean rank: a mirrored pair with equal returns (every episode of a
    solved CartPole lasts 500 steps) then weighs 0, instead of the order of the array deciding
    that ``+eps`` lost, which moved the policy along random noise (Adam scales even that
    tiny gradient up to a full step).
    """
    x = np.asarray(x)
    flat = x.ravel()
    ranks = np.empty(x.size, np.float64)
    ranks[flat.argsort(kind="stable")] = np.arange(x.size, dtype=np.float64)
    _, group, counts = np.unique(flat, return_inverse=True, return_counts=True)
    group = group.reshape(-1)
    ranks = (np.bincount(group, weights=ranks) / counts)[group].astype(np.float32)
    if x.size > 1:
        ranks /= x.size - 1
    return (ranks - 0.5).reshape(x.shape)


class ESLearnResult(NamedTuple):
    update_ratio: float  # |step| / |theta|
    gradient_norm: float


class ES(Algorithm):
    """OpenAI-style ES on a ``parl.Model``'s parameters (flattened to one vector).

    Args:
        model: the policy; ``predict(obs)`` returns ``model(obs)``.
        noise_table: the :class:`SharedNoiseTable` (made with ``noise_size`` / ``noise_seed``
            when None).
        noise_stdev: sigma of the perturbations.
        stepsize: the optimizer's step size.
        l2_coeff: weight decay added to the (descent) gradient.
        optimizer: ``"adam"`` (OpenAI's and PARL's choice), ``"momentum"`` or ``"sgd"``.
    """

    model: Any

    def __init__(
        self,
        model: nn.Module,
        noise_table: SharedNoiseTable | None = None,
        *,
        noise_stdev: float = 0.02,
        stepsize: float = 0.01,
        l2_coeff: float = 0.005,
        optimizer: str = "adam",
        noise_size: int = 25_000_000,
        noise_seed: int = 1024,
        device: str | torch.device = "cpu",
    ) -> None:
        owner = "ES"
        self.noise_stdev = check_float("noise_stdev", noise_stdev, low=0.0, low_open=True,
                                       owner=owner)  # fmt: skip
        self.l2_coeff = check_float("l2_coeff", l2_coeff, low=0.0, owner=owner)
        super().__init__(model, device=device)
        self.weights_total_size = parameter_count(self.model)
        self.noise = noise_table or SharedNoiseTable(noise_size, noise_seed, shared=False)
        if self.noise.size < self.weights_total_size:
            raise ValueError(
                f"ES: the noise table ({self.noise.size}) is smaller than the model's "
                f"{self.weights_total_size} parameters; raise noise_size"
            )
        self.es_optimizer: ESOptimizer = make_optimizer(optimizer, self.weights_total_size,
                                                        stepsize)  # fmt: skip

    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy's output for a batch of observations: ``self.model(obs)``.

        Args:
            obs: Observations, ``(B, obs_dim)``.

        Returns:
            What the model returns, e.g. actions ``(B, act_dim)``.
        """
        return self.model(obs)

    def get_flat_weights(self) -> np.ndarray:
        """The model's parameters as one flat float32 vector, ``(weights_total_size,)``, in the order
        of ``model.parameters()`` (the vector the noise is added to).
        """
        return flat_parameters(self.model)

    def set_flat_weights(self, flat_weights: np.ndarray) -> None:
        """Load a flat parameter vector from :meth:`get_flat_weights` (or a perturbed copy of it).

        Args:
            flat_weights: ``(weights_total_size,)`` values, in the order of ``model.parameters()``.
        """
        load_flat_parameters(self.model, flat_weights)

    def perturbation(self, noise_index: int) -> np.ndarray:
        """``sigma * eps`` for the noise at ``noise_index`` (add or subtract it: mirrored)."""
        return self.noise_stdev * self.noise.get(int(noise_index), self.weights_total_size)

    def named_optimizers(self) -> dict[str, Any]:
        """The numpy ES optimizer too: ``Agent.save_checkpoint`` then keeps its moments and
        step count (it has ``state_dict``/``load_state_dict`` as torch optimizers do)."""
        return {**super().named_optimizers(), "es_optimizer": self.es_optimizer}

    def learn(self, noisy_rewards: np.ndarray, noise_indices: np.ndarray) -> ESLearnResult:
        """One ES update from ``noisy_rewards (N, 2)`` (return with ``+eps``, with ``-eps``)
        and the ``noise_indices (N,)`` of the ``eps`` used."""
        rewards = np.asarray(noisy_rewards, np.float64)
        indices = np.asarray(noise_indices, np.int64).reshape(-1)
        if (
            rewards.ndim != 2
            or rewards.shape[1] != 2
            or len(rewards) != len(indices)
            or len(rewards) == 0  # nothing to rank: 0 / 0 would make every weight NaN
        ):
            raise ValueError(
                f"ES.learn: noisy_rewards must be (N, 2) (mirrored pairs) and noise_indices "
                f"(N,) with N >= 1, got {rewards.shape} and {np.shape(noise_indices)}"
            )
        if not np.all(np.isfinite(rewards)):
            bad = np.argwhere(~np.isfinite(rewards))[0]
            raise ValueError(
                f"ES.learn: noisy_rewards[{bad[0]}, {bad[1]}] is {rewards[tuple(bad)]}; a NaN or "
                f"infinite return would rank as the best (or worst) and steer the update. Check "
                f"the environment's rewards (or clip them) before ES.learn"
            )
        ranks = compute_centered_ranks(rewards)
        weights = (ranks[:, 0] - ranks[:, 1]).astype(np.float32)
        dim = self.weights_total_size
        gradient = np.zeros(dim, np.float32)
        for start in range(0, len(indices), 500):  # batched: bounded memory, BLAS dot
            chunk = indices[start : start + 500]
            eps = np.stack([self.noise.get(int(i), dim) for i in chunk])
            gradient += weights[start : start + 500] @ eps
        gradient /= rewards.size
        theta = self.get_flat_weights()
        new_theta, ratio = self.es_optimizer.update(theta, -gradient + self.l2_coeff * theta)
        self.set_flat_weights(new_theta)
        return ESLearnResult(ratio, float(np.linalg.norm(gradient)))
