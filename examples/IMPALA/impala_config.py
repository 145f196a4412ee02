"""Hyperparameters of the IMPALA example, PARL's names. ``cartpole_config`` solves CartPole-v1 in
a few minutes on 2 cores; ``atari_config`` is PARL's Pong setting (``actor_num`` lowered to 2);
``mujoco_config`` trains a Gaussian policy on a MuJoCo task (PARL has no continuous IMPALA)."""

from __future__ import annotations

from typing import Any

cartpole_config: dict[str, Any] = {
    "env_name": "CartPole-v1",
    "actor_num": 2,
    "env_num": 8,  # envs per actor
    "sample_batch_steps": 20,  # T: steps of each env in one trajectory batch
    "train_batch_size": 320,  # learner steps per update (whole trajectory batches)
    "max_sample_steps": 300_000,
    "gamma": 0.99,
    "lr_scheduler": [(0, 3e-3)],  # (train_step, learning_rate)
    "entropy_coeff_scheduler": [(0, -0.01)],  # (train_step, coefficient)
    "vf_loss_coeff": 0.5,
    "clip_rho_threshold": 1.0,
    "clip_pg_rho_threshold": 1.0,
    "test_every_steps": 20_000,
    "eval_episodes": 5,
    "log_metrics_interval_s": 10,
}

atari_config: dict[str, Any] = {
    "env_name": "PongNoFrameskip-v4",
    "env_dim": 42,
    "actor_num": 2,
    "env_num": 5,
    "sample_batch_steps": 50,
    "train_batch_size": 1000,
    "max_sample_steps": int(1e7),
    "gamma": 0.99,
    "lr_scheduler": [(0, 0.001), (20000, 0.0005), (40000, 0.0001)],
    "entropy_coeff_scheduler": [(0, -0.01)],
    "vf_loss_coeff": 0.5,
    "clip_rho_threshold": 1.0,
    "clip_pg_rho_threshold": 1.0,
    "test_every_steps": 500_000,
    "eval_episodes": 1,
    "log_metrics_interval_s": 30,
}

mujoco_config: dict[str, Any] = {
    "env_name": "HalfCheetah-v5",
    "actor_num": 2,
    "env_num": 4,
    "sample_batch_steps": 16,
    "train_batch_size": 64,  # one actor's trajectory batch per update (4 envs x 16 steps)
    "max_sample_steps": 1_000_000,
    "gamma": 0.99,
    # halved every 4,000 updates (256,000 steps): at a constant 1e-3 the policy's std collapsed
    # after about 650,000 steps in a trial run and the return fell from 1,000 to -600
    "lr_scheduler": [(0, 1e-3), (4000, 5e-4), (8000, 2.5e-4), (12000, 1e-4)],
    "entropy_coeff_scheduler": [(0, 0.0)],
    "vf_loss_coeff": 0.5,
    "clip_rho_threshold": 1.0,
    "clip_pg_rho_threshold": 1.0,
    "max_grad_norm": 40.0,
    "hidden": 64,
    "log_std_init": -0.5,
    "test_every_steps": 50_000,
    "eval_episodes": 3,
    "log_metrics_interval_s": 30,
}
