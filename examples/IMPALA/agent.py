"""IMPALA's agent (PARL's AtariAgent): numpy in and out, actions drawn from the policy; a model
with an observation normaliser (``obs_norm``) has its statistics updated from each training
batch before the update."""

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
        """``(actions (N,) int64, behaviour_logits (N, act_dim) float32)``; continuous:
        ``(actions (N, d) float32, concat(mean, log_std) (N, 2 * d))``."""
        if self.alg.continuous_action:
            actions, params = self.alg.sample(self._obs(obs))
            return self.to_numpy(actions), self.to_numpy(params)
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
        obs_tensor = self._obs(obs)
        obs_norm = getattr(self.alg.model, "obs_norm", None)
        if obs_norm is not None:
            obs_norm.update(obs_tensor)
        continuous = self.alg.continuous_action
        loss, kl = self.alg.learn(
            obs_tensor,
            self.to_tensor(actions, dtype=torch.float32 if continuous else torch.int64),
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
