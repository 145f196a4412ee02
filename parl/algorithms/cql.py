"""CQL (Kumar et al. 2020, https://arxiv.org/abs/2006.04779): conservative Q-learning for offline
RL, a SAC actor-critic whose critics are pushed down on actions the policy and a uniform proposal
pick and up on the dataset's actions, so that the learned Q does not overrate unseen actions."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from parl.algorithms.ddpg import ActorCriticBase
from parl.algorithms.offpolicy import as_flat, check_transitions, make_adam
from parl.algorithms.sac import LogAlpha, SquashedGaussianActions, squashed_gaussian_sample
from parl.validation import check_bool, check_float, check_int

__all__ = ["CQL", "squashed_gaussian_log_prob"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
# atanh's argument is kept 1e-6 inside (-1, 1): dataset actions often sit exactly on the bound
_ATANH_EPS = 1e-6


def squashed_gaussian_log_prob(
    mean: torch.Tensor, log_std: torch.Tensor, action: torch.Tensor
) -> torch.Tensor:
    """``log pi(a | s)`` of given actions ``a = tanh(x)`` in ``[-1, 1]``, summed over actions:
    ``(B,)``.

    ``x = atanh(a)`` with ``1 + a`` and ``1 - a`` clamped at 1e-6, then the Gaussian density of
    ``x`` minus ``log(1 - a^2 + 1e-6)``, the same change of variables as sampling uses.
    """
    pre_tanh = 0.5 * torch.log(
        (1.0 + action).clamp(min=_ATANH_EPS) / (1.0 - action).clamp(min=_ATANH_EPS)
    )
    z = (pre_tanh - mean) / log_std.exp()
    log_prob = -0.5 * z.square() - log_std - _HALF_LOG_2PI
    log_prob = log_prob - torch.log(1.0 - action.square() + 1e-6)
    return log_prob.sum(dim=-1)


class CQL(SquashedGaussianActions, ActorCriticBase):
    """Conservative Q-learning on top of SAC's squashed Gaussian actor and twin critics.

    The model is SAC's: ``model.policy(obs)`` returns ``(mean, log_std)`` of the pre-tanh
    Gaussian (``(B, act_dim)`` each), ``model.value(obs, action)`` returns ``(q1, q2)`` (``(B,
    1)`` or ``(B,)``), plus ``get_actor_params`` and ``get_critic_params``.

    Each ``learn`` takes one critic step on

    ``L_Q = sum_i MSE(Q_i(s, a), r + gamma (1 - done) min_j Q'_j(s', a'))
    + min_q_weight * (logsumexp_{a~mu} Q_i(s, a) - mean Q_i(s, a_data))``

    (the backup has no entropy term, as in the paper's code), where the ``logsumexp`` runs over
    ``num_random`` uniform actions and as many policy actions at ``s`` and at ``s'`` (all
    evaluated at ``s``), each minus its log-density for ``min_q_version=3`` (CQL(H), importance
    sampled) or as they are, with the data action, for ``min_q_version=2`` (CQL(rho)). With
    ``with_lagrange`` the conservative term is ``alpha' * (term - lagrange_thresh)`` and
    ``log alpha'`` takes a gradient step up on it first. Then, if
    ``with_automatic_entropy_tuning``, one step on ``log alpha`` towards an entropy of
    ``-act_dim``, and one actor step on ``mean(alpha log pi(a~|s) - min_i Q_i(s, a~))``, or,
    for the first ``policy_eval_start - 1`` updates, on ``mean(alpha log pi(a~|s) - log
    pi(a_data|s))`` (behaviour cloning). The actor's loss uses the alpha just updated, as the
    paper's code does. Last, a soft target update with ``decay = 1 - tau``.

    The arguments have PARL's names and order; PARL's ``gamma``, ``tau``, ``actor_lr`` and
    ``critic_lr`` have no defaults, here they have those of PARL's CQL benchmark.

    Args:
        model: the actor-critic model.
        gamma: discount factor.
        tau: target update rate (``sync_target`` uses ``decay = 1 - tau``).
        actor_lr: learning rate of the actor (and of ``log alpha``).
        critic_lr: learning rate of the critics (and of ``log alpha'``).
        policy_eval_start: the actor clones the dataset's actions until this many updates.
        with_automatic_entropy_tuning: learn the entropy temperature ``alpha``.
        with_lagrange: learn the weight ``alpha'`` of the conservative term (CQL-Lagrange).
        lagrange_thresh: the gap the Lagrange version aims the conservative term at.
        min_q_version: 3 for CQL(H) with importance sampling, 2 for CQL(rho).
        min_q_weight: weight of the conservative term.
        alpha: the entropy temperature; with ``with_automatic_entropy_tuning`` its initial value
            (PARL always starts the learned one at 1, the default here).
        num_random: actions of each proposal per state in the ``logsumexp`` (PARL: 10).
        temperature: temperature of the ``logsumexp`` (PARL: 1).
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...
    """

    def __init__(
        self,
        model: nn.Module,
        gamma: float = 0.99,
        tau: float = 0.005,
        actor_lr: float = 1e-4,
        critic_lr: float = 3e-4,
        policy_eval_start: int = 40000,
        with_automatic_entropy_tuning: bool = True,
        with_lagrange: bool = False,
        lagrange_thresh: float = 10.0,
        min_q_version: int = 3,
        min_q_weight: float = 5.0,
        alpha: float = 1.0,
        *,
        num_random: int = 10,
        temperature: float = 1.0,
        device: str | torch.device = "auto",
    ) -> None:
        super().__init__(model, gamma, tau, actor_lr, critic_lr, device)
        owner = "CQL"
        self.policy_eval_start = check_int(
            "policy_eval_start", policy_eval_start, low=0, owner=owner
        )
        self.with_automatic_entropy_tuning = check_bool(
            "with_automatic_entropy_tuning", with_automatic_entropy_tuning, owner=owner
        )
        self.with_lagrange = check_bool("with_lagrange", with_lagrange, owner=owner)
        self.lagrange_thresh = check_float("lagrange_thresh", lagrange_thresh, owner=owner)
        if min_q_version not in (2, 3) or isinstance(min_q_version, bool):
            raise ValueError(
                f"CQL: min_q_version must be 3 (CQL(H), importance sampled) or 2 (CQL(rho)), "
                f"got {min_q_version!r}"
            )
        self.min_q_version = int(min_q_version)
        self.min_q_weight = check_float("min_q_weight", min_q_weight, low=0.0, owner=owner)
        initial_alpha = check_float("alpha", alpha, low=0.0, owner=owner)
        self.num_random = check_int("num_random", num_random, low=1, owner=owner)
        self.temperature = check_float(
            "temperature", temperature, low=0.0, low_open=True, owner=owner
        )
        self._fixed_alpha = initial_alpha
        self._current_steps = 0
        if self.with_automatic_entropy_tuning:
            if initial_alpha <= 0.0:
                raise ValueError(
                    "CQL: with with_automatic_entropy_tuning, alpha is the initial temperature "
                    f"and must be > 0, got {alpha!r}"
                )
            self.alpha_model = LogAlpha(initial_alpha).to(self.device)
            self.alpha_optimizer = make_adam(self.alpha_model.parameters(), self.actor_lr)
        if self.with_lagrange:
            self.alpha_prime_model = LogAlpha(1.0).to(self.device)
            self.alpha_prime_optimizer = make_adam(
                self.alpha_prime_model.parameters(), self.critic_lr
            )

    @property
    def current_steps(self) -> int:
        """Updates taken so far (``policy_eval_start`` counts them); set it when resuming."""
        return self._current_steps

    @current_steps.setter
    def current_steps(self, value: int) -> None:
        self._current_steps = check_int("current_steps", value, low=0, owner="CQL")

    @property
    def alpha(self) -> float:
        """The current entropy temperature."""
        if self.with_automatic_entropy_tuning:
            return float(self.alpha_model.log_alpha.detach().exp())
        return self._fixed_alpha

    @property
    def alpha_prime(self) -> float:
        """The current weight of the conservative term under ``with_lagrange`` (else 0)."""
        if not self.with_lagrange:
            return 0.0
        return float(self.alpha_prime_model.log_alpha.detach().exp().clamp(0.0, 1e6))

    def learn(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminal: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One critic step (with ``alpha'`` first under Lagrange), one ``alpha`` step if it is
        learned, one actor step and a soft target update; returns the (detached)
        ``(critic_loss, actor_loss)``.

        Shapes: ``obs``/``next_obs`` ``(B, obs_dim)``, ``action`` ``(B, act_dim)`` in
        ``[-1, 1]``, ``reward``/``terminal`` ``(B,)`` or ``(B, 1)``.
        """
        check_transitions("CQL.learn", obs, action, reward, next_obs, terminal)
        self._current_steps += 1
        critic_loss = self._critic_learn(obs, action, reward, next_obs, terminal)
        actor_loss = self._actor_learn(obs, action)
        self.sync_target()
        return critic_loss, actor_loss

    def _repeated_values(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Both critics at ``num_random`` actions per state: ``actions`` is ``(B * n,
        act_dim)``, state ``b``'s actions in rows ``b * n ... b * n + n - 1``; ``(B, n)`` each."""
        batch = obs.shape[0]
        obs_rep = obs.repeat_interleave(self.num_random, dim=0)
        q1, q2 = self.model.value(obs_rep, actions)
        return q1.reshape(batch, self.num_random), q2.reshape(batch, self.num_random)

    def _critic_learn(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminal: torch.Tensor,
    ) -> torch.Tensor:
        reward, terminal = as_flat(reward), as_flat(terminal).to(reward.dtype)
        batch, act_dim = obs.shape[0], action.shape[-1]
        # The draws from torch's generator come in PARL's order: the next action, the uniform
        # actions, the policy's actions at s, then at s'.
        with torch.no_grad():
            next_action, _ = squashed_gaussian_sample(*self.model.policy(next_obs))
            target_q1, target_q2 = self.target_model.value(next_obs, next_action)
            next_q = torch.min(as_flat(target_q1), as_flat(target_q2))
            target_q = reward + self.gamma * (1.0 - terminal) * next_q
            rows = batch * self.num_random
            random_actions = torch.empty(rows, act_dim, device=obs.device).uniform_(-1.0, 1.0)
            # gradients of the critic loss never reach the actor, so the proposals carry none
            curr_actions, curr_log_pi = squashed_gaussian_sample(
                *self.model.policy(obs.repeat_interleave(self.num_random, dim=0))
            )
            next_actions, next_log_pi = squashed_gaussian_sample(
                *self.model.policy(next_obs.repeat_interleave(self.num_random, dim=0))
            )
        current_q1, current_q2 = (as_flat(q) for q in self.model.value(obs, action))
        td_loss = F.mse_loss(current_q1, target_q) + F.mse_loss(current_q2, target_q)

        q1_rand, q2_rand = self._repeated_values(obs, random_actions)
        # the policy's actions at s' are scored at s, as in the paper's code
        q1_next, q2_next = self._repeated_values(obs, next_actions)
        q1_curr, q2_curr = self._repeated_values(obs, curr_actions)
        if self.min_q_version == 3:
            random_log_density = act_dim * math.log(0.5)  # uniform on [-1, 1]^act_dim
            next_log_pi = next_log_pi.reshape(batch, self.num_random)
            curr_log_pi = curr_log_pi.reshape(batch, self.num_random)
            cat_q1 = torch.cat(
                [q1_rand - random_log_density, q1_next - next_log_pi, q1_curr - curr_log_pi], 1
            )
            cat_q2 = torch.cat(
                [q2_rand - random_log_density, q2_next - next_log_pi, q2_curr - curr_log_pi], 1
            )
        else:
            cat_q1 = torch.cat([q1_rand, current_q1.unsqueeze(1), q1_next, q1_curr], 1)
            cat_q2 = torch.cat([q2_rand, current_q2.unsqueeze(1), q2_next, q2_curr], 1)
        temp, weight = self.temperature, self.min_q_weight
        min_q1_loss = (
            torch.logsumexp(cat_q1 / temp, dim=1).mean() * temp - current_q1.mean()
        ) * weight
        min_q2_loss = (
            torch.logsumexp(cat_q2 / temp, dim=1).mean() * temp - current_q2.mean()
        ) * weight
        if self.with_lagrange:
            log_alpha_prime = self.alpha_prime_model.log_alpha
            alpha_prime = log_alpha_prime.detach().exp().clamp(0.0, 1e6)
            gap = (min_q1_loss + min_q2_loss).detach() - 2.0 * self.lagrange_thresh
            # d/d log(alpha') of -alpha' * gap / 2, set directly (the clamp at 1e6 stops it)
            alpha_prime_grad = -0.5 * alpha_prime * gap * (alpha_prime < 1e6)
            log_alpha_prime.grad = alpha_prime_grad.reshape(log_alpha_prime.shape)
            self.alpha_prime_optimizer.step()
            min_q1_loss = alpha_prime * (min_q1_loss - self.lagrange_thresh)
            min_q2_loss = alpha_prime * (min_q2_loss - self.lagrange_thresh)
        critic_loss = td_loss + min_q1_loss + min_q2_loss
        self._critic_step(critic_loss)
        return critic_loss.detach()

    def _actor_learn(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.model.policy(obs)
        action_pi, log_pi = squashed_gaussian_sample(mean, log_std)
        alpha: torch.Tensor | float = self._fixed_alpha
        if self.with_automatic_entropy_tuning:
            target_entropy = -float(action.shape[-1])
            log_alpha = self.alpha_model.log_alpha
            # d/d log(alpha) of -mean(log_alpha * (log_pi + target_entropy))
            log_alpha.grad = -(log_pi.detach().mean() + target_entropy).reshape(log_alpha.shape)
            self.alpha_optimizer.step()
            alpha = log_alpha.detach().exp()
        if self._current_steps < self.policy_eval_start:
            # behaviour cloning first: the likelihood of the dataset's actions replaces Q
            data_log_prob = squashed_gaussian_log_prob(mean, log_std, action)
            actor_loss = (alpha * log_pi).mean() - data_log_prob.mean()
        else:
            q1_pi, q2_pi = self.model.value(obs, action_pi)
            actor_loss = (alpha * log_pi - torch.min(as_flat(q1_pi), as_flat(q2_pi))).mean()
        self._actor_step(actor_loss)
        return actor_loss.detach()
