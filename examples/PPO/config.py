"""Hyperparameters of the PPO example, one dict per kind of task (PARL's layout).

``cartpole_config`` is rl-zoo's PPO CartPole-v1 setting (so the benchmark compares like with like);
``mujoco_config`` is PARL's MuJoCo setting (CleanRL's and the paper's); ``atari_config`` PARL's.
``zoo_mujoco_config`` (``--config zoo``) lays rl-baselines3-zoo's tuned HalfCheetah setting over
``mujoco_config``: the HalfCheetah-v5 results of docs/algorithms/ppo.md (6,002 after 1M steps, 3 seeds) ran it.
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
    "eval_episodes": 10,
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
    "eval_episodes": 10,
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
    "eval_episodes": 3,
    "test_every_steps": 100_000,
}


# rl-baselines3-zoo's PPO HalfCheetah hyperparameters (its ppo.yml), in the example's names
zoo_mujoco_config: dict[str, Any] = {
    **mujoco_config,
    "step_nums": 512,
    "num_minibatches": 512 // 64,
    "update_epochs": 20,
    "gamma": 0.98,
    "initial_lr": 2.0633e-05,
    "entropy_coef": 0.000401762,
    "clip_param": 0.1,
    "gae_lambda": 0.92,
    "max_grad_norm": 0.8,
    "value_loss_coef": 0.58096,
    "env_num": 1,
    "lr_decay": False,
    "clip_decay": False,
    "use_clipped_value_loss": False,
    "hidden_sizes": (256, 256),
    "activation": "relu",
    "log_std_init": -2.0,
}

PRESETS = ("parl", "zoo")


def config_for(env_id: str, continuous_action: bool, preset: str = "parl") -> dict[str, Any]:
    """A copy of the configuration that fits ``env_id``; ``preset="zoo"`` picks rl-zoo's tuned
    MuJoCo setting (continuous actions only)."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PRESETS}, got {preset!r}")
    if preset == "zoo":
        if not continuous_action:
            raise ValueError("--config zoo is rl-zoo's MuJoCo setting: add --continuous_action")
        base = zoo_mujoco_config
    elif continuous_action:
        base = mujoco_config
    elif env_id.startswith("CartPole") or env_id in ("Acrobot-v1", "MountainCar-v0"):
        base = cartpole_config
    else:
        base = atari_config
    return {**base, "env": env_id}
