"""REINFORCE, the Monte-Carlo policy gradient (Williams 1992,
https://doi.org/10.1007/BF00992696), for discrete actions."""

from __future__ import annotations

import torch
from torch import nn

from parl.core.algorithm import Algorithm
from parl.utils.device import get_device
from parl.validation import check_float

__all__ = ["PolicyGradient"]


class PolicyGradient(Algorithm):
    """Policy gradient: ``loss = -mean(log pi(a_t | s_t) * G_t)``.

    ``model(obs)`` must return action probabilities of shape ``(B, act_dim)`` (a softmax, as in
    PARL). ``G_t`` is whatever weight the caller passes as ``reward`` in ``learn``: usually the
    normalised reward-to-go (``parl.utils.calc_discount_sum_rewards``) or an advantage.

    Args:
        model: the policy network.
        lr: learning rate of the Adam optimizer.
        device: ``"auto"`` (GPU if available), ``"cpu"``, ``"cuda:0"``...; the model is moved
            there.
    """

    model_methods = ("forward",)

    def __init__(
        self, model: nn.Module, lr: float = 1e-3, *, device: str | torch.device = "auto"
    ) -> None:
        self.lr = check_float("lr", lr, low=0.0, low_open=True, owner="PolicyGradient")
        super().__init__(model, device=get_device(device))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.lr)

    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """Action probabilities, ``(B, obs_dim) -> (B, act_dim)`` (or unbatched)."""
        return self.model(obs)

    @torch.no_grad()
    def sample(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions drawn from the policy, ``(B, obs_dim) -> (B,)`` int64 (or a 0-d tensor for
        one unbatched observation). Uses torch's generator, so ``torch.manual_seed`` fixes it."""
        probs = self.model(obs)
        return torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1).reshape(probs.shape[:-1])

    def learn(self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
        """One Adam step on a batch of transitions; returns the (detached) loss.

        Shapes: ``obs (B, obs_dim)``, ``action (B,)`` integer, ``reward (B,)``: the weight of each
        log-probability, e.g. the normalised reward-to-go.
        """
        if action.dim() != 1 or reward.shape != action.shape or obs.shape[0] != action.shape[0]:
            raise ValueError(
                f"PolicyGradient.learn expects obs (B, obs_dim), action (B,) and reward (B,), "
                f"got obs {tuple(obs.shape)}, action {tuple(action.shape)}, "
                f"reward {tuple(reward.shape)}"
            )
        probs = self.model(obs)
        chosen = probs.gather(1, action.long().unsqueeze(1)).squeeze(1)
        log_prob = torch.log(chosen.clamp_min(torch.finfo(chosen.dtype).tiny))
        loss = -(log_prob * reward).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.detach()
