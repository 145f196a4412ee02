"""``PPOAgent``: numpy in and out around ``parl.algorithms.PPO``, the learning-rate and clip
schedules, and the minibatch epochs over a rollout."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numpy_update import NumpyPPOUpdate
from storage import RolloutStorage

import parl
from parl.algorithms import PPO
from parl.utils import LinearDecayScheduler

_HALF_LOG_2PI = np.float32(0.5 * np.log(2.0 * np.pi))


class PPOAgent(parl.Agent):
    """``config`` keys used: ``num_updates``, ``initial_lr``, ``lr_decay``, ``clip_param``,
    ``clip_decay``, ``update_epochs``, ``num_minibatches``."""

    alg: PPO

    def __init__(self, algorithm: PPO, config: dict[str, Any], obs_shape: tuple) -> None:
        super().__init__(algorithm)
        self.config = config
        self.obs_shape = tuple(obs_shape)
        updates = max(1, int(config["num_updates"]))
        self.lr_scheduler = LinearDecayScheduler(config["initial_lr"], updates)
        self.clip_scheduler = LinearDecayScheduler(config["clip_param"], updates)
        self.last_stats: dict[str, float] = {}
        self._device = self.device
        # sampling in numpy (see sample): its own generator, seeded from the run's seed
        self.sample_rng = np.random.default_rng([int(config.get("seed", 0)), 0x5A3])
        self._numpy_sampling = self._device.type == "cpu" and hasattr(
            algorithm.model, "numpy_policy_and_value"
        )
        self._numpy_update: NumpyPPOUpdate | None = None  # made by the first numpy learn

    def predict(self, obs: np.ndarray) -> np.ndarray:
        """Greedy action(s) for one observation or a batch."""
        single = np.shape(obs) == self.obs_shape
        batched = self.to_tensor(np.asarray(obs)[None] if single else obs)
        action = self.to_numpy(self.alg.predict(batched))
        return action[0] if single else action

    def sample(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(value, action, logprob, entropy)`` for a batch of observations.

        Called once per env step. A model on the CPU with ``numpy_policy_and_value`` (the MLPs)
        is run by numpy and the action drawn from ``sample_rng``: the same distribution as
        ``PPO.sample``, at a fraction of the per-call cost of torch. Otherwise the tensor goes
        straight to the device the model had when the agent was built (``to_tensor`` looks the
        device up on every call)."""
        if self._numpy_sampling:
            return self._sample_numpy(np.asarray(obs, dtype=np.float32))
        batch = torch.as_tensor(obs, dtype=torch.float32, device=self._device)
        value, action, logprob, entropy = self.alg.sample(batch)
        return (
            value.cpu().numpy(),
            action.cpu().numpy(),
            logprob.cpu().numpy(),
            entropy.cpu().numpy(),
        )

    def _sample_numpy(self, obs: np.ndarray) -> tuple[np.ndarray, ...]:
        out, value = self.alg.model.numpy_policy_and_value(obs)
        if self.alg.continuous_action:  # diagonal Gaussian, state-independent log-std
            log_std = self.alg.model.numpy_parameters()[-1]  # (1, act_dim)
            noise = self.sample_rng.standard_normal(out.shape, dtype=np.float32)
            action = out + np.exp(log_std) * noise
            per_dim = log_std + _HALF_LOG_2PI  # (a - mean) / std is the noise itself
            logprob = -(0.5 * np.square(noise) + per_dim).sum(axis=-1)
            entropy = np.broadcast_to((per_dim + 0.5).sum(axis=-1), logprob.shape)
            return value, action, logprob, entropy
        shifted = out - out.max(axis=-1, keepdims=True)  # logits - max: exp cannot overflow
        weights = np.exp(shifted)  # unnormalised probabilities
        total = weights.sum(axis=-1)
        cumulative = weights.cumsum(axis=-1)
        cumulative[:, -1] = np.inf  # the last action takes any rounding shortfall
        draw = self.sample_rng.random(total.shape, dtype=np.float32) * total
        action = (cumulative > draw[:, None]).argmax(axis=-1)  # first one past the draw
        log_total = np.log(total)
        logprob = shifted[np.arange(len(action)), action] - log_total
        entropy = log_total - (weights * shifted).sum(axis=-1) / total  # -sum p log p
        return value, action, logprob, entropy

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.value(self.to_tensor(obs)))

    def learn(self, rollout: RolloutStorage) -> tuple[float, float, float, float]:
        """``update_epochs`` passes of minibatch updates over ``rollout``; returns the mean
        ``(value_loss, action_loss, entropy, lr)``; KL and clip fraction in ``last_stats``."""
        cfg = self.config
        lr = self.lr_scheduler.value if cfg["lr_decay"] else cfg["initial_lr"]
        if cfg.get("clip_decay"):
            self.alg.clip_param = max(self.clip_scheduler.value, 1e-8)
        self.lr_scheduler.step()
        self.clip_scheduler.step()
        batch = rollout.flatten()
        if NumpyPPOUpdate.supports(self.alg):
            return self._learn_numpy(batch, lr)
        obs_dtype = None if batch.obs.dtype == np.uint8 else torch.float32
        tensors = [self.to_tensor(batch.obs, dtype=obs_dtype)] + [
            self.to_tensor(array) for array in batch[1:]
        ]
        b_obs, b_actions, b_logprobs, b_advantages, b_returns, b_values = tensors
        if not self.alg.continuous_action:  # stored as float32 (PARL's layout): index as int64
            b_actions = b_actions.long()
        size = b_obs.shape[0]
        minibatch = max(1, size // int(cfg["num_minibatches"]))
        totals = torch.zeros(5, device=b_obs.device)  # summed here, read once per update
        count = 0
        for _ in range(int(cfg["update_epochs"])):
            order = torch.randperm(size, device=b_obs.device)
            for start in range(0, size - minibatch + 1, minibatch):
                mb = order[start : start + minibatch]
                mb_obs = b_obs[mb].float() if obs_dtype is None else b_obs[mb]
                totals += self.alg.learn_tensor(
                    mb_obs,
                    b_actions[mb],
                    b_values[mb],
                    b_returns[mb],
                    b_logprobs[mb],
                    b_advantages[mb],
                    lr,
                )
                count += 1
        value_loss, action_loss, entropy, approx_kl, clip_frac = (totals / max(count, 1)).tolist()
        self.last_stats = {"approx_kl": approx_kl, "clip_frac": clip_frac}
        return value_loss, action_loss, entropy, lr

    def _learn_numpy(self, batch: Any, lr: float) -> tuple[float, float, float, float]:
        """:meth:`learn` through ``NumpyPPOUpdate`` (an ``MLPModel`` on the CPU): the same
        minibatches (torch's ``randperm``), the same loss and gradients, the same Adam."""
        if self._numpy_update is None or self._numpy_update.alg is not self.alg:
            self._numpy_update = NumpyPPOUpdate(self.alg)
        cfg = self.config
        obs = np.asarray(batch.obs, dtype=np.float32).reshape(len(batch.obs), -1)
        if self.alg.continuous_action:
            actions = np.asarray(batch.actions, dtype=np.float32)
        else:  # stored as float32 (PARL's layout)
            actions = batch.actions.reshape(-1).astype(np.int64)
        floats = (batch.values, batch.returns, batch.logprobs, batch.advantages)
        arrays = (obs, actions, *(np.asarray(x, dtype=np.float32) for x in floats))
        size = len(obs)
        minibatch = max(1, size // int(cfg["num_minibatches"]))
        totals, count = np.zeros(5), 0
        for _ in range(int(cfg["update_epochs"])):
            order = torch.randperm(size).numpy()
            for start in range(0, size - minibatch + 1, minibatch):
                mb = order[start : start + minibatch]
                totals += self._numpy_update.learn(*(array[mb] for array in arrays), lr=lr)
                count += 1
        value_loss, action_loss, entropy, approx_kl, clip_frac = (totals / max(count, 1)).tolist()
        self.last_stats = {"approx_kl": approx_kl, "clip_frac": clip_frac}
        return value_loss, action_loss, entropy, lr
