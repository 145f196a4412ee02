"""DQN (Mnih et al. 2015, https://doi.org/10.1038/nature14236): Q-learning with a replay memory
and a target network, for discrete actions."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from parl.algorithms.offpolicy import (
    TargetSync,
    as_flat,
    clip_grad_norm,
    make_adam,
    make_target,
)
from parl.core.algorithm import Algorithm
from parl.utils.device import get_device
from parl.validation import check_float

__all__ = ["DQN"]

_LOSSES = ("mse", "huber")


class DQN(Algorithm):
    """Deep Q-network: ``loss = mean(l(Q(s, a) - (r + gamma * (1 - done) * max_a' Q_t(s', a'))))``.

    ``model(obs)`` returns Q-values ``(B, act_dim)``. A dueling network (Wang et al. 2016,
    https://arxiv.org/abs/1511.06581) is just a model whose ``forward`` returns
    ``V(s) + A(s, a) - mean_a A(s, a)``; nothing changes here.

    Args:
        model: the Q network; the target network is a deep copy of it.
        gamma: discount factor.
        lr: learning rate of Adam.
        loss: ``"mse"`` (PARL's) or ``"huber"`` (smooth L1 with delta 1, as in the Nature paper
            and Stable-Baselines3).
        max_grad_norm: clip the gradients' global norm to this value; ``None`` does not clip.
        device: ``"auto"`` (GPU if available), ``"cpu"``, ``"cuda:0"``...
    """

    model_methods = ("forward",)

    def __init__(
        self,
        model: nn.Module,
        gamma: float = 0.99,
        lr: float = 5e-4,
        *,
        loss: str = "mse",
        max_grad_norm: float | None = None,
        device: str | torch.device = "auto",
    ) -> None:
        name = type(self).__name__
        self.gamma = check_float("gamma", gamma, low=0, high=1, owner=name)
        self.lr = check_float("lr", lr, low=0.0, low_open=True, owner=name)
        if loss not in _LOSSES:
            raise ValueError(f"{name}: loss must be one of {_LOSSES}, got {loss!r}")
        self.loss = loss
        self.max_grad_norm = (
            None
            if max_grad_norm is None
            else check_float("max_grad_norm", max_grad_norm, low=0.0, low_open=True, owner=name)
        )
        super().__init__(model, device=get_device(device))
        self.target_model = make_target(self.model)
        self._target_sync = TargetSync(self.model, self.target_model)
        self._params = list(self.model.parameters())
        self.optimizer = make_adam(self._params, self.lr)
        self._last_pred_target: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def td_error(self) -> torch.Tensor | None:
        """``|Q(s, a) - target|`` of the last ``learn`` batch, ``(B,)``: the new priorities for
        a prioritized replay memory (computed on demand, so plain DQN does not pay for it)."""
        if self._last_pred_target is None:
            return None
        pred_value, target = self._last_pred_target
        return (pred_value - target).abs()

    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values of every action: ``(B, obs_dim) -> (B, act_dim)``."""
        return self.model(obs)

    def _next_value(self, next_obs: torch.Tensor) -> torch.Tensor:
        """``max_a' Q_target(s', a')``, ``(B,)``. DDQN overrides this."""
        return self.target_model(next_obs).max(dim=1).values

    def learn(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminal: torch.Tensor,
        weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One gradient step; returns the (detached) loss.

        Shapes: ``obs``/``next_obs`` ``(B, *obs_shape)``; ``action`` integer, ``reward`` and
        ``terminal`` ``(B,)`` or ``(B, 1)`` (PARL's agents pass columns). ``weight`` ``(B,)``:
        importance-sampling weights of a prioritized replay memory (default all ones).
        """
        action = action.reshape(-1, 1).long()
        reward, terminal = as_flat(reward), as_flat(terminal)
        if not (obs.shape[0] == action.shape[0] == reward.shape[0] == terminal.shape[0]):
            raise ValueError(
                f"{type(self).__name__}.learn: obs, action, reward and terminal must hold the "
                f"same batch size, got {obs.shape[0]}, {action.shape[0]}, {reward.shape[0]} and "
                f"{terminal.shape[0]}"
            )
        with torch.no_grad():
            next_value = self._next_value(next_obs)
            target = reward + self.gamma * (1.0 - terminal.to(reward.dtype)) * next_value
        pred_value = self.model(obs).gather(1, action).squeeze(1)
        if self.loss == "mse":
            losses = F.mse_loss(pred_value, target, reduction="none")
        else:
            losses = F.smooth_l1_loss(pred_value, target, reduction="none")
        loss = losses.mean() if weight is None else (as_flat(weight) * losses).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm is not None:
            clip_grad_norm(self._params, self.max_grad_norm)
        self.optimizer.step()
        self._last_pred_target = (pred_value.detach(), target)
        return loss.detach()

    def sync_target(self, decay: float = 0.0) -> None:
        """``target = decay * target + (1 - decay) * model``; the default copies (PARL's DQN)."""
        self._target_sync(check_float("decay", decay, low=0, high=1, owner="sync_target"))
