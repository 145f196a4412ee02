"""IMPALA (Espeholt et al. 2018, https://arxiv.org/abs/1802.01561) with V-trace targets,
following PARL 2.x's API: ``IMPALA(model, sample_batch_steps, gamma, vf_loss_coeff,
clip_rho_threshold, clip_pg_rho_threshold)`` and ``learn(obs, actions, behaviour_logits, rewards,
dones, learning_rate, entropy_coeff)``.

The model provides ``policy(obs)`` and ``value(obs) -> (N,)``; a model that also has
``policy_and_value(obs)`` is run once per batch instead of twice. ``policy`` returns logits
``(N, act_dim)`` for discrete actions (PARL's case), or ``(mean (N, d), std)`` with ``std``
broadcastable to the mean for continuous ones (``continuous_action=True``, a diagonal Gaussian, as
:class:`~parl.algorithms.PPO`'s models). For a Gaussian policy the "behaviour logits" an actor
records are the distribution's parameters, ``concat(mean, log(std))``, ``(N, 2 * d)``: with them
the learner computes the behaviour log-probability and the exact KL.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from parl.algorithms.action_dists import (
    check_finite_loss,
    gaussian_entropy,
    gaussian_log_prob,
    gaussian_mean_log_std,
    gaussian_sample,
    logits_of,
)
from parl.algorithms.vtrace import VTraceReturns, from_log_probs
from parl.core.algorithm import Algorithm
from parl.utils.device import get_device
from parl.validation import check_bool, check_float, check_int

__all__ = ["IMPALA", "VTraceLoss"]


class VTraceLoss(NamedTuple):
    """The terms of one IMPALA step (detached sums over the batch, as PARL's)."""

    total_loss: torch.Tensor
    pi_loss: torch.Tensor
    vf_loss: torch.Tensor
    entropy: torch.Tensor
    vtrace_returns: VTraceReturns


def _time_major(tensor: torch.Tensor, n_traj: int, steps: int) -> torch.Tensor:
    """``(B * T, ...)`` with each trajectory's steps consecutive -> ``(T, B, ...)``."""
    return tensor.reshape(n_traj, steps, *tensor.shape[1:]).transpose(0, 1)


class IMPALA(Algorithm):
    """IMPALA's learner loss: ``pi_loss + vf_loss_coeff * vf_loss + entropy_coeff * entropy``.

    The batch holds ``B`` trajectories of ``sample_batch_steps`` (``T``) steps each, one after
    the other (trajectory-major, as PARL's actors send them). The last step of each trajectory
    only provides the bootstrap value ``V(x_T)``; V-trace runs over the first ``T - 1`` steps.
    ``entropy_coeff`` is negative in PARL's schedules (-0.01), which makes the entropy a bonus.

    Args:
        model: a ``parl.Model`` with ``policy`` and ``value``.
        sample_batch_steps: ``T``, the length of one trajectory (PARL's config: 50).
        gamma: discount factor.
        vf_loss_coeff: weight of ``0.5 * sum((V - vs)^2)``.
        clip_rho_threshold: :math:`\\bar\\rho` of V-trace.
        clip_pg_rho_threshold: the clip of the importance weight in the policy gradient.
        max_grad_norm: global gradient-norm clip (PARL: 40).
        learning_rate: Adam's initial rate (``learn`` sets it at every call).
        continuous_action: a diagonal Gaussian policy on ``policy(obs) -> (mean, std)``
            instead of a categorical one on logits.
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...; the model is moved there.
    """

    model_methods = ("policy", "value")
    model: Any  # a parl.Model with the methods above

    def __init__(
        self,
        model: nn.Module,
        sample_batch_steps: int | None = None,
        gamma: float | None = None,
        vf_loss_coeff: float | None = None,
        clip_rho_threshold: float | None = None,
        clip_pg_rho_threshold: float | None = None,
        *,
        max_grad_norm: float = 40.0,
        learning_rate: float = 1e-3,
        continuous_action: bool = False,
        device: str | torch.device = "auto",
    ) -> None:
        owner = "IMPALA"
        self.continuous_action = check_bool("continuous_action", continuous_action, owner=owner)
        self.sample_batch_steps = check_int(
            "sample_batch_steps",
            50 if sample_batch_steps is None else sample_batch_steps,
            low=2,
            owner=owner,
        )
        self.gamma = check_float("gamma", 0.99 if gamma is None else gamma, low=0.0, owner=owner)
        self.vf_loss_coeff = check_float(
            "vf_loss_coeff", 0.5 if vf_loss_coeff is None else vf_loss_coeff, low=0.0, owner=owner
        )
        self.clip_rho_threshold = check_float(
            "clip_rho_threshold",
            1.0 if clip_rho_threshold is None else clip_rho_threshold,
            low=0.0,
            low_open=True,
            owner=owner,
        )
        self.clip_pg_rho_threshold = check_float(
            "clip_pg_rho_threshold",
            1.0 if clip_pg_rho_threshold is None else clip_pg_rho_threshold,
            low=0.0,
            low_open=True,
            owner=owner,
        )
        self.max_grad_norm = check_float(
            "max_grad_norm", max_grad_norm, low=0.0, low_open=True, owner=owner
        )
        learning_rate = check_float(
            "learning_rate", learning_rate, low=0.0, low_open=True, owner=owner
        )
        super().__init__(model, device=get_device(device))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=learning_rate)

    def _policy_and_value(self, obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        both = getattr(self.model, "policy_and_value", None)
        if callable(both):
            policy, values = both(obs)
        else:
            policy, values = self.model.policy(obs), self.model.value(obs)
        return policy, values.reshape(-1)

    def _gaussian(self, policy: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return gaussian_mean_log_std(policy, "IMPALA")

    def _logits(self, policy: Any) -> torch.Tensor:
        return logits_of(policy, "IMPALA")

    def _action_terms(
        self, policy: Any, actions: torch.Tensor, behaviour: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per step: ``(target log-prob, behaviour log-prob, entropy, KL(target || behaviour))``."""
        behaviour = behaviour.float()
        if self.continuous_action:
            mean, log_std = self._gaussian(policy)
            d = mean.shape[-1]
            if behaviour.shape[-1] != 2 * d:
                raise ValueError(
                    f"IMPALA.learn: behaviour_logits has {behaviour.shape[-1]} columns; a Gaussian "
                    f"policy over {d} action dimensions records 2 * {d}: concat(mean, log_std)"
                )
            b_mean, b_log_std = behaviour[:, :d], behaviour[:, d:]
            actions = actions.float().reshape(mean.shape)
            std, b_std = log_std.exp(), b_log_std.exp()
            target_lp = gaussian_log_prob(mean, std, actions, log_std)
            behaviour_lp = gaussian_log_prob(b_mean, b_std, actions, b_log_std)
            entropies = gaussian_entropy(mean, log_std)
            kl = (
                b_log_std - log_std + (std.square() + (mean - b_mean).square()) / (2 * b_std.square())
                - 0.5
            ).sum(-1)  # fmt: skip
            return target_lp, behaviour_lp, entropies, kl
        logits = self._logits(policy)
        if behaviour.shape != logits.shape:
            raise ValueError(
                f"IMPALA.learn: behaviour_logits has shape {tuple(behaviour.shape)}, the model's "
                f"logits {tuple(logits.shape)}; pass the actor's logits for every step, "
                "(N, act_dim)"
            )
        log_probs = F.log_softmax(logits, dim=-1)
        behaviour_log_probs = F.log_softmax(behaviour, dim=-1)
        actions = actions.long().reshape(-1, 1)
        target_lp = log_probs.gather(-1, actions).squeeze(-1)
        behaviour_lp = behaviour_log_probs.gather(-1, actions).squeeze(-1)
        probs = log_probs.exp()
        # a masked action (logit -inf) has p = 0 and log p = -inf: clamped, as
        # Categorical.entropy does, it adds 0 to the entropy and the KL instead of 0 * -inf = NaN
        lowest = torch.finfo(log_probs.dtype).min
        log_probs, behaviour_log_probs = (
            log_probs.clamp(min=lowest),
            behaviour_log_probs.clamp(min=lowest),
        )
        entropies = -(probs * log_probs).sum(-1)
        kl = (probs * (log_probs - behaviour_log_probs)).sum(-1)
        return target_lp, behaviour_lp, entropies, kl

    def learn(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        behaviour_logits: torch.Tensor,
        rewards: torch.Tensor,
        dones: torch.Tensor,
        learning_rate: float,
        entropy_coeff: float,
    ) -> tuple[VTraceLoss, torch.Tensor]:
        """One Adam step on ``B`` trajectories of ``T`` steps; returns ``(vtrace_loss, kl)``.

        Shapes (``N = B * T``, trajectory-major): ``obs (N, *obs_shape)``, ``actions (N,)``
        integer, ``behaviour_logits (N, act_dim)`` (the actor's logits when it chose the
        action), ``rewards (N,)``, ``dones (N,)`` (the episode ended after this step). With
        ``continuous_action``: ``actions (N, d)`` float (as sampled, before any clipping to the
        action space) and ``behaviour_logits (N, 2 * d)``, the actor's ``concat(mean, log_std)``.
        ``kl`` is the mean KL(target || behaviour), a measure of how stale the actors were.
        """
        steps = self.sample_batch_steps
        if obs.shape[0] % steps != 0:
            raise ValueError(
                f"IMPALA.learn: the batch has {obs.shape[0]} steps, not a multiple of "
                f"sample_batch_steps={steps}; pass whole trajectories of {steps} steps each"
            )
        learning_rate = check_float(
            "learning_rate", learning_rate, low=0.0, low_open=True, owner="IMPALA.learn"
        )
        for name, tensor in (("actions", actions), ("behaviour_logits", behaviour_logits),
                             ("rewards", rewards), ("dones", dones)):  # fmt: skip
            if tensor.dim() == 0 or tensor.shape[0] != obs.shape[0]:
                raise ValueError(
                    f"IMPALA.learn: {name} has shape {tuple(tensor.shape)}, but obs has "
                    f"{obs.shape[0]} steps; every field holds one row per step"
                )
        n_traj = obs.shape[0] // steps
        policy, values = self._policy_and_value(obs)
        target_lp, behaviour_lp, entropies, kls = self._action_terms(
            policy, actions, behaviour_logits
        )
        kl = kls.mean()

        def split(x: torch.Tensor) -> torch.Tensor:
            return _time_major(x, n_traj, steps)

        target_lp_t, values_t, entropies_t = split(target_lp), split(values), split(entropies)
        discounts = (1.0 - split(dones.float().reshape(-1))[:-1]) * self.gamma
        returns = from_log_probs(
            split(behaviour_lp)[:-1],
            target_lp_t[:-1],
            discounts,
            split(rewards.float().reshape(-1))[:-1],
            values_t[:-1],
            values_t[-1],
            self.clip_rho_threshold,
            self.clip_pg_rho_threshold,
        )
        pi_loss = -(target_lp_t[:-1] * returns.pg_advantages).sum()
        vf_loss = 0.5 * (values_t[:-1] - returns.vs).pow(2).sum()
        entropy = entropies_t[:-1].sum()
        total_loss = pi_loss + self.vf_loss_coeff * vf_loss + entropy_coeff * entropy
        check_finite_loss("IMPALA.learn", total_loss, pi_loss, vf_loss, entropy)

        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        self.optimizer.zero_grad(set_to_none=True)
        total_loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        loss = VTraceLoss(
            total_loss.detach(), pi_loss.detach(), vf_loss.detach(), entropy.detach(), returns
        )
        return loss, kl.detach()

    @torch.no_grad()
    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Discrete: ``(probs (N, act_dim), logits (N, act_dim))`` of the current policy, as
        PARL's (the agent draws the action). Continuous: ``(actions (N, d), behaviour_logits
        (N, 2 * d))``, actions drawn from the Gaussian and its ``concat(mean, log_std)``."""
        policy = self.model.policy(obs)
        if self.continuous_action:
            mean, log_std = self._gaussian(policy)
            actions = gaussian_sample(mean, log_std.exp())
            return actions, torch.cat([mean, log_std], dim=-1)
        logits = self._logits(policy)
        return F.softmax(logits, dim=-1), logits

    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy action: the most likely one ``(N,)``, or the mean ``(N, d)``."""
        policy = self.model.policy(obs)
        if self.continuous_action:
            return self._gaussian(policy)[0]
        return self._logits(policy).argmax(dim=-1)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(obs)``, ``(N,)``."""
        return self.model.value(obs).reshape(-1)
