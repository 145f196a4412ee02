"""DDPG (Lillicrap et al. 2016, https://arxiv.org/abs/1509.02971): a deterministic actor and a Q
critic learned off-policy, for continuous actions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from parl.algorithms.offpolicy import (
    TargetSync,
    as_flat,
    make_adam,
    make_target,
    soft_update_decay,
)
from parl.core.algorithm import Algorithm
from parl.utils.device import get_device
from parl.validation import check_float

__all__ = ["DDPG", "ActorCriticBase"]


def _params(get: Callable[[], object], owner: str, which: str) -> list[nn.Parameter]:
    params = list(get())  # type: ignore[call-overload]
    if not params:
        raise ValueError(f"{owner}: model.{which}() returned no parameters")
    return params


class ActorCriticBase(Algorithm):
    """What DDPG, TD3 and SAC share: validated ``gamma``/``tau``/learning rates, the target
    model, one Adam per part of the model and ``sync_target(decay=None)``.

    The model defines ``policy``, ``value``, ``get_actor_params`` and ``get_critic_params``,
    as in PARL's examples.
    """

    model_methods: ClassVar[tuple[str, ...]] = (
        "policy",
        "value",
        "get_actor_params",
        "get_critic_params",
    )
    # The model's own methods (policy, value, Q1, ...) are what these algorithms call.
    model: Any
    target_model: Any

    def __init__(
        self,
        model: nn.Module,
        gamma: float,
        tau: float,
        actor_lr: float,
        critic_lr: float,
        device: str | torch.device,
    ) -> None:
        name = type(self).__name__
        self.gamma = check_float("gamma", gamma, low=0.0, high=1.0, owner=name)
        self.tau = check_float("tau", tau, low=0.0, high=1.0, owner=name)
        self.actor_lr = check_float("actor_lr", actor_lr, low=0.0, low_open=True, owner=name)
        self.critic_lr = check_float("critic_lr", critic_lr, low=0.0, low_open=True, owner=name)
        super().__init__(model, device=get_device(device))
        self.target_model = make_target(self.model)
        self._target_sync = TargetSync(self.model, self.target_model)
        self._actor_params = _params(self.model.get_actor_params, name, "get_actor_params")
        self._critic_params = _params(self.model.get_critic_params, name, "get_critic_params")
        self.actor_optimizer = make_adam(self._actor_params, self.actor_lr)
        self.critic_optimizer = make_adam(self._critic_params, self.critic_lr)

    def sync_target(self, decay: float | None = None) -> None:
        """``target = decay * target + (1 - decay) * model`` (every tensor of the model);
        ``decay=None`` means ``1 - tau``, ``decay=0`` copies."""
        self._target_sync(soft_update_decay(decay, self.tau))

    def _critic_step(self, loss: torch.Tensor) -> None:
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_optimizer.step()

    def _actor_step(self, loss: torch.Tensor) -> None:
        """Gradients for the actor's parameters only: the critic's weight gradients, which
        ``loss.backward()`` would also compute and then throw away, are never computed."""
        grads = torch.autograd.grad(loss, self._actor_params)
        for param, grad in zip(self._actor_params, grads, strict=True):
            param.grad = grad
        self.actor_optimizer.step()


class DDPG(ActorCriticBase):
    """Deep deterministic policy gradient.

    ``model.policy(obs)`` returns actions in ``[-1, 1]`` (``(B, act_dim)``), ``model.value(obs,
    action)`` returns ``Q`` (``(B, 1)`` or ``(B,)``). Each ``learn`` updates the critic towards
    ``r + gamma * (1 - done) * Q_t(s', pi_t(s'))``, the actor along ``-Q(s, pi(s))``, then the
    target model with ``decay = 1 - tau``.

    The arguments have PARL's names and order, and the defaults of PARL's DDPG example.

    Args:
        model: the actor-critic model.
        gamma: discount factor.
        tau: target update rate.
        actor_lr, critic_lr: learning rates of the two Adam optimizers.
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...
    """

    def __init__(
        self,
        model: nn.Module,
        gamma: float = 0.99,
        tau: float = 0.005,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        *,
        device: str | torch.device = "auto",
    ) -> None:
        super().__init__(model, gamma, tau, actor_lr, critic_lr, device)

    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``(B, act_dim)``."""
        return self.model.policy(obs)

    def learn(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminal: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One critic step, one actor step and a soft target update; returns the (detached)
        ``(critic_loss, actor_loss)``. ``reward``/``terminal``: ``(B,)`` or ``(B, 1)``."""
        reward, terminal = as_flat(reward), as_flat(terminal).to(reward.dtype)
        with torch.no_grad():
            next_q = as_flat(self.target_model.value(next_obs, self.target_model.policy(next_obs)))
            target_q = reward + self.gamma * (1.0 - terminal) * next_q
        critic_loss = F.mse_loss(as_flat(self.model.value(obs, action)), target_q)
        self._critic_step(critic_loss)
        actor_loss = -self.model.value(obs, self.model.policy(obs)).mean()
        self._actor_step(actor_loss)
        self.sync_target()
        return critic_loss.detach(), actor_loss.detach()
