"""OAC (Ciosek et al. 2019, https://arxiv.org/abs/1910.12807): soft actor-critic whose
exploration moves the policy's Gaussian towards an optimistic upper bound of the twin critics."""

from __future__ import annotations

import math

import torch
from torch import nn

from parl.algorithms.sac import SAC
from parl.validation import check_float

__all__ = ["OAC", "optimistic_shift"]

_CENTRES = ("sample", "mean")


def optimistic_shift(
    grad: torch.Tensor, variance: torch.Tensor, delta: float, eps: float = 1e-5
) -> torch.Tensor:
    """The shift of the exploration mean, ``sqrt(2 delta) * Sigma g / sqrt(g^T Sigma g)``.

    This is equation (13) of the OAC paper for a diagonal ``Sigma``: the step of KL divergence
    ``delta`` from the policy's Gaussian that climbs the upper bound ``Q_UB`` fastest. The norm
    is taken per row, so that each observation of a batch moves by its own gradient.

    Args:
        grad: ``dQ_UB / da`` at the centre, before tanh, ``(B, act_dim)``.
        variance: the policy's variances ``sigma^2``, ``(B, act_dim)``.
        delta: the allowed KL divergence.
        eps: added to the norm, against a zero gradient (the OAC authors' ``10e-6``).

    Returns:
        The shift, ``(B, act_dim)``.
    """
    norm = (grad.square() * variance).sum(dim=-1, keepdim=True).sqrt() + eps
    return math.sqrt(2.0 * delta) * variance * grad / norm


class OAC(SAC):
    """Optimistic actor-critic: SAC's updates with an optimistic exploration policy.

    Learning is SAC's with a fixed temperature (as PARL's OAC): the critics regress on ``r +
    gamma (1 - done) (min Q_t(s', a') - alpha log pi(a' | s'))`` and the actor minimises
    ``alpha log pi(a | s) - min Q(s, a)``. Exploration (``get_optimistic_exploration_action``)
    takes the upper bound ``Q_UB = (q1 + q2) / 2 + beta |q1 - q2| / 2``, moves the Gaussian's
    centre by :func:`optimistic_shift` along its gradient and samples ``tanh`` of the moved
    Gaussian, whose spread is the policy's own.

    The model is SAC's: ``policy(obs) -> (mean, log_std)`` before tanh, ``value(obs, action)
    -> (q1, q2)``, ``get_actor_params()`` and ``get_critic_params()``. The arguments have
    PARL's names and order and the defaults of PARL's OAC example.

    Args:
        model: the actor-critic model.
        gamma: discount factor.
        tau: target update rate (``sync_target`` uses ``decay = 1 - tau``).
        alpha: entropy temperature; a float keeps it fixed (PARL), ``"auto"`` or
            ``"auto_<initial>"`` learn it as :class:`~parl.algorithms.SAC` does.
        beta: weight of the critics' disagreement ``|q1 - q2| / 2`` in the upper bound.
        delta: the KL divergence allowed between the policy and the exploration Gaussian.
        actor_lr: learning rate of the actor's Adam optimizer.
        critic_lr: learning rate of the critics' Adam optimizer.
        centre: where the shift starts. ``"sample"`` (PARL's): a point drawn from the policy's
            Gaussian, so that exploration adds the policy's noise twice; ``"mean"`` (the
            paper's and its authors' code): the Gaussian's mean.
        target_entropy: with a learned alpha, the entropy aimed at; ``None`` means ``-act_dim``.
        alpha_lr: learning rate of a learned alpha; ``None`` means ``actor_lr``.
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...
    """

    def __init__(
        self,
        model: nn.Module,
        gamma: float = 0.99,
        tau: float = 0.005,
        alpha: float | str = 0.2,
        beta: float = 4.66,
        delta: float = 23.53,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        *,
        centre: str = "sample",
        target_entropy: float | None = None,
        alpha_lr: float | None = None,
        device: str | torch.device = "auto",
    ) -> None:
        self.beta = check_float("beta", beta, low=0.0, owner="OAC")
        self.delta = check_float("delta", delta, low=0.0, owner="OAC")
        if centre not in _CENTRES:
            raise ValueError(
                f"OAC: centre must be 'sample' (PARL's) or 'mean' (the paper's), got {centre!r}"
            )
        self.centre = centre
        super().__init__(
            model,
            gamma,
            tau,
            alpha,
            actor_lr,
            critic_lr,
            target_entropy=target_entropy,
            alpha_lr=alpha_lr,
            device=device,
        )

    def get_optimistic_exploration_action(self, obs: torch.Tensor) -> torch.Tensor:
        """An exploratory action in ``(-1, 1)`` for each observation, ``(B, act_dim)``.

        Args:
            obs: observations, ``(B, obs_dim)``. PARL's agent passes one row; any batch works
                here, each row shifted by its own gradient.

        Returns:
            ``tanh(z)``, ``z ~ N(centre + shift, sigma^2)``, detached.
        """
        if obs.dim() < 2:
            raise ValueError(
                f"OAC.get_optimistic_exploration_action: obs must be a batch (B, obs_dim), got "
                f"shape {tuple(obs.shape)}; pass obs.reshape(1, -1) for one observation"
            )
        with torch.no_grad():
            mean, log_std = self.model.policy(obs)
            std = log_std.exp()
            # PARL draws the centre as a reparameterised sample: mean + std * eps
            centre = mean + std * torch.randn_like(mean) if self.centre == "sample" else mean
        centre = centre.detach().requires_grad_(True)
        with torch.enable_grad():
            q1, q2 = self.model.value(obs, torch.tanh(centre))
            upper = (q1 + q2) / 2.0 + self.beta * (q1 - q2).abs() / 2.0
            # rows are independent: the gradient of the sum is each row's own gradient
            (grad,) = torch.autograd.grad(upper.sum(), centre)
        with torch.no_grad():
            shifted = centre.detach() + optimistic_shift(grad, std.square(), self.delta)
            return torch.tanh(shifted + std * torch.randn_like(shifted))
