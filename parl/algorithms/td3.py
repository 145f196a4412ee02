"""TD3 (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477): DDPG with twin critics, target
policy smoothing and delayed actor updates."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from parl.algorithms.ddpg import ActorCriticBase
from parl.algorithms.offpolicy import as_flat
from parl.validation import check_float, check_int

__all__ = ["TD3"]


class TD3(ActorCriticBase):
    """Twin delayed DDPG.

    The model defines ``policy(obs)`` (actions in ``[-max_action, max_action]``), ``value(obs,
    action) -> (q1, q2)``, ``Q1(obs, action)`` and ``get_actor_params`` / ``get_critic_params``
    (PARL's TD3 model). ``parl.algorithms.ensemble.TwinQNetwork`` is a fast critic for it.

    Each ``learn`` updates the critics towards ``r + gamma * (1 - done) * min(Q1_t, Q2_t)(s',
    clip(pi_t(s') + clip(noise, -noise_clip, noise_clip)))``; every ``policy_freq``-th call also
    updates the actor along ``-Q1(s, pi(s))`` and then the target model.

    The arguments have PARL's names and order, and the defaults of the paper and PARL's example.

    Args:
        model, gamma, tau, actor_lr, critic_lr: as ``DDPG``.
        policy_noise: standard deviation of the target policy noise.
        noise_clip: the noise is clipped to ``[-noise_clip, noise_clip]``.
        policy_freq: one actor and target update every ``policy_freq`` critic updates.
        max_action: bound of the actions (PARL's examples scale actions to ``[-1, 1]``).
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...
    """

    model_methods = ("policy", "value", "Q1", "get_actor_params", "get_critic_params")

    def __init__(
        self,
        model: nn.Module,
        gamma: float = 0.99,
        tau: float = 0.005,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        policy_freq: int = 2,
        *,
        max_action: float = 1.0,
        device: str | torch.device = "auto",
    ) -> None:
        super().__init__(model, gamma, tau, actor_lr, critic_lr, device)
        self.policy_noise = check_float("policy_noise", policy_noise, low=0.0, owner="TD3")
        self.noise_clip = check_float("noise_clip", noise_clip, low=0.0, owner="TD3")
        self.policy_freq = check_int("policy_freq", policy_freq, low=1, owner="TD3")
        self.max_action = check_float("max_action", max_action, low=0.0, low_open=True)
        self.total_it = 0

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
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One critic step (and, every ``policy_freq`` calls, an actor step and a target
        update); returns the (detached) ``(critic_loss, actor_loss or None)``."""
        self.total_it += 1
        reward, terminal = as_flat(reward), as_flat(terminal).to(reward.dtype)
        with torch.no_grad():
            noise = (torch.randn_like(action) * self.policy_noise).clamp_(
                -self.noise_clip, self.noise_clip
            )
            next_action = (self.target_model.policy(next_obs) + noise).clamp_(
                -self.max_action, self.max_action
            )
            target_q1, target_q2 = self.target_model.value(next_obs, next_action)
            next_q = torch.min(as_flat(target_q1), as_flat(target_q2))
            target_q = reward + self.gamma * (1.0 - terminal) * next_q
        current_q1, current_q2 = self.model.value(obs, action)
        critic_loss = F.mse_loss(as_flat(current_q1), target_q) + F.mse_loss(
            as_flat(current_q2), target_q
        )
        self._critic_step(critic_loss)
        if self.total_it % self.policy_freq:
            return critic_loss.detach(), None
        actor_loss = -self.model.Q1(obs, self.model.policy(obs)).mean()
        self._actor_step(actor_loss)
        self.sync_target()
        return critic_loss.detach(), actor_loss.detach()
