"""Advantage Actor-Critic (Mnih et al. 2016, https://arxiv.org/abs/1602.01783), synchronous,
following PARL 2.x's torch API: ``A2C(model, config)``.

The model provides ``policy(obs)``, ``value(obs) -> (B,)`` and ``policy_and_value(obs) ->
(policy, values)`` (one forward pass for both, used when sampling). ``policy`` returns logits
``(B, act_dim)`` for discrete actions (PARL's case), or ``(mean (B, d), std)`` (``std``
broadcastable to the mean) for a diagonal Gaussian policy when ``config["continuous_action"]``
is true.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from parl.algorithms.action_dists import (
    categorical_log_prob_entropy,
    categorical_sample,
    check_finite_loss,
    gaussian_entropy,
    gaussian_log_prob,
    gaussian_mean_log_std,
    gaussian_sample,
    logits_of,
)
from parl.core.algorithm import Algorithm
from parl.utils.device import get_device
from parl.validation import check_bool, check_float

__all__ = ["A2C"]

_DEFAULTS = {
    "vf_loss_coeff": 0.5,
    "learning_rate": 1e-3,
    "max_grad_norm": 40.0,
    "continuous_action": False,
}


def _config_value(config: Mapping[str, Any], name: str, aliases: tuple[str, ...] = ()) -> Any:
    for key in (name, *aliases):
        if key in config:
            return config[key]
    return _DEFAULTS[name]


def _per_step(name: str, tensor: torch.Tensor, batch: int) -> torch.Tensor:
    """``tensor`` as ``(B,)``: a ``(B, 1)`` column would broadcast against the ``(B,)``
    log-probabilities into a ``(B, B)`` matrix and silently give a wrong loss."""
    if tensor.numel() != batch:
        raise ValueError(
            f"A2C.learn: {name} has shape {tuple(tensor.shape)}, but obs has {batch} steps; "
            f"pass one value per step, ({batch},)"
        )
    return tensor.reshape(batch)


class A2C(Algorithm):
    """A2C with PARL's loss: sums over the batch (not means), as PARL does.

    ``loss = -sum(log pi(a|s) * A) + vf_loss_coeff * 0.5 * sum((V - target)^2)
    + entropy_coeff * sum(H)``; PARL's schedules pass a *negative* ``entropy_coeff`` (-0.01), so
    the entropy term is a bonus. Gradients are clipped to a global norm of ``max_grad_norm``.

    Args:
        model: a ``parl.Model`` with ``policy``, ``value`` and ``policy_and_value``.
        config: PARL's config dict; read keys: ``vf_loss_coeff`` (0.5), ``learning_rate``
            (or PARL's ``start_lr``; 1e-3), ``max_grad_norm`` (40) and ``continuous_action``
            (False: a Gaussian policy on ``(mean, std)`` when true). Missing keys take the
            defaults in brackets; keyword arguments of the same names override the dict.
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...; the model is moved there.
    """

    model_methods = ("policy", "value", "policy_and_value")
    model: Any  # a parl.Model with the methods above (typed loosely: they are user-defined)

    def __init__(
        self,
        model: nn.Module,
        config: Mapping[str, Any] | None = None,
        *,
        vf_loss_coeff: float | None = None,
        learning_rate: float | None = None,
        max_grad_norm: float | None = None,
        continuous_action: bool | None = None,
        device: str | torch.device = "auto",
    ) -> None:
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(
                f"A2C: config must be a dict such as {{'vf_loss_coeff': 0.5, "
                f"'learning_rate': 1e-3}}, got {type(config).__name__}"
            )
        config = dict(config or {})
        owner = "A2C"
        self.vf_loss_coeff = check_float(
            "vf_loss_coeff",
            _config_value(config, "vf_loss_coeff") if vf_loss_coeff is None else vf_loss_coeff,
            low=0.0,
            owner=owner,
        )
        self.learning_rate = check_float(
            "learning_rate",
            _config_value(config, "learning_rate", ("start_lr",))
            if learning_rate is None
            else learning_rate,
            low=0.0,
            low_open=True,
            owner=owner,
        )
        self.max_grad_norm = check_float(
            "max_grad_norm",
            _config_value(config, "max_grad_norm") if max_grad_norm is None else max_grad_norm,
            low=0.0,
            low_open=True,
            owner=owner,
        )
        self.continuous_action = check_bool(
            "continuous_action",
            _config_value(config, "continuous_action")
            if continuous_action is None
            else continuous_action,
            owner=owner,
        )
        self.config = config
        super().__init__(model, device=get_device(device))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.learning_rate)

    def learn(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        advantages: torch.Tensor,
        target_values: torch.Tensor,
        lr: float | None = None,
        entropy_coeff: float = -0.01,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One Adam step; returns ``(total_loss, pi_loss, vf_loss, entropy)`` (detached sums).

        Shapes: ``obs (B, *obs_shape)``, ``actions (B,)`` integer (``(B, d)`` float for a
        Gaussian policy), ``advantages (B,)``, ``target_values (B,)``. ``lr`` sets the learning rate from now on (PARL passes the
        value of its linear schedule at every call).
        """
        if lr is not None:
            lr = check_float("lr", lr, low=0.0, owner="A2C.learn")
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        advantages = _per_step("advantages", advantages, obs.shape[0])
        target_values = _per_step("target_values", target_values, obs.shape[0])
        policy, values = self.model.policy_and_value(obs)
        if self.continuous_action:
            mean, log_std = self._gaussian(policy)
            actions = actions.float().reshape(mean.shape)
            chosen = gaussian_log_prob(mean, log_std.exp(), actions, log_std)
            entropies = gaussian_entropy(mean, log_std)
        else:
            logits = self._logits(policy)
            chosen, entropies = categorical_log_prob_entropy(logits, actions.long().reshape(-1))
        pi_loss = -(chosen * advantages).sum()
        vf_loss = 0.5 * (values.reshape(-1) - target_values).pow(2).sum()
        entropy = entropies.sum()
        total_loss = pi_loss + self.vf_loss_coeff * vf_loss + entropy_coeff * entropy
        check_finite_loss("A2C.learn", total_loss, pi_loss, vf_loss, entropy)

        self.optimizer.zero_grad(set_to_none=True)
        total_loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return total_loss.detach(), pi_loss.detach(), vf_loss.detach(), entropy.detach()

    def _gaussian(self, policy: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return gaussian_mean_log_std(policy, "A2C")

    def _logits(self, policy: Any) -> torch.Tensor:
        return logits_of(policy, "A2C")

    @torch.no_grad()
    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions, values (B,))``, actions drawn from the policy: ``(B,)`` int64, or
        ``(B, d)`` float for a Gaussian policy (not clipped to the action space)."""
        policy, values = self.model.policy_and_value(obs)
        if self.continuous_action:
            mean, log_std = self._gaussian(policy)
            return gaussian_sample(mean, log_std.exp()), values
        return categorical_sample(self._logits(policy)), values

    @torch.no_grad()
    def prob_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action probabilities (B, act_dim), values (B,))`` (discrete actions)."""
        if self.continuous_action:
            raise TypeError(
                "A2C.prob_and_value: a Gaussian policy has no action probabilities; use sample()"
            )
        policy, values = self.model.policy_and_value(obs)
        return F.softmax(self._logits(policy), dim=-1), values

    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy action: the most likely one ``(B,)``, or the mean ``(B, d)``."""
        policy = self.model.policy(obs)
        if self.continuous_action:
            return self._gaussian(policy)[0]
        return self._logits(policy).argmax(dim=-1)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(obs)``, ``(B,)``."""
        return self.model.value(obs)
