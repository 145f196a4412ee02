"""The DQN example's agent: epsilon-greedy acting, numpy <-> tensors, target updates."""

from __future__ import annotations

import numpy as np

import parl


class DQNAgent(parl.Agent):
    """Epsilon-greedy around a ``DQN``/``DDQN``: epsilon falls linearly from ``e_greed`` to
    ``e_greed_min`` by ``e_greed_decrement`` per ``sample`` call (numpy's global generator, so
    ``parl.utils.set_seed`` and training checkpoints cover it)."""

    def __init__(
        self,
        algorithm: parl.Algorithm,
        act_dim: int,
        e_greed: float = 1.0,
        e_greed_decrement: float = 0.0,
        e_greed_min: float = 0.04,
    ) -> None:
        super().__init__(algorithm)
        self.act_dim = act_dim
        self.e_greed = e_greed
        self.e_greed_decrement = e_greed_decrement
        self.e_greed_min = e_greed_min

    def sample(self, obs: np.ndarray) -> int:
        explore = np.random.random() < self.e_greed
        self.e_greed = max(self.e_greed_min, self.e_greed - self.e_greed_decrement)
        return int(np.random.randint(self.act_dim)) if explore else self.predict(obs)

    def predict(self, obs: np.ndarray) -> int:
        q = self.alg.predict(self.to_tensor(obs[None], dtype=None))
        return int(q.argmax())

    def learn(self, obs, act, reward, next_obs, terminal) -> float:  # type: ignore[no-untyped-def]
        """One update from numpy batches; returns the loss."""
        loss = self.alg.learn(
            self.to_tensor(obs, dtype=None),
            self.to_tensor(act, dtype=None),
            self.to_tensor(reward),
            self.to_tensor(next_obs, dtype=None),
            self.to_tensor(terminal),
        )
        return float(loss)
