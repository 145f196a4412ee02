"""TD3's and DDPG's agent: the deterministic action, plus Gaussian noise when exploring."""

from __future__ import annotations

import numpy as np

import parl


class MujocoAgent(parl.Agent):
    def __init__(self, algorithm: parl.Algorithm, act_dim: int, expl_noise: float = 0.1) -> None:
        super().__init__(algorithm)
        self.act_dim = act_dim
        self.expl_noise = expl_noise
        self.alg.sync_target(decay=0)

    def predict(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.predict(self.to_tensor(obs.reshape(1, -1))))[0]

    def sample(self, obs: np.ndarray) -> np.ndarray:
        """The action plus N(0, expl_noise) noise, clipped to [-1, 1] (numpy's global
        generator, saved by training checkpoints)."""
        noise = np.random.normal(0, self.expl_noise, size=self.act_dim)
        return np.clip(self.predict(obs) + noise, -1.0, 1.0)

    def learn(self, obs, action, reward, next_obs, terminal):  # type: ignore[no-untyped-def]
        critic_loss, actor_loss = self.alg.learn(
            self.to_tensor(obs),
            self.to_tensor(action),
            self.to_tensor(reward),
            self.to_tensor(next_obs),
            self.to_tensor(terminal),
        )
        return float(critic_loss), float("nan") if actor_loss is None else float(actor_loss)
