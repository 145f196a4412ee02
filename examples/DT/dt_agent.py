"""Decision Transformer's agent: batches of trajectory windows in, the next action of one episode
out, numpy on both sides."""

from __future__ import annotations

import numpy as np

import parl
from parl.utils import TrajectoryBatch


class DTAgent(parl.Agent):
    def learn(self, batch: TrajectoryBatch) -> float:  # type: ignore[override]
        """One update on a batch of windows; returns the action loss."""
        return float(self.alg.learn(*batch.to_tensors(self.device)))

    def predict(  # type: ignore[override]
        self,
        states: np.ndarray,
        actions: np.ndarray,
        returns_to_go: np.ndarray,
        timesteps: np.ndarray,
    ) -> np.ndarray:
        """The next action from the episode so far: ``states`` ``(T, state_dim)`` normalised as
        in training, ``actions`` ``(T, act_dim)`` with a zero placeholder last, ``returns_to_go``
        ``(T,)`` scaled as in training and ``timesteps`` ``(T,)``."""
        action = self.alg.predict(
            self.to_tensor(states),
            self.to_tensor(actions),
            None,
            self.to_tensor(returns_to_go),
            self.to_tensor(timesteps, dtype=None).long(),
        )
        return self.to_numpy(action)
