"""ES's agent: the policy on normalised observations, played for whole episodes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from model import CartpoleModel, MujocoModel

import parl
from parl.algorithms import ES
from parl.algorithms.es_noise import SharedNoiseTable
from parl.utils.obs_filter import MeanStdFilter, RunningStat


def make_env(config: dict[str, Any]) -> gym.Env:
    return gym.make(config["env_name"])


class ESAgent(parl.Agent):
    alg: ES

    def __init__(self, config: dict[str, Any], env: gym.Env, noise: SharedNoiseTable) -> None:
        assert env.observation_space.shape is not None
        obs_dim = int(env.observation_space.shape[0])
        self.discrete = isinstance(env.action_space, gym.spaces.Discrete)
        if self.discrete:
            model: parl.Model = CartpoleModel(
                obs_dim, int(env.action_space.n), config["hidden_size"]
            )
        else:
            assert env.action_space.shape is not None
            model = MujocoModel(obs_dim, int(env.action_space.shape[0]), config["hidden_size"])
        algorithm = ES(model, noise, noise_stdev=config["noise_stdev"], stepsize=config["stepsize"],
                       l2_coeff=config["l2_coeff"], optimizer=config["optimizer"],
                        device=config.get("device", "cpu"))  # fmt: skip
        super().__init__(algorithm)
        self.config = config
        self.obs_filter = MeanStdFilter(obs_dim)

    def save(self, save_path: str | os.PathLike[str], model: torch.nn.Module | None = None) -> Path:
        """The model, and beside it (``<save_path>.obs_filter.npz``) the observation statistics
        it was trained with: the policy only works on observations normalised by them."""
        path = super().save(save_path, model)
        state = self.obs_filter.state
        np.savez(f"{path}.obs_filter.npz", n=state.n, mean=state.mean, m2=state.m2)
        return path

    def restore(
        self,
        save_path: str | os.PathLike[str],
        model: torch.nn.Module | None = None,
        map_location: Any = None,
    ) -> None:
        """Load :meth:`save`'s model and its observation statistics."""
        super().restore(save_path, model, map_location)
        with np.load(f"{os.fspath(save_path)}.obs_filter.npz") as stats:
            self.obs_filter.sync(RunningStat(int(stats["n"]), stats["mean"], stats["m2"]))

    def predict(self, obs: np.ndarray) -> np.ndarray:
        obs_tensor = torch.as_tensor(obs, dtype=torch.float32, device=self.alg.device)
        out = self.alg.predict(obs_tensor).cpu().numpy()
        return out.argmax(-1) if self.discrete else out

    def play_episode(
        self, env: gym.Env, rng: np.random.Generator, add_noise: bool = False, update: bool = True
    ) -> tuple[float, int]:
        """One episode; the obs filter counts a ``filter_update_prob`` share of observations."""
        total, steps, done = 0.0, 0, False
        obs, _ = env.reset(seed=int(rng.integers(2**31)))
        prob = self.config["filter_update_prob"]
        while not done:
            obs = self.obs_filter(obs, update=update and rng.random() < prob)
            action = self.predict(obs)
            if add_noise and not self.discrete and self.config["action_noise_std"] > 0:
                action = action + rng.normal(0.0, self.config["action_noise_std"], action.shape)
            obs, reward, terminated, truncated, _ = env.step(
                action.item() if self.discrete else action
            )
            total += float(reward)
            steps += 1
            done = terminated or truncated
        return total, steps
