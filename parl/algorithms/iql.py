"""IQL (Kostrikov et al. 2021, https://arxiv.org/abs/2110.06169): implicit Q-learning for offline
RL. A state value learned by expectile regression on the target critic stands in for the max
over actions, so no action outside the dataset is ever evaluated; the policy is then extracted
by advantage-weighted regression onto the dataset's actions."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from parl.algorithms.offpolicy import (
    TargetSync,
    as_flat,
    check_transitions,
    make_adam,
    make_target,
)
from parl.core.algorithm import Algorithm
from parl.utils.device import get_device
from parl.validation import check_float, check_int, keyword_aliases

__all__ = ["EXP_ADV_MAX", "IQL", "expectile_loss"]

#: Upper bound of the advantage weights ``exp(beta * A)`` (the paper's code uses 100 too).
EXP_ADV_MAX = 100.0


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """``mean(|expectile - 1(diff < 0)| * diff^2)``: the asymmetric squared loss whose minimiser
    is the ``expectile`` of ``diff``'s distribution (0.5: the mean; towards 1: the maximum)."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.square()).mean()


def _params(model: Any, method: str) -> list[nn.Parameter]:
    params = list(getattr(model, method)())
    if not params:
        raise ValueError(f"IQL: model.{method}() returned no parameters")
    return params


