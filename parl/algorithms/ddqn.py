"""Double DQN (van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461)."""

from __future__ import annotations

import torch

from parl.algorithms.dqn import DQN

__all__ = ["DDQN"]


class DDQN(DQN):
    """DQN whose target picks the next action with the online network and values it with the
    target network, ``Q_t(s', argmax_a' Q(s', a'))``, which removes most of DQN's overestimation.

    Same arguments as ``DQN``: ``DDQN(model, gamma, lr, *, loss, max_grad_norm, device)``.
    """

    def _next_value(self, next_obs: torch.Tensor) -> torch.Tensor:
        greedy_action = self.model(next_obs).argmax(dim=1, keepdim=True)
        return self.target_model(next_obs).gather(1, greedy_action).squeeze(1)
