"""Multi-Agent PPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative
Multi-Agent Games", https://arxiv.org/abs/2103.01955), following PARL 2.x's torch API.

Each agent has its own ``MAPPO``: a decentralised actor ``model.policy(obs)`` that sees the
agent's own observation, and a centralised critic ``model.value(cent_obs)`` that sees the
observations of all agents. The actor and the critic have separate Adam optimizers and take
one step each per :meth:`MAPPO.learn`, on the paper's losses:

* policy: PPO's clipped surrogate ``-min(r A, clip(r, 1 - eps, 1 + eps) A)`` minus
  ``entropy_coef`` times the entropy, both averaged over the active steps (``active_masks``:
  steps where the agent was still alive);
* value: the larger of the Huber losses of ``V - R`` and of the clipped ``V_old + clip(V -
  V_old, -eps, eps) - R`` (clipping as in openai baselines' ppo2), with the targets ``R``
  normalised by :class:`~parl.algorithms.popart.PopArt` when ``use_popart`` (the paper's
  suggestion 1), averaged over the active steps when ``use_value_active_masks`` (suggestion 5).

Actions are discrete (``policy(obs)`` -> logits ``(B, n)``), multi-discrete (a list of logits,
one per action component; each component has its own ratio and the clipped terms are summed
over components, as in the paper's code) or, with ``continuous_action=True``, continuous
(``policy(obs)`` -> ``(mean, std)``, a diagonal Gaussian; PARL's MAPPO has no continuous
actions, so that part follows the paper's code: one ratio for the whole action vector).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

from parl.algorithms.action_dists import (
    categorical_log_prob_entropy,
    categorical_sample,
    gaussian_entropy,
    gaussian_log_prob,
    gaussian_sample,
)
from parl.algorithms.finite import check_finite_inputs, check_finite_step
from parl.algorithms.popart import PopArt
from parl.core.algorithm import Algorithm
from parl.utils.device import get_device
from parl.validation import check_bool, check_float, keyword_aliases

__all__ = ["MAPPO", "MAPPOLearnResult", "PopArt", "huber_loss"]


def huber_loss(error: torch.Tensor, delta: float) -> torch.Tensor:
    """Elementwise Huber loss: ``e^2 / 2`` where ``|e| <= delta``, else ``delta (|e| -
    delta / 2)``.

    PARL's (and the paper code's) version weights the linear part by ``e > delta`` instead of
    ``|e| > delta``, so an error below ``-delta`` costs 0 there and gets no gradient; here it
    costs what a positive error of the same size does.
    """
    abs_error = error.abs()
    quadratic = error**2 / 2
    linear = delta * (abs_error - delta / 2)
    return torch.where(abs_error <= delta, quadratic, linear)


class MAPPOLearnResult(NamedTuple):
    """``(value_loss, policy_loss, dist_entropy)`` of one ``MAPPO.learn``, as detached
    0-d tensors (``.item()`` gives the float, as PARL's agents read them)."""

    value_loss: torch.Tensor
    policy_loss: torch.Tensor
    dist_entropy: torch.Tensor


def _masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``values`` over the rows whose ``mask`` is 1 (all rows without a mask); both
    ``values`` and ``mask`` are ``(B, 1)``."""
    if mask is None:
        return values.mean()
    return (values * mask).sum() / mask.sum()


class MAPPO(Algorithm):
    """MAPPO for one agent, with the defaults of the paper's particle-world runs.

    Args:
        model: a ``parl.Model`` with ``policy(obs)``, ``value(cent_obs) -> (B, 1)`` and two
            sub-modules ``actor`` and ``critic`` whose parameters the two optimizers update
            (with ``use_popart``, ``critic.v_out`` is the critic's last ``nn.Linear(hidden,
            1)``, which PopArt rescales). ``model.actor.multi_discrete`` (PARL's flag), when
            set, says whether ``policy`` returns a list of logits, one per action component.
        clip_param: epsilon of the clipped ratio and of the clipped value update.
        value_loss_coef: weight of the value loss (c1 in the PPO paper).
        entropy_coef: weight of the entropy bonus (c2 in the PPO paper).
        initial_lr: learning rate of both Adam optimizers.
        huber_delta: where the value loss turns from quadratic to linear.
        eps: Adam's epsilon; ``None``: torch's default (1e-8).
        max_grad_norm: global gradient norm clip, applied to the actor and to the critic
            separately; ``None``: no clipping.
        use_popart: normalise the value targets with :class:`PopArt`.
        use_value_active_masks: average the value loss over the active steps only (when
            ``learn`` gets ``active_masks``).
        continuous_action: ``policy(obs)`` returns ``(mean, std)`` of a Gaussian instead of
            logits.
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...; the model is moved there.
    """

    model_methods = ("policy", "value")
    model: Any  # a parl.Model with the methods above (typed loosely: they are user-defined)

    def __init__(
        self,
        model: nn.Module,
        clip_param: float = 0.2,
        value_loss_coef: float = 1.0,
        entropy_coef: float = 0.01,
        initial_lr: float = 7e-4,
        huber_delta: float = 10.0,
        eps: float | None = 1e-5,
        max_grad_norm: float | None = 10.0,
        use_popart: bool = True,
        use_value_active_masks: bool = True,
        *,
        continuous_action: bool = False,
        device: str | torch.device = "auto",
    ) -> None:
        owner = "MAPPO"
        self.clip_param = check_float("clip_param", clip_param, low=0.0, low_open=True, owner=owner)
        self.value_loss_coef = check_float("value_loss_coef", value_loss_coef, low=0, owner=owner)
        self.entropy_coef = check_float("entropy_coef", entropy_coef, owner=owner)
        self.lr = check_float("initial_lr", initial_lr, low=0, low_open=True, owner=owner)
        self.huber_delta = check_float(
            "huber_delta", huber_delta, low=0, low_open=True, owner=owner
        )
        self.eps = None if eps is None else check_float("eps", eps, low=0.0, owner=owner)
        self.max_grad_norm = (
            None
            if max_grad_norm is None
            else check_float("max_grad_norm", max_grad_norm, low=0, low_open=True, owner=owner)
        )
        self.use_popart = check_bool("use_popart", use_popart, owner=owner)
        self.use_value_active_masks = check_bool(
            "use_value_active_masks", use_value_active_masks, owner=owner
        )
        self.continuous_action = check_bool("continuous_action", continuous_action, owner=owner)
        super().__init__(model, device=get_device(device))
        actor, critic = (self._submodule(name) for name in ("actor", "critic"))
        # PARL's models say whether their policy is multi-discrete; None: told by its output
        flag = getattr(actor, "multi_discrete", None)
        self.multi_discrete: bool | None = None if flag is None else bool(flag)

        self.value_normalizer: PopArt | None = None
        if self.use_popart:
            v_out = getattr(critic, "v_out", None)
            if not (isinstance(v_out, nn.Linear) and v_out.out_features == 1):
                raise TypeError(
                    f"MAPPO(use_popart=True) rescales model.critic.v_out, the critic's last "
                    f"layer, which must be an nn.Linear(hidden, 1); {type(critic).__name__} "
                    f"has v_out = {type(v_out).__name__}. Name that layer v_out, or pass "
                    "use_popart=False"
                )
            self.value_normalizer = PopArt(v_out.weight, v_out.bias)
        # torch's fused Adam: one kernel for all parameters instead of a dozen ops per tensor
        adam: dict[str, Any] = {"lr": self.lr, "fused": self.device.type in ("cpu", "cuda")}
        if self.eps is not None:
            adam["eps"] = self.eps
        self.actor_optimizer = torch.optim.Adam(actor.parameters(), **adam)
        self.critic_optimizer = torch.optim.Adam(critic.parameters(), **adam)
        self._actor_params = list(actor.parameters())
        self._critic_params = list(critic.parameters())

    def _submodule(self, name: str) -> nn.Module:
        module = getattr(self.model, name, None)
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"MAPPO needs model.{name}, an nn.Module holding the {name}'s parameters (it has "
                f"its own optimizer), but {type(self.model).__name__}.{name} is "
                f"{type(module).__name__}; build the policy network as self.actor and the "
                "value network as self.critic"
            )
        return module

    # -- the policy ----------------------------------------------------------------------------
    def _heads(self, policy: Any) -> list[torch.Tensor]:
        """The logits of each action component: one for a discrete action space."""
        if isinstance(policy, torch.Tensor):
            return [policy]
        if (
            isinstance(policy, list | tuple)
            and all(isinstance(p, torch.Tensor) for p in policy)
            and self.multi_discrete is not False
        ):
            return list(policy)
        raise TypeError(
            f"MAPPO: model.policy(obs) must return logits (B, n), or a list of them (one per "
            f"component of a multi-discrete action, with model.actor.multi_discrete True or "
            f"unset), got {type(policy).__name__}; a Gaussian policy returning (mean, std) "
            "needs continuous_action=True"
        )

    def _gaussian(self, policy: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not (isinstance(policy, tuple | list) and len(policy) == 2):
            raise TypeError(
                f"MAPPO(continuous_action=True): model.policy(obs) must return (mean, std), "
                f"got {type(policy).__name__}"
            )
        mean, std = policy
        return mean, torch.as_tensor(std, device=mean.device).expand_as(mean)

    @torch.no_grad()
    def sample(
        self, cent_obs: torch.Tensor, obs: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(values (B, 1), actions, log_probs)`` for a batch of the agent's observations
        ``obs (B, obs_dim)`` and the centralised ones ``cent_obs (B, cent_obs_dim)``.

        Actions are int64 ``(B, 1)`` (discrete) or ``(B, k)`` (k components), or float ``(B,
        d)`` (continuous); ``log_probs`` are ``(B, 1)``, or ``(B, k)`` for k components.
        ``deterministic``: the most likely action (the mean of a Gaussian). Draws use torch's
        generator (``torch.manual_seed`` fixes them).
        """
        _check_batch(cent_obs, "cent_obs", obs, "obs", "MAPPO.sample")
        actions, log_probs = self._act(self.model.policy(obs), deterministic)
        return self.model.value(cent_obs), actions, log_probs

    def _act(self, policy: Any, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        if self.continuous_action:
            mean, std = self._gaussian(policy)
            action = mean.clone() if deterministic else gaussian_sample(mean, std)
            return action, gaussian_log_prob(mean, std, action).unsqueeze(-1)
        actions, log_probs = [], []
        for logits in self._heads(policy):
            action = logits.argmax(dim=-1) if deterministic else categorical_sample(logits)
            log_prob, _ = categorical_log_prob_entropy(logits, action, entropy_grad=False)
            actions.append(action.unsqueeze(-1))
            log_probs.append(log_prob.unsqueeze(-1))
        return torch.cat(actions, dim=-1), torch.cat(log_probs, dim=-1)

    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy actions for ``obs (B, obs_dim)``, shaped as :meth:`sample`'s."""
        return self._act(self.model.policy(obs), deterministic=True)[0]

    @torch.no_grad()
    def value(self, cent_obs: torch.Tensor) -> torch.Tensor:
        """``V(cent_obs)``, shape ``(B, 1)`` (normalised by PopArt when ``use_popart``)."""
        return self.model.value(cent_obs)

    def _log_probs_entropy(
        self, policy: Any, actions: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log pi(actions) (B, k), mean entropy over active rows)``; for k components the
        entropy is the mean of the components' entropies."""
        if self.continuous_action:
            mean, std = self._gaussian(policy)
            if actions.shape != mean.shape:
                raise ValueError(
                    f"MAPPO.learn: actions have shape {tuple(actions.shape)}, but the policy's "
                    f"mean has {tuple(mean.shape)}; pass the (B, action_dim) actions sample "
                    "returned"
                )
            log_std = std.log()
            log_prob = gaussian_log_prob(mean, std, actions, log_std).unsqueeze(-1)
            entropy = gaussian_entropy(mean, log_std).unsqueeze(-1)
            return log_prob, _masked_mean(entropy, mask)
        heads = self._heads(policy)
        if actions.dim() == 1:
            actions = actions.unsqueeze(-1)
        if actions.shape[-1] != len(heads):
            raise ValueError(
                f"MAPPO.learn: actions have shape {tuple(actions.shape)}, one column per action "
                f"component is expected, and model.policy returns {len(heads)} component(s); "
                f"pass the (B, {len(heads)}) actions sample returned"
            )
        if actions.is_floating_point() and not torch.equal(actions, actions.round()):
            # .long() would truncate them into other actions than were taken
            raise ValueError("MAPPO.learn: discrete actions must hold integer action indices")
        actions = actions.long()  # rollout buffers often store them as floats
        for i, logits in enumerate(heads):
            outside = (actions[:, i] < 0) | (actions[:, i] >= logits.shape[-1])
            if bool(outside.any()):
                raise ValueError(
                    f"MAPPO.learn: actions[:, {i}] holds indices outside [0, "
                    f"{logits.shape[-1]}): {actions[:, i][outside].unique().tolist()}"
                )
        log_probs, entropies = [], []
        for i, logits in enumerate(heads):
            log_prob, entropy = categorical_log_prob_entropy(logits, actions[:, i])
            log_probs.append(log_prob.unsqueeze(-1))
            entropies.append(_masked_mean(entropy.unsqueeze(-1), mask))
        return torch.cat(log_probs, dim=-1), sum(entropies[1:], entropies[0]) / len(entropies)

    # -- the update ----------------------------------------------------------------------------
    @keyword_aliases(
        share_obs_batch="share_obs",
        obs_batch="obs",
        actions_batch="actions",
        value_preds_batch="value_preds",
        return_batch="returns",
        old_action_log_probs_batch="old_log_probs",
        active_masks_batch="active_masks",
    )
    def learn(
        self,
        share_obs: torch.Tensor,
        obs: torch.Tensor,
        actions: torch.Tensor,
        value_preds: torch.Tensor,
        returns: torch.Tensor,
        old_log_probs: torch.Tensor,
        adv_targ: torch.Tensor,
        active_masks: torch.Tensor | None = None,
    ) -> MAPPOLearnResult:
        """One actor step and one critic step on a minibatch of B steps.

        Shapes: ``share_obs (B, cent_obs_dim)``, ``obs (B, obs_dim)``, ``actions`` and
        ``old_log_probs`` as :meth:`sample` returned them, ``value_preds`` (the critic's outputs
        when sampling, normalised if ``use_popart``), ``returns`` (the targets, unnormalised),
        ``adv_targ`` (the advantages) and ``active_masks`` (1 where the agent was active) all
        ``(B, 1)`` (``(B,)`` is taken as a column). Without ``active_masks`` every step counts.

        Returns ``(value_loss, policy_loss, dist_entropy)`` as detached 0-d tensors.
        """
        owner = "MAPPO.learn"
        _check_batch(share_obs, "share_obs", obs, "obs", owner)
        batch = obs.shape[0]
        value_preds, returns, adv_targ = (
            _column(t, name, batch, owner)
            for t, name in (
                (value_preds, "value_preds"),
                (returns, "returns"),
                (adv_targ, "adv_targ"),
            )
        )
        mask = None if active_masks is None else _column(active_masks, "active_masks", batch, owner)
        _check_rows(actions, "actions", batch, owner)
        _check_rows(old_log_probs, "old_log_probs", batch, owner)
        inputs = {
            "share_obs": share_obs,
            "obs": obs,
            "actions": actions,
            "value_preds": value_preds,
            "returns": returns,
            "old_log_probs": old_log_probs,
            "adv_targ": adv_targ,
        }
        if mask is not None:
            inputs["active_masks"] = mask
        check_finite_inputs(owner, inputs)

        policy = self.model.policy(obs)
        log_probs, dist_entropy = self._log_probs_entropy(policy, actions, mask)
        if old_log_probs.dim() == 1:
            old_log_probs = old_log_probs.unsqueeze(-1)
        if old_log_probs.shape != log_probs.shape:
            raise ValueError(
                f"{owner}: old_log_probs have shape {tuple(old_log_probs.shape)}, but the "
                f"policy gives log-probabilities of shape {tuple(log_probs.shape)}; pass the "
                "log_probs sample returned with these actions"
            )
        values = self.model.value(share_obs)

        # actor: the clipped surrogate, summed over action components, averaged over active rows
        ratio = torch.exp(log_probs - old_log_probs)
        pg_loss1 = ratio * adv_targ
        pg_loss2 = torch.clamp(ratio, 1.0 - self.clip_param, 1.0 + self.clip_param) * adv_targ
        surrogate = torch.sum(torch.min(pg_loss1, pg_loss2), dim=-1, keepdim=True)
        policy_loss = _masked_mean(-surrogate, mask)
        actor_loss = policy_loss - dist_entropy * self.entropy_coef
        check_finite_step(owner, "the actor's loss", actor_loss)

        # critic: the values were computed before PopArt moves its statistics, as in the paper;
        # its loss is checked before the actor steps, so that a refused update moves nothing
        value_loss = self._value_loss_or_nothing(values, value_preds, returns, mask, owner)
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self._clip(self._actor_params)
        self.actor_optimizer.step()
        self.critic_optimizer.zero_grad()
        (value_loss * self.value_loss_coef).backward()
        self._clip(self._critic_params)
        self.critic_optimizer.step()
        return MAPPOLearnResult(value_loss.detach(), policy_loss.detach(), dist_entropy.detach())

    def _value_loss_or_nothing(
        self,
        values: torch.Tensor,
        value_preds: torch.Tensor,
        returns: torch.Tensor,
        mask: torch.Tensor | None,
        owner: str,
    ) -> torch.Tensor:
        """:meth:`cal_value_loss`, or ``FloatingPointError`` with PopArt's statistics and the
        critic's output layer (which its update rescales) put back as they were."""
        popart = self.value_normalizer
        # clones, not deepcopy: this runs every update, and deepcopy costs ten times as much
        kept = (
            None
            if popart is None
            else {name: t.detach().clone() for name, t in popart.state_dict().items()}
        )
        value_loss = self.cal_value_loss(values, value_preds, returns, mask)
        try:
            check_finite_step(owner, "the value loss", value_loss)
        except FloatingPointError:
            if popart is not None and kept is not None:
                popart.load_state_dict(kept)
            raise
        return value_loss

    def _clip(self, params: list[nn.Parameter]) -> None:
        if self.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(params, self.max_grad_norm)

    @keyword_aliases(
        value_preds_batch="value_preds", return_batch="returns", active_masks_batch="active_masks"
    )
    def cal_value_loss(
        self,
        values: torch.Tensor,
        value_preds: torch.Tensor,
        returns: torch.Tensor,
        active_masks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The critic's loss: ``max(huber(R - V), huber(R - V_clipped))`` averaged over the
        (active) rows, with ``R`` normalised by PopArt after folding it into the statistics.

        Args:
            values: ``V(share_obs) (B, 1)`` from the current critic, with its graph.
            value_preds: the critic's outputs when the data were sampled ``(B, 1)``.
            returns: the unnormalised targets ``(B, 1)``.
            active_masks: ``(B, 1)``, 1 where the agent was active; ``None``: all rows.
        """
        value_pred_clipped = value_preds + (values - value_preds).clamp(
            -self.clip_param, self.clip_param
        )
        if self.value_normalizer is not None:
            self.value_normalizer.update(returns)
            targets = self.value_normalizer.normalize(returns)
        else:
            targets = returns
        error_clipped = targets - value_pred_clipped
        error_original = targets - values
        value_loss = torch.max(
            huber_loss(error_original, self.huber_delta),
            huber_loss(error_clipped, self.huber_delta),
        )
        return _masked_mean(value_loss, active_masks if self.use_value_active_masks else None)


# -- input checks -------------------------------------------------------------------------------
def _check_tensor(tensor: object, name: str, owner: str) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{owner}: {name} must be a torch.Tensor, got {type(tensor).__name__}; an agent "
            "converts numpy arrays with agent.to_tensor"
        )
    return tensor


def _check_batch(
    cent: torch.Tensor, cent_name: str, obs: torch.Tensor, name: str, owner: str
) -> None:
    """``cent`` and ``obs`` are batches with the same number of rows."""
    for tensor, label in ((cent, cent_name), (obs, name)):
        _check_tensor(tensor, label, owner)
        if tensor.dim() < 2:
            raise ValueError(
                f"{owner}: {label} must be a batch (B, dim), got shape {tuple(tensor.shape)}; "
                "add the batch axis (x[None]) for a single step"
            )
    if cent.shape[0] != obs.shape[0]:
        raise ValueError(
            f"{owner}: {cent_name} has {cent.shape[0]} rows and {name} {obs.shape[0]}; both hold "
            f"one row per step of this agent (shapes {tuple(cent.shape)} and {tuple(obs.shape)})"
        )


def _check_rows(tensor: torch.Tensor, name: str, batch: int, owner: str) -> None:
    _check_tensor(tensor, name, owner)
    if tensor.dim() == 0 or tensor.shape[0] != batch:
        raise ValueError(
            f"{owner}: {name} has shape {tuple(tensor.shape)}, but obs has {batch} rows; pass "
            f"one row per step"
        )


def _column(tensor: torch.Tensor, name: str, batch: int, owner: str) -> torch.Tensor:
    """``tensor`` as a ``(B, 1)`` column: ``(B,)`` gets the axis, any other shape is an error
    (a ``(B,)`` against a ``(B, 1)`` would broadcast into a silent ``(B, B)`` loss)."""
    _check_tensor(tensor, name, owner)
    if tensor.shape == (batch, 1):
        return tensor
    if tensor.shape == (batch,):
        return tensor.unsqueeze(-1)
    raise ValueError(
        f"{owner}: {name} must have shape ({batch}, 1) (one value per row of obs), got "
        f"{tuple(tensor.shape)}"
    )
