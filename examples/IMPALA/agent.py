"""IMPALA's agent (PARL's AtariAgent): numpy in and out, actions drawn from the policy."""

from __future__ import annotations

import numpy as np
import torch

import parl
from parl.algorithms import IMPALA


class ImpalaAgent(parl.Agent):
    alg: IMPALA

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        # uint8 frames stay uint8 (4x less to move); the model scales them
        return self.to_tensor(obs, dtype=None if obs.dtype == np.uint8 else torch.float32)

    def sample(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(actions (N,) int64, behaviour_logits (N, act_dim) float32)``."""
        probs, logits = self.alg.sample(self._obs(obs))
        actions = torch.multinomial(probs, 1).squeeze(-1)
        return self.to_numpy(actions), self.to_numpy(logits)

    def predict(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.predict(self._obs(obs)))

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.value(self._obs(obs)))

    def learn(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        behaviour_logits: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        lr: float,
        entropy_coeff: float,
    ) -> tuple[float, float, float, float, float]:
        """``(total_loss, pi_loss, vf_loss, entropy, kl)`` as floats."""
        loss, kl = self.alg.learn(
            self._obs(obs),
            self.to_tensor(actions, dtype=torch.int64),
            self.to_tensor(behaviour_logits),
            self.to_tensor(rewards),
            self.to_tensor(dones),
            lr,
            entropy_coeff,
        )
        return (
            float(loss.total_loss),
            float(loss.pi_loss),
            float(loss.vf_loss),
            float(loss.entropy),
            float(kl),
        )
