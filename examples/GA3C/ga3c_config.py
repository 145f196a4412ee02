"""Hyperparameters of the GA3C example (PARL's names). ``cartpole_config`` trains in about a
minute on two cores; ``atari_config`` is PARL's Atari setting (42 x 42 frames, segments of
``t_max`` 5 steps, batches of 128, predictions of at most 16 observations, its learning-rate
steps) with ``actor_num`` lowered to 2 simulators of 8 envs (PARL runs 24 of one env)."""

from __future__ import annotations

from typing import Any

cartpole_config: dict[str, Any] = {
    "env_name": "CartPole-v1",
    "actor_num": 2,  # simulator actors
    "env_num": 4,  # envs per simulator: one request asks for this many actions
    "t_max": 5,  # steps per segment: the advantages look this far ahead
    "train_batch_size": 128,  # steps per update
    "max_predict_batch_size": 16,  # observations per prediction (whole requests only)
    "max_sample_steps": 200_000,
    "gamma": 0.99,
    "lambda": 0.95,  # GAE; 1.0 gives n-step returns
    "lr_scheduler": [(0, 1e-3)],  # (update, learning rate)
    "entropy_coeff_scheduler": [(0, -0.01)],  # (update, coefficient); negative: a bonus
    "vf_loss_coeff": 0.5,
    "value_scale": 10.0,  # the critic's output x 10: returns reach 100 (see model.py)
    "eval_episodes": 10,
    "test_every_steps": 10_000,
}

atari_config: dict[str, Any] = {
    "env_name": "PongNoFrameskip-v4",
    "env_dim": 42,
    "actor_num": 2,
    "env_num": 8,
    "t_max": 5,
    "train_batch_size": 128,
    "max_predict_batch_size": 16,
    "max_sample_steps": int(1e7),
    "gamma": 0.99,
    "lambda": 1.0,
    "lr_scheduler": [(0, 5e-4), (100_000, 3e-4), (200_000, 1e-4)],
    "entropy_coeff_scheduler": [(0, -0.01)],
    "vf_loss_coeff": 0.5,
    "eval_episodes": 3,
    "test_every_steps": 200_000,
}
