"""Hyperparameters of the A2C example (PARL's names). ``cartpole_config`` trains in about a
minute; ``atari_config`` is PARL's Atari setting (``actor_num`` lowered to 2); ``mujoco_config``
trains a Gaussian policy on a MuJoCo task (PARL's A2C is discrete only)."""

from __future__ import annotations

from typing import Any

cartpole_config: dict[str, Any] = {
    "env_name": "CartPole-v1",
    "actor_num": 2,  # sampling actors (mode "vector_env": env actors, 0 = in this process)
    "env_num": 4,  # envs per actor
    "sample_batch_steps": 16,
    "max_sample_steps": 200_000,
    "gamma": 0.99,
    "lambda": 0.95,  # GAE
    "start_lr": 1e-3,
    "entropy_coeff_scheduler": [(0, -0.01)],
    "vf_loss_coeff": 0.5,
    "eval_episodes": 10,
    "test_every_steps": 10_000,
}

atari_config: dict[str, Any] = {
    "env_name": "PongNoFrameskip-v4",
    "env_dim": 84,
    "actor_num": 2,
    "env_num": 10,
    "sample_batch_steps": 20,
    "max_sample_steps": int(1e7),
    "gamma": 0.99,
    "lambda": 1.0,
    "start_lr": 0.001,
    "entropy_coeff_scheduler": [(0, -0.01)],
    "vf_loss_coeff": 0.5,
    "eval_episodes": 3,
    "test_every_steps": 200_000,
}

mujoco_config: dict[str, Any] = {
    "env_name": "HalfCheetah-v5",
    "actor_num": 2,
    "env_num": 4,
    "sample_batch_steps": 8,
    "max_sample_steps": 1_000_000,
    "gamma": 0.99,
    "lambda": 0.9,
    "start_lr": 7e-4,
    "entropy_coeff_scheduler": [(0, 0.0)],
    "vf_loss_coeff": 0.4,
    "max_grad_norm": 40.0,
    "hidden": 64,
    "log_std_init": -0.5,
    "eval_episodes": 3,
    "test_every_steps": 50_000,
}
