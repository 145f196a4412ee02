"""Hyperparameters of the ES example, PARL's names. PARL runs ``mujoco_config`` with 24-48
actors and 1,000 episodes per update; on 2 cores the batch is 40 episodes (20 mirrored pairs)
and the noise table 25M floats (100 MB) instead of 200M."""

from __future__ import annotations

from typing import Any

mujoco_config: dict[str, Any] = {
    "env_name": "HalfCheetah-v5",
    "actor_num": 2,
    "action_noise_std": 0.01,
    "min_task_runtime": 0.2,  # seconds an actor samples per call, at least one pair
    "filter_update_prob": 0.01,  # share of observations counted into the obs filter
    "stepsize": 0.01,
    "optimizer": "adam",
    "train_steps": 200,
    "min_episodes_per_batch": 40,
    "min_steps_per_batch": 10_000,
    "noise_size": 25_000_000,
    "noise_seed": 1024,
    "noise_stdev": 0.02,
    "l2_coeff": 0.005,
    "hidden_size": 64,
    "test_every_train_steps": 5,
    "eval_episodes": 1,
}

cartpole_config: dict[str, Any] = {
    **mujoco_config,
    "env_name": "CartPole-v1",
    "action_noise_std": 0.0,
    "min_task_runtime": 0.05,
    "stepsize": 0.05,
    "train_steps": 100,
    "min_episodes_per_batch": 40,
    "min_steps_per_batch": 2_000,
    "noise_stdev": 0.05,
    "hidden_size": 16,
    "test_every_train_steps": 2,
    "eval_episodes": 3,
}
