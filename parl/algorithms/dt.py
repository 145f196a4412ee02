"""Decision Transformer (Chen et al. 2021, https://arxiv.org/abs/2106.01345): offline RL as
sequence modelling. A causal transformer reads returns-to-go, states and actions and is trained
to predict each action, the way a language model predicts the next word."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import torch
from torch import nn

from parl.core.algorithm import Algorithm
from parl.utils.device import get_device
from parl.validation import check_float, check_int

__all__ = ["DecisionTransformer", "warmup_factor"]


def warmup_factor(step: int, warmup_steps: int) -> float:
    """The learning rate's factor at update ``step`` (from 0): ``min((step + 1) / warmup, 1)``.

    Args:
        step: updates done before this one.
        warmup_steps: updates over which the rate grows linearly to its full value.
    """
    return min((step + 1) / warmup_steps, 1.0)


class DecisionTransformer(Algorithm):
    """Decision Transformer's training step: masked mean squared error on actions.

    Each ``learn`` predicts the actions of a batch of trajectory windows, takes the mean squared
    error over the real (unpadded) steps, clips the gradients' global norm at ``grad_clip``,
    steps AdamW and then the warmup schedule
    (:func:`~parl.algorithms.dt.warmup_factor`), as PARL does.

    The model defines ``forward(states, actions, rewards, returns_to_go, timesteps,
    attention_mask)`` returning ``(state_preds, action_preds, return_preds)`` and
    ``get_action(states, actions, rewards, returns_to_go, timesteps)``:
    :class:`~parl.algorithms.trajectory_model.TrajectoryModel` is one. The arguments have
    PARL's names and order and the defaults of PARL's example.

    Args:
        model: the trajectory model.
        learning_rate: AdamW's learning rate after the warmup.
        warmup_steps: updates over which the rate grows from ``learning_rate / warmup_steps``.
        weight_decay: AdamW's decoupled weight decay.
        grad_clip: the largest global L2 norm of the gradients (PARL's 0.25).
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...
    """

    model_methods: ClassVar[tuple[str, ...]] = ("forward", "get_action")
    model: Any

    def __init__(
        self,
        model: nn.Module,
        learning_rate: float = 1e-4,
        warmup_steps: int = 10000,
        weight_decay: float = 1e-4,
        *,
        grad_clip: float = 0.25,
        device: str | torch.device = "auto",
    ) -> None:
        owner = "DecisionTransformer"
        self.learning_rate = check_float(
            "learning_rate", learning_rate, low=0.0, low_open=True, owner=owner
        )
        self.warmup_steps = check_int("warmup_steps", warmup_steps, low=1, owner=owner)
        self.weight_decay = check_float("weight_decay", weight_decay, low=0.0, owner=owner)
        self.grad_clip = check_float("grad_clip", grad_clip, low=0.0, low_open=True, owner=owner)
        super().__init__(model, device=get_device(device))
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, functools.partial(warmup_factor, warmup_steps=self.warmup_steps)
        )

    @torch.no_grad()
    def predict(
        self,
        states: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor | None,
        returns_to_go: torch.Tensor,
        timesteps: torch.Tensor,
        **kwargs: Any,
    ) -> torch.Tensor:
        """The next action of one episode, from its history: ``model.get_action(...)``.

        Args:
            states: ``(T, state_dim)``, normalised as in training.
            actions: ``(T, act_dim)``, the last row a placeholder.
            rewards: ``(T,)``; the model may ignore them.
            returns_to_go: ``(1, T)``: the return still wanted, scaled as in training.
            timesteps: ``(1, T)`` integers.
            **kwargs: ignored (PARL's signature).
        """
        return self.model.get_action(states, actions, rewards, returns_to_go, timesteps)

    def learn(
        self,
        states: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        dones: torch.Tensor,
        rtg: torch.Tensor,
        timesteps: torch.Tensor,
        attention_mask: torch.Tensor,
    ) -> torch.Tensor:
        """One update from a batch of windows (:class:`parl.utils.TrajectorySampler`).

        Args:
            states: ``(B, K, state_dim)``.
            actions: ``(B, K, act_dim)``: the targets.
            rewards: ``(B, K, 1)``, passed to the model.
            dones: ``(B, K)``, unused (PARL's signature).
            rtg: ``(B, K + 1, 1)`` returns-to-go; the first ``K`` are the model's input.
            timesteps: ``(B, K)`` integers.
            attention_mask: ``(B, K)``, 1 for real steps, 0 for padding.

        Returns:
            The (detached) mean squared error over the real steps.
        """
        if rtg.shape[1] != states.shape[1] + 1:
            raise ValueError(
                f"DecisionTransformer.learn: rtg must have one more step than states (K + 1 = "
                f"{states.shape[1] + 1}), got rtg of shape {tuple(rtg.shape)}; the last "
                f"return-to-go of each window is cut off before the model sees it"
            )
        _, action_preds, _ = self.model(
            states, actions, rewards, rtg[:, :-1], timesteps, attention_mask=attention_mask
        )
        real = attention_mask.reshape(-1) > 0
        act_dim = action_preds.shape[-1]
        error = action_preds.reshape(-1, act_dim)[real] - actions.reshape(-1, act_dim)[real]
        loss = error.square().mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach()
