"""ES's actor (PARL's): evaluates mirrored perturbation pairs of the weights it is given.

Only the flat weights (a few thousand floats) and the obs-filter statistics go in, and only
noise offsets, returns, lengths and the actor's obs-filter counts come back: the perturbations
themselves are slices of the shared noise table, which local actors receive once, by handle.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch
from agent import ESAgent, make_env

import parl
from parl.algorithms.es_noise import SharedNoiseTable
from parl.utils.obs_filter import RunningStat


@parl.remote_class(wait=False)
class Actor:
    def __init__(self, config: dict[str, Any], seed: int, noise: SharedNoiseTable | None) -> None:
        self.config = config
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.env = make_env(config)
        if noise is None:  # another host: the same table, from the same seed
            noise = SharedNoiseTable(config["noise_size"], config["noise_seed"], shared=False)
        self.agent = ESAgent(config, self.env, noise)
        self.times = {"weights": 0.0, "sampling": 0.0}
        self.born: float | None = None

    def getpid(self) -> int:
        return os.getpid()

    def sample(self, flat_weights: np.ndarray, filter_state: RunningStat) -> dict[str, Any]:
        """Mirrored pairs for at least ``min_task_runtime`` seconds (and at least one pair)."""
        start = time.perf_counter()
        self.born = start if self.born is None else self.born
        self.agent.obs_filter.sync(filter_state)
        alg = self.agent.alg
        synced = time.perf_counter()
        indices, rewards, lengths = [], [], []
        while not indices or time.perf_counter() - synced < self.config["min_task_runtime"]:
            index = alg.noise.sample_index(alg.weights_total_size, self.rng)
            perturbation = alg.perturbation(index)
            alg.set_flat_weights(flat_weights + perturbation)
            reward_pos, length_pos = self.agent.play_episode(self.env, self.rng, add_noise=True)
            alg.set_flat_weights(flat_weights - perturbation)
            reward_neg, length_neg = self.agent.play_episode(self.env, self.rng, add_noise=True)
            indices.append(index)
            rewards.append([reward_pos, reward_neg])
            lengths.append([length_pos, length_neg])
        sampled = time.perf_counter()
        self.times["weights"] += synced - start
        self.times["sampling"] += sampled - synced
        return {
            "noise_indices": indices,
            "noisy_rewards": rewards,
            "noisy_lengths": lengths,
            "filter_buffer": tuple(self.agent.obs_filter.flush()),
            "times": {
                **self.times,
                "alive": time.perf_counter() - self.born,
                "cpu": time.process_time(),
            },
        }
