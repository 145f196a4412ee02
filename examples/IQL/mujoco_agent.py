"""IQL's agent: numpy observations in, numpy actions out."""

from __future__ import annotations

import numpy as np

import parl


class MujocoAgent(parl.Agent):
    def __init__(self, algorithm: parl.Algorithm) -> None:
        super().__init__(algorithm)
        self.alg.sync_target(decay=0)

    def predict(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.predict(self.to_tensor(obs.reshape(1, -1))))[0]

    def learn(self, obs, action, reward, next_obs, terminal):  # type: ignore[no-untyped-def]
        critic_loss, value_loss, actor_loss = self.alg.update(
            self.to_tensor(obs),
            self.to_tensor(action),
            self.to_tensor(reward),
            self.to_tensor(next_obs),
            self.to_tensor(terminal),
        )
        return float(critic_loss), float(value_loss), float(actor_loss)