class IQL(Algorithm):
    """Implicit Q-learning.

    The model defines ``value(obs) -> V`` (``(B, 1)`` or ``(B,)``), ``qvalue(obs, action) ->
    (q1, q2)``, ``policy(obs)`` returning a ``torch.distributions.Distribution`` over actions
    (PARL's example: a ``MultivariateNormal`` with a tanh mean and a state-independent std), and
    ``get_actor_params``, ``get_critic_params``, ``get_value_params``.

    Each ``update`` (``learn`` is the same) computes, from one batch,

    - ``L_V = expectile_loss(min_i Q'_i(s, a) - V(s), tau)`` with the target critics,
    - ``L_Q = sum_i MSE(Q_i(s, a), r + discount * (1 - done) * V(s'))``,
    - ``L_pi = mean(min(exp(beta * (min_i Q'_i(s, a) - V(s))), 100) * -log pi(a | s))``,

    takes one Adam step on each of the three parts of the model and a soft target update.

    ``sync_target`` keeps the convention of every other algorithm here: ``target = decay *
    target + (1 - decay) * model``, ``decay=None`` meaning ``1 - alpha``, ``decay=0`` a copy.
    PARL 2.2.1's IQL has it the other way round (``sync_target(alpha=0)``: ``target = alpha *
    model + (1 - alpha) * target``, so that its bare ``sync_target()`` changes nothing); its
    keyword ``alpha`` is accepted with PARL's meaning. A number given without a keyword is
    ``decay``: PARL's ``sync_target(1.0)`` copies, here it keeps the target as it is.

    The arguments have PARL's names, order and defaults.

    Args:
        model: the value, critic and actor model.
        max_steps: the planned number of updates; kept as ``self.max_steps`` for schedules, it
            changes nothing in the updates (as in PARL).
        lr: learning rate of the three Adam optimizers.
        tau: the expectile of the value regression (0.5: SARSA-like mean; towards 1: max).
        beta: inverse temperature of the advantage weights.
        discount: discount factor.
        alpha: target update rate (``sync_target()`` moves the target by this fraction).
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...
    """

    model_methods: ClassVar[tuple[str, ...]] = (
        "value",
        "policy",
        "qvalue",
        "get_actor_params",
        "get_critic_params",
        "get_value_params",
    )
    model: Any
    target_model: Any

    def __init__(
        self,
        model: nn.Module,
        max_steps: int,
        lr: float = 3e-4,
        tau: float = 0.7,
        beta: float = 3.0,
        discount: float = 0.99,
        alpha: float = 0.005,
        *,
        device: str | torch.device = "auto",
    ) -> None:
        owner = "IQL"
        self.max_steps = check_int("max_steps", max_steps, low=1, owner=owner)
        self.lr = check_float("lr", lr, low=0.0, low_open=True, owner=owner)
        self.tau = check_float(
            "tau", tau, low=0.0, high=1.0, low_open=True, high_open=True, owner=owner
        )
        self.beta = check_float("beta", beta, low=0.0, owner=owner)
        self.discount = check_float("discount", discount, low=0.0, high=1.0, owner=owner)
        self.alpha = check_float("alpha", alpha, low=0.0, high=1.0, owner=owner)
        super().__init__(model, device=get_device(device))
        self.target_model = make_target(self.model)
        self._target_sync = TargetSync(self.model, self.target_model)
        self._value_params = _params(self.model, "get_value_params")
        self._critic_params = _params(self.model, "get_critic_params")
        self._actor_params = _params(self.model, "get_actor_params")
        self.v_optimizer = make_adam(self._value_params, self.lr)
        self.q_optimizer = make_adam(self._critic_params, self.lr)
        self.policy_optimizer = make_adam(self._actor_params, self.lr)

    @property
    def q_target(self) -> Any:
        """PARL's name of the target model."""
        return self.target_model

    def _policy(self, obs: torch.Tensor) -> torch.distributions.Distribution:
        dist = self.model.policy(obs)
        if not isinstance(dist, torch.distributions.Distribution):
            raise TypeError(
                "IQL: model.policy(obs) must return a torch.distributions.Distribution over "
                f"actions (e.g. MultivariateNormal(mean, scale_tril=...)), got "
                f"{type(dist).__name__}"
            )
        return dist

    @keyword_aliases(observations="obs")
    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean of the policy's distribution, ``(B, act_dim)``."""
        return self._policy(obs).mean

    @torch.no_grad()
    def sample(self, obs: torch.Tensor) -> torch.Tensor:
        """An action drawn from the policy's distribution, ``(B, act_dim)``."""
        return self._policy(obs).sample()

    def update(
        self,
        observations: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_observations: torch.Tensor,
        terminals: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step on the critics, the value and the policy, then a soft target update;
        returns the (detached) ``(q_loss, v_loss, policy_loss)``.

        Shapes: ``observations``/``next_observations`` ``(B, obs_dim)``, ``actions`` ``(B,
        act_dim)``, ``rewards``/``terminals`` ``(B,)`` or ``(B, 1)`` (``terminals`` may be bool).
        """
        check_transitions(
            "IQL.update", observations, actions, rewards, next_observations, terminals
        )
        rewards = as_flat(rewards)
        terminals = as_flat(terminals).to(rewards.dtype)
        with torch.no_grad():
            target_q1, target_q2 = self.target_model.qvalue(observations, actions)
            target_q = torch.min(as_flat(target_q1), as_flat(target_q2))
            next_v = as_flat(self.model.value(next_observations))
            q_target = rewards + (1.0 - terminals) * self.discount * next_v

        v = as_flat(self.model.value(observations))
        adv = target_q - v
        v_loss = expectile_loss(adv, self.tau)

        q1, q2 = self.model.qvalue(observations, actions)
        q_loss = F.mse_loss(as_flat(q1), q_target) + F.mse_loss(as_flat(q2), q_target)

        exp_adv = torch.exp(self.beta * adv.detach()).clamp(max=EXP_ADV_MAX)
        log_prob = self._policy(observations).log_prob(actions)
        if log_prob.dim() == 2:  # an independent Normal: one log-density per action dimension
            log_prob = log_prob.sum(dim=-1)
        policy_loss = (exp_adv * -log_prob).mean()

        # the three losses touch disjoint parameters: one step each, in PARL's order
        for optimizer, params, loss in (
            (self.q_optimizer, self._critic_params, q_loss),
            (self.v_optimizer, self._value_params, v_loss),
            (self.policy_optimizer, self._actor_params, policy_loss),
        ):
            grads = torch.autograd.grad(loss, params)
            for param, grad in zip(params, grads, strict=True):
                param.grad = grad
            optimizer.step()
        self.sync_target()
        return q_loss.detach(), v_loss.detach(), policy_loss.detach()

    def learn(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminal: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The same as ``update``: ``(q_loss, v_loss, policy_loss)``."""
        return self.update(obs, action, reward, next_obs, terminal)

    def sync_target(self, decay: float | None = None, *, alpha: float | None = None) -> None:
        """``target = decay * target + (1 - decay) * model`` for every tensor of the model.

        Args:
            decay: the share of the target kept; ``None`` means ``1 - self.alpha``, ``0``
                copies the model.
            alpha: PARL's keyword, the share of the model taken (``decay = 1 - alpha``);
                ``alpha=1.0`` copies. Give ``decay`` or ``alpha``, not both.
        """
        if alpha is not None:
            if decay is not None:
                raise ValueError(
                    "IQL.sync_target: give decay (the share of the target kept) or alpha "
                    f"(PARL's share of the model taken), not both; got decay={decay!r}, "
                    f"alpha={alpha!r}"
                )
            decay = 1.0 - check_float("alpha", alpha, low=0.0, high=1.0, owner="IQL.sync_target")
        elif decay is None:
            decay = 1.0 - self.alpha
        else:
            decay = check_float("decay", decay, low=0.0, high=1.0, owner="IQL.sync_target")
        self._target_sync(decay)
