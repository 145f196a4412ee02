"""Proximal Policy Optimization (Schulman et al. 2017, https://arxiv.org/abs/1707.06347) with
the clipped surrogate objective, for discrete (categorical) and continuous (diagonal Gaussian)
actions, following PARL 2.x's torch API.

The model provides ``value(obs) -> (B, 1) or (B,)`` and ``policy(obs)``: logits ``(B, act_dim)``
for discrete actions, or ``(mean, std)`` (std broadcastable to mean) for continuous ones. It may
also provide ``policy_and_value(obs) -> (policy(obs), value(obs))``: then the update and
``sample`` run the network once for both (a shared trunk once instead of twice, or separate
actor and critic networks stacked into the same operations).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from parl.algorithms.action_dists import (
    categorical_log_prob_entropy,
    categorical_sample,
    gaussian_entropy,
    gaussian_log_prob,
    gaussian_sample,
)
from parl.core.algorithm import Algorithm
from parl.utils.device import get_device
from parl.validation import check_bool, check_float

__all__ = ["PPO", "PPOLearnResult", "clipped_surrogate_loss"]

# the kernel torch's own fused Adam calls (private: PPO falls back to step() if it changed)
_FUSED_ADAM = getattr(torch, "_fused_adam_", None)


class PPOLearnResult(tuple):
    """``(value_loss, action_loss, entropy)`` as PARL's ``PPO.learn`` returns them, plus the
    diagnostics PPO computes on the way: ``approx_kl`` and ``clip_frac``.

    It unpacks into three values like PARL's tuple; the extra fields are attributes.
    """

    approx_kl: float
    clip_frac: float

    def __new__(
        cls,
        value_loss: float,
        action_loss: float,
        entropy: float,
        approx_kl: float = float("nan"),
        clip_frac: float = float("nan"),
    ) -> PPOLearnResult:
        result = super().__new__(cls, (value_loss, action_loss, entropy))
        result.approx_kl = approx_kl
        result.clip_frac = clip_frac
        return result

    def __getnewargs__(self) -> tuple[float, ...]:
        return (*self, self.approx_kl, self.clip_frac)

    @property
    def value_loss(self) -> float:
        return float(self[0])

    @property
    def action_loss(self) -> float:
        return float(self[1])

    @property
    def entropy(self) -> float:
        return float(self[2])

    def __repr__(self) -> str:
        return (
            f"PPOLearnResult(value_loss={self[0]:.6g}, action_loss={self[1]:.6g}, "
            f"entropy={self[2]:.6g}, approx_kl={self.approx_kl:.6g}, "
            f"clip_frac={self.clip_frac:.6g})"
        )


def clipped_surrogate_loss(
    ratio: torch.Tensor, advantage: torch.Tensor, clip_param: float
) -> torch.Tensor:
    """``mean(max(-A r, -A clip(r, 1 - eps, 1 + eps)))``, the paper's ``L^CLIP`` negated.

    The clipped term has no gradient where it is the smaller one (there ``clip(r) != r``) and
    equals the unclipped one elsewhere, so the minimum is taken with the clipped term detached:
    the same loss and the same gradient as ``-torch.min(A r, A clip(r)).mean()``, with a
    quarter of its backward operations (``torch.min`` splits ties, ``clamp`` masks its range).
    """
    pg_loss1 = advantage * ratio
    with torch.no_grad():
        pg_loss2 = advantage * ratio.clamp(1.0 - clip_param, 1.0 + clip_param)
        unclipped = pg_loss1 <= pg_loss2
    return -torch.where(unclipped, pg_loss1, pg_loss2).mean()


class PPO(Algorithm):
    """PPO-clip with PARL's defaults (those of its Atari configuration).

    Args:
        model: a ``parl.Model`` with ``value(obs)`` and ``policy(obs)``.
        clip_param: epsilon of the clipped ratio (and of the clipped value loss).
        value_loss_coef: weight of the value loss (c1 in the paper).
        entropy_coef: weight of the entropy bonus (c2 in the paper).
        initial_lr: Adam learning rate (``learn(..., lr=x)`` changes it).
        eps: Adam epsilon (1e-5, as in openai baselines, not torch's 1e-8).
        max_grad_norm: global gradient norm clip.
        use_clipped_value_loss: clip the value update around the old value (baselines' trick).
        norm_adv: normalise advantages per minibatch.
        continuous_action: Gaussian policy on ``(mean, std)`` instead of a categorical one.
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...; the model is moved there.
    """

    model_methods = ("value", "policy")
    model: Any  # a parl.Model with the methods above (typed loosely: they are user-defined)

    def __init__(
        self,
        model: nn.Module,
        clip_param: float = 0.1,
        value_loss_coef: float = 0.5,
        entropy_coef: float = 0.01,
        initial_lr: float = 2.5e-4,
        eps: float = 1e-5,
        max_grad_norm: float = 0.5,
        use_clipped_value_loss: bool = True,
        norm_adv: bool = True,
        continuous_action: bool = False,
        *,
        device: str | torch.device = "auto",
    ) -> None:
        owner = "PPO"
        self.clip_param = check_float("clip_param", clip_param, low=0.0, low_open=True, owner=owner)
        self.value_loss_coef = check_float("value_loss_coef", value_loss_coef, low=0, owner=owner)
        self.entropy_coef = check_float("entropy_coef", entropy_coef, owner=owner)
        self.initial_lr = check_float("initial_lr", initial_lr, low=0, low_open=True, owner=owner)
        self.eps = check_float("eps", eps, low=0.0, owner=owner)
        self.max_grad_norm = check_float(
            "max_grad_norm", max_grad_norm, low=0, low_open=True, owner=owner
        )
        self.use_clipped_value_loss = check_bool(
            "use_clipped_value_loss", use_clipped_value_loss, owner=owner
        )
        self.norm_adv = check_bool("norm_adv", norm_adv, owner=owner)
        self.continuous_action = check_bool("continuous_action", continuous_action, owner=owner)
        super().__init__(model, device=get_device(device))
        # The fused kernel updates all parameters in one call: 25% faster steps for small nets.
        fused = self.device.type in ("cpu", "cuda")
        self._one_pass = callable(getattr(self.model, "policy_and_value", None))
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(
            self._params, lr=self.initial_lr, eps=self.eps, fused=fused
        )

    # -- the policy ----------------------------------------------------------------------------
    # Closed forms (parl.algorithms.action_dists) instead of torch.distributions objects: on
    # PPO's small minibatches building those objects cost as much as the network itself.
    def _policy_and_value(self, obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        """``(model.policy(obs), V(obs) (B,))``, from one pass when the model offers
        ``policy_and_value`` (a shared trunk is then run once, not twice)."""
        if self._one_pass:
            policy, value = self.model.policy_and_value(obs)
        else:
            policy, value = self.model.policy(obs), self.model.value(obs)
        return policy, self._squeeze_value(value)

    def _log_prob_entropy(
        self, policy: Any, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log pi(action), entropy)``, both ``(B,)``, from the output of ``model.policy``;
        the entropy is differentiable only where the loss uses it (``entropy_coef != 0``)."""
        if self.continuous_action:
            mean, std = policy
            log_std = std.log()
            return gaussian_log_prob(mean, std, action, log_std), gaussian_entropy(mean, log_std)
        return categorical_log_prob_entropy(policy, action, self.entropy_coef != 0.0)

    def _value(self, obs: torch.Tensor) -> torch.Tensor:
        return self._squeeze_value(self.model.value(obs))

    @staticmethod
    def _squeeze_value(value: torch.Tensor) -> torch.Tensor:
        return value.squeeze(-1) if value.dim() > 1 and value.shape[-1] == 1 else value

    def _as_action(self, action: torch.Tensor) -> torch.Tensor:
        """Discrete actions as int64 of shape (B,) (PARL's storage keeps them as float32)."""
        if self.continuous_action:
            return action
        if action.dim() > 1 and action.shape[-1] == 1:
            action = action.squeeze(-1)
        return action if action.dtype == torch.int64 else action.long()

    @torch.inference_mode()
    def sample(
        self, obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(value (B,), action, log_prob (B,), entropy (B,))`` with the action drawn from the
        policy (torch's generator, the same draw as ``torch.distributions``: ``torch.manual_seed``
        fixes it)."""
        policy, value = self._policy_and_value(obs)
        if self.continuous_action:
            mean, std = policy
            action = gaussian_sample(mean, std)
            log_std = std.log()
            log_prob = gaussian_log_prob(mean, std, action, log_std)
            return value, action, log_prob, gaussian_entropy(mean, log_std)
        action = categorical_sample(policy)
        log_prob, entropy = categorical_log_prob_entropy(policy, action)
        return value, action, log_prob, entropy

    @torch.inference_mode()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy action: the mean (continuous) or the most likely action (discrete, (B,))."""
        if self.continuous_action:
            mean, _ = self.model.policy(obs)
            return mean
        return self.model.policy(obs).argmax(dim=-1)

    @torch.inference_mode()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(obs)``, shape ``(B,)``."""
        return self._value(obs)

    # -- the update ----------------------------------------------------------------------------
    def learn(
        self,
        batch_obs: torch.Tensor,
        batch_action: torch.Tensor,
        batch_value: torch.Tensor,
        batch_return: torch.Tensor,
        batch_logprob: torch.Tensor,
        batch_adv: torch.Tensor,
        lr: float | None = None,
    ) -> PPOLearnResult:
        """One Adam step on a minibatch; returns ``(value_loss, action_loss, entropy)`` with
        ``.approx_kl`` and ``.clip_frac``.

        Shapes: ``batch_obs (B, *obs_shape)``, ``batch_action (B,)`` or ``(B, act_dim)``, the
        others ``(B,)``: the values, returns (critic targets) and log-probabilities recorded when
        sampling, and the advantages. ``lr`` sets the learning rate from now on; 0 is allowed
        (the last value of PARL's ``LinearDecayScheduler``, which its PPO agent passes on its
        last update: the step then leaves the weights as they are).
        """
        stats = self.learn_tensor(
            batch_obs, batch_action, batch_value, batch_return, batch_logprob, batch_adv, lr
        )
        return PPOLearnResult(*stats.tolist())

    def learn_tensor(
        self,
        batch_obs: torch.Tensor,
        batch_action: torch.Tensor,
        batch_value: torch.Tensor,
        batch_return: torch.Tensor,
        batch_logprob: torch.Tensor,
        batch_adv: torch.Tensor,
        lr: float | None = None,
    ) -> torch.Tensor:
        """:meth:`learn` without the conversion to Python floats: the statistics as one detached
        tensor ``[value_loss, action_loss, entropy, approx_kl, clip_frac]``, so that a caller
        running many minibatches can sum them on the device and read them once (one sync per
        update on a GPU instead of one per minibatch)."""
        if lr is not None:
            lr = check_float("lr", lr, low=0.0, owner="PPO.learn")
        if self.norm_adv and batch_adv.numel() < 2:
            raise ValueError(self._norm_adv_error(batch_adv.numel()))
        policy, newvalue = self._policy_and_value(batch_obs)
        newlogprob, entropy_b = self._log_prob_entropy(policy, self._as_action(batch_action))
        if newvalue.dim() != 1:
            newvalue = newvalue.reshape(-1)
        entropy = entropy_b.mean()

        logratio = newlogprob - batch_logprob
        ratio = logratio.exp()
        with torch.no_grad():
            # k3 estimator of KL(old || new), http://joschu.net/blog/kl-approx.html
            ratio_m1 = ratio - 1.0
            approx_kl = (ratio_m1 - logratio).mean()
            clip_frac = (ratio_m1.abs() > self.clip_param).float().mean()

        mb_adv = batch_adv
        if self.norm_adv:
            std, mean = torch.std_mean(mb_adv)
            mb_adv = (mb_adv - mean) / (std + 1e-8)
        pg_loss = clipped_surrogate_loss(ratio, mb_adv, self.clip_param)

        value_loss = self._value_loss(newvalue, batch_value, batch_return)
        loss = pg_loss + self.value_loss_coef * value_loss
        if self.entropy_coef != 0.0:
            loss = loss - self.entropy_coef * entropy

        for param in self._params:  # zero_grad(set_to_none=True), without its per-call hooks
            param.grad = None
        loss.backward()
        self.optimizer_step(lr)
        return torch.stack([value_loss, pg_loss, entropy, approx_kl, clip_frac]).detach()

    @staticmethod
    def _norm_adv_error(size: int) -> str:
        """The message for a minibatch too small to normalise its advantages over."""
        return (
            f"PPO.learn: norm_adv=True normalises the advantages by their standard deviation "
            f"over the minibatch, which needs at least 2 rows, got {size} (the update would "
            f"make every weight NaN); use larger minibatches (fewer of them) or norm_adv=False"
        )

    def optimizer_step(self, lr: float | None = None, clip_grad: bool = True) -> None:
        """What :meth:`learn` does after its backward pass: clip the gradients held in the
        parameters' ``.grad`` to ``max_grad_norm`` (global norm; ``clip_grad=False`` when the
        caller did) and take one Adam step, at ``lr`` from now on if given. For a caller that
        computes PPO's gradients another way (the PPO example's numpy update) and wants the
        same optimizer, state and checkpoints."""
        if lr is not None:
            lr = check_float("lr", lr, low=0.0, owner="PPO.optimizer_step")
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        if clip_grad:
            self._clip_grad_norm()
        self._adam_step()

    def _clip_grad_norm(self) -> None:
        """``clip_grad_norm_(params, max_grad_norm)`` in four multi-tensor calls: its generic
        form groups the gradients by device and dtype in Python on every call, which is a
        large share of a small network's step."""
        grads = [p.grad for p in self._params if p.grad is not None]
        if not grads:
            return
        norms = torch._foreach_norm(grads)
        total = torch.linalg.vector_norm(torch.stack(norms))
        coef = (self.max_grad_norm / (total + 1e-6)).clamp_(max=1.0)
        torch._foreach_mul_(grads, coef)

    _direct_adam = True  # torch's private fused-Adam kernel takes the arguments used below

    def _adam_step(self) -> None:
        """``self.optimizer.step()``; once Adam's state exists, as the one fused kernel call that
        torch's fused Adam makes, without the per-call Python of ``Optimizer.step`` (hooks,
        grouping by device, profiling records: a third of the step on a small network). The
        state stays in ``self.optimizer`` (``state_dict()`` and ``load_state_dict()`` as
        usual); any setting the kernel call does not cover goes through ``step()``."""
        opt = self.optimizer
        group = opt.param_groups[0]
        params = [p for p in self._params if p.grad is not None]  # as step(): others unchanged
        states = [opt.state.get(p) for p in params]
        fused_adam = _FUSED_ADAM if PPO._direct_adam else None
        if (
            fused_adam is None
            or len(opt.param_groups) != 1
            or not group.get("fused")
            or group["amsgrad"]
            or group["maximize"]
            or group.get("decoupled_weight_decay")
            or not params
            or any(not state for state in states)
            or len(group["params"]) != len(self._params)
        ):
            opt.step()
            return
        steps = [state["step"] for state in states]  # type: ignore[index]
        torch._foreach_add_(steps, 1)
        beta1, beta2 = group["betas"]
        try:
            self._fused_adam(fused_adam, params, states, steps, group, beta1, beta2)
        except (TypeError, RuntimeError):  # a torch whose private kernel takes other arguments
            torch._foreach_sub_(steps, 1)
            PPO._direct_adam = False
            opt.step()

    @staticmethod
    def _fused_adam(
        fused_adam: Any,
        params: list[torch.Tensor],
        states: list[Any],
        steps: list[torch.Tensor],
        group: dict[str, Any],
        beta1: float,
        beta2: float,
    ) -> None:
        fused_adam(
            params,
            [p.grad for p in params],
            [state["exp_avg"] for state in states],
            [state["exp_avg_sq"] for state in states],
            [],
            steps,
            amsgrad=False,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )

    def _value_loss(
        self, newvalue: torch.Tensor, oldvalue: torch.Tensor, returns: torch.Tensor
    ) -> torch.Tensor:
        """``0.5 * (V - R)^2``, or with the update clipped to ``clip_param`` around the old value
        (openai baselines' ppo2) the larger of the clipped and unclipped errors."""
        if not self.use_clipped_value_loss:
            return 0.5 * F.mse_loss(newvalue, returns)  # one operation forward and backward
        unclipped = (newvalue - returns).pow(2)
        clipped_value = oldvalue + (newvalue - oldvalue).clamp(-self.clip_param, self.clip_param)
        clipped = (clipped_value - returns).pow(2)
        return 0.5 * torch.max(unclipped, clipped).mean()
