"""The QuickStart agent: numpy observations in, integer actions out."""

from __future__ import annotations

import numpy as np

import parl


class CartpoleAgent(parl.Agent):
    """Acts and learns with a ``parl.algorithms.PolicyGradient``."""

    def sample(self, obs: np.ndarray) -> int:
        """An action drawn from the policy (for training)."""
        return int(self.alg.sample(self.to_tensor(obs)))

    def predict(self, obs: np.ndarray) -> int:
        """The most probable action (for evaluation)."""
        probs = self.alg.predict(self.to_tensor(obs))
        return int(probs.argmax())

    def learn(self, obs: np.ndarray, act: np.ndarray, reward: np.ndarray) -> float:
        """One update from a whole episode: ``obs (T, obs_dim)``, ``act (T,)``, ``reward (T,)``
        holding the normalised reward-to-go. Returns the loss."""
        loss = self.alg.learn(
            self.to_tensor(obs), self.to_tensor(act, dtype=None), self.to_tensor(reward)
        )
        return float(loss)
