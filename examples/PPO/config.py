"""Hyperparameters of the PPO example, one dict per kind of task (PARL's layout).

``cartpole_config`` is rl-zoo's PPO CartPole-v1 setting (so the benchmark compares like with like);
``mujoco_config`` is PARL's MuJoCo setting (CleanRL's and the paper's); ``atari_config`` PARL's.
"""

from __future__ import annotations

from typing import Any

cartpole_config: dict[str, Any] = {
    "env": "CartPole-v1",
    "continuous_action": False,
    "env_num": 8,
    "train_total_steps": 100_000,
    "step_nums": 32,  # steps per env per update (T)
    "num_minibatches": 1,  # batch 256
    "update_epochs": 20,
    "initial_lr": 1e-3,
    "lr_decay": True,
    "clip_param": 0.2,
    "clip_decay": True,  # rl-zoo's lin_0.2
    "entropy_coef": 0.0,
    "use_clipped_value_loss": False,
    "gamma": 0.98,
    "gae_lambda": 0.8,
    "hidden_sizes": (64, 64),
    "activation": "tanh",
    "eval_episode": 10,
    "test_every_steps": 5_000,
}

mujoco_config: dict[str, Any] = {
    "env": "HalfCheetah-v5",
    "continuous_action": True,
    "env_num": 1,
    "train_total_steps": 1_000_000,
    "step_nums": 2048,
    "num_minibatches": 32,
    "update_epochs": 10,
    "initial_lr": 3e-4,
    "lr_decay": True,
    "clip_param": 0.2,
    "clip_decay": False,
    "entropy_coef": 0.0,
    "use_clipped_value_loss": True,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "hidden_sizes": (64, 64),
    "activation": "tanh",
    "log_std_init": 0.0,
    "eval_episode": 10,
    "test_every_steps": 10_000,
}

atari_config: dict[str, Any] = {
    "env": "PongNoFrameskip-v4",
    "continuous_action": False,
    "env_num": 8,
    "train_total_steps": 10_000_000,
    "step_nums": 128,
    "num_minibatches": 4,
    "update_epochs": 4,
    "initial_lr": 2.5e-4,
    "lr_decay": True,
    "clip_param": 0.1,
    "clip_decay": False,
    "entropy_coef": 0.01,
    "use_clipped_value_loss": True,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "eval_episode": 3,
    "test_every_steps": 100_000,
}


def config_for(env_id: str, continuous_action: bool) -> dict[str, Any]:
    """A copy of the configuration that fits ``env_id``."""
    if continuous_action:
        base = mujoco_config
    elif env_id.startswith("CartPole") or env_id in ("Acrobot-v1", "MountainCar-v0"):
        base = cartpole_config
    else:
        base = atari_config
    return {**base, "env": env_id}
