"""SAC (Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290 and, for the automatic entropy
temperature, https://arxiv.org/abs/1812.05905): maximum-entropy actor-critic with a squashed
Gaussian policy and twin critics."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from parl.algorithms.ddpg import ActorCriticBase
from parl.algorithms.offpolicy import as_flat, make_adam
from parl.validation import check_float

__all__ = ["SAC"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class LogAlpha(nn.Module):
    """The learnable ``log(alpha)``, a module so that checkpoints and ``get_weights`` hold it."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha)))


def squashed_gaussian_sample(
    mean: torch.Tensor, log_std: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``a = tanh(mean + std * eps)`` and ``log pi(a | s)`` summed over actions, ``(B,)``.

    ``log N(x; mean, std) = -eps^2 / 2 - log std - log(2 pi) / 2`` with ``eps = (x - mean) /
    std`` drawn directly, and the change of variables of tanh subtracts ``log(1 - a^2 + 1e-6)``
    (appendix C of the SAC paper; the 1e-6 as in PARL and Stable-Baselines3).
    """
    eps = torch.randn_like(mean)
    action = torch.tanh(mean + log_std.exp() * eps)
    log_prob = -0.5 * eps.square() - log_std - torch.log(1.0 - action.square() + 1e-6)
    return action, log_prob.sum(dim=-1) - _HALF_LOG_2PI * mean.shape[-1]


class SquashedGaussianActions:
    """``predict`` and ``sample`` of a squashed Gaussian policy, ``model.policy(obs) -> (mean,
    log_std)`` before the tanh (SAC's and CQL's)."""

    model: Any  # the algorithm's, with a ``policy`` method

    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``tanh(mean)``, ``(B, act_dim)``."""
        mean, _ = self.model.policy(obs)
        return torch.tanh(mean)

    @torch.no_grad()
    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A sampled action ``(B, act_dim)`` and its log-probability ``(B, 1)`` (as PARL)."""
        action, log_prob = squashed_gaussian_sample(*self.model.policy(obs))
        return action, log_prob.unsqueeze(-1)


class SAC(SquashedGaussianActions, ActorCriticBase):
    """Soft actor-critic.

    ``model.policy(obs)`` returns ``(mean, log_std)`` of the pre-tanh Gaussian (``(B,
    act_dim)`` each; clip ``log_std`` in the model, as PARL's does), ``model.value(obs, action)``
    returns ``(q1, q2)``. ``parl.algorithms.ensemble.TwinQNetwork`` is a fast critic for it.

    The arguments have PARL's names and order: ``model, gamma, tau, alpha, actor_lr, critic_lr``.

    Args:
        model: the actor-critic model.
        gamma: discount factor.
        tau: target update rate (``sync_target`` uses ``decay = 1 - tau``).
        alpha: entropy temperature. A float keeps it fixed (PARL); ``"auto"`` learns it,
            starting from 1 (Stable-Baselines3's default), and ``"auto_0.1"`` starting from 0.1.
        actor_lr, critic_lr: learning rates of the Adam optimizers.
        target_entropy: with a learned alpha, the entropy aimed at; ``None`` means
            ``-act_dim``.
        alpha_lr: learning rate of alpha; ``None`` means ``actor_lr``.
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...
    """

    def __init__(
        self,
        model: nn.Module,
        gamma: float = 0.99,
        tau: float = 0.005,
        alpha: float | str = 0.2,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        *,
        target_entropy: float | None = None,
        alpha_lr: float | None = None,
        device: str | torch.device = "auto",
    ) -> None:
        super().__init__(model, gamma, tau, actor_lr, critic_lr, device)
        self.auto_alpha = isinstance(alpha, str)
        initial = _initial_alpha(alpha)
        self.target_entropy = (
            None
            if target_entropy is None
            else check_float("target_entropy", target_entropy, owner="SAC")
        )
        self._fixed_alpha = initial
        if self.auto_alpha:
            self.alpha_model = LogAlpha(initial).to(self.device)
            lr = actor_lr if alpha_lr is None else alpha_lr
            self.alpha_lr = check_float("alpha_lr", lr, low=0.0, low_open=True, owner="SAC")
            self.alpha_optimizer = make_adam(self.alpha_model.parameters(), self.alpha_lr)

    @property
    def alpha(self) -> float:
        """The current entropy temperature."""
        if self.auto_alpha:
            return float(self.alpha_model.log_alpha.detach().exp())
        return self._fixed_alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        value = check_float("alpha", value, low=0.0, low_open=True, owner="SAC")
        if self.auto_alpha:
            with torch.no_grad():
                self.alpha_model.log_alpha.fill_(math.log(value))
        else:
            self._fixed_alpha = value

    def learn(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminal: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One critic step, one actor step, one alpha step if alpha is learned, and a soft
        target update; returns the (detached) ``(critic_loss, actor_loss)``.

        All three losses use the alpha of before this call, as Stable-Baselines3 does.
        """
        reward, terminal = as_flat(reward), as_flat(terminal).to(reward.dtype)
        alpha: torch.Tensor | float = (
            self.alpha_model.log_alpha.detach().exp() if self.auto_alpha else self._fixed_alpha
        )
        with torch.no_grad():
            next_action, next_log_prob = squashed_gaussian_sample(*self.model.policy(next_obs))
            target_q1, target_q2 = self.target_model.value(next_obs, next_action)
            next_q = torch.min(as_flat(target_q1), as_flat(target_q2)) - alpha * next_log_prob
            target_q = reward + self.gamma * (1.0 - terminal) * next_q
        current_q1, current_q2 = self.model.value(obs, action)
        critic_loss = F.mse_loss(as_flat(current_q1), target_q) + F.mse_loss(
            as_flat(current_q2), target_q
        )
        self._critic_step(critic_loss)

        action_pi, log_prob = squashed_gaussian_sample(*self.model.policy(obs))
        q1_pi, q2_pi = self.model.value(obs, action_pi)
        actor_loss = (alpha * log_prob - torch.min(as_flat(q1_pi), as_flat(q2_pi))).mean()
        self._actor_step(actor_loss)
        if self.auto_alpha:
            self._alpha_step(log_prob.detach(), action.shape[-1])
        self.sync_target()
        return critic_loss.detach(), actor_loss.detach()

    def _alpha_step(self, log_prob: torch.Tensor, act_dim: int) -> None:
        """``loss = -mean(log_alpha * (log_pi + target_entropy))``; its gradient is
        ``-mean(log_pi + target_entropy)``, set directly instead of through autograd."""
        target = -float(act_dim) if self.target_entropy is None else self.target_entropy
        log_alpha = self.alpha_model.log_alpha
        log_alpha.grad = -(log_prob.mean() + target)
        self.alpha_optimizer.step()


def _initial_alpha(alpha: object) -> float:
    if isinstance(alpha, str):
        if alpha == "auto":
            return 1.0
        if alpha.startswith("auto_"):
            try:
                value = float(alpha[len("auto_") :])
            except ValueError:
                value = float("nan")
            if value > 0 and math.isfinite(value):
                return value
        raise ValueError(
            f"SAC: alpha must be a float > 0, 'auto' or 'auto_<initial value>' such as "
            f"'auto_0.1', got {alpha!r}"
        )
    return check_float("alpha", alpha, low=0.0, owner="SAC")
