"""A2C's actor (PARL's): owns ``env_num`` envs and a copy of the model, steps them
``sample_batch_steps`` times with the learner's latest weights, computes GAE itself and hands
back one batch. Locally the batch is written into a shared slot (``parl.shm``) and the weights
are read from the learner's shared buffer; on a cluster they travel as call values.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from agent import A2CAgent, make_env
from model import AtariModel, CartpoleModel, MujocoModel

import parl
from parl.algorithms import A2C
from parl.utils.rl_utils import calc_gae
from parl.utils.weight_sync import SharedWeights, load_flat_state

FIELDS = ("obs", "actions", "advantages", "target_values")


def action_shape(space: gym.Space) -> tuple[int, ...]:
    """The shape of one action: ``()`` for Discrete, ``(d,)`` for a 1-d Box."""
    if isinstance(space, gym.spaces.Discrete):
        return ()
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return space.shape
    raise TypeError(f"A2C's example handles Discrete and 1-d Box actions, not {space}")


def build_agent(config: dict[str, Any], obs_space: gym.Space, action_space: gym.Space) -> A2CAgent:
    assert obs_space.shape is not None
    continuous = action_shape(action_space) != ()
    if continuous:
        model: Any = MujocoModel(int(obs_space.shape[0]), action_space.shape[0],
                                 config.get("hidden", 64), config.get("log_std_init", -0.5))  # fmt: skip
    elif config["env_name"].startswith("CartPole"):
        model = CartpoleModel(int(obs_space.shape[0]), int(action_space.n))  # type: ignore[attr-defined]
    else:
        model = AtariModel(int(action_space.n))  # type: ignore[attr-defined]
    alg = A2C(model, config, continuous_action=continuous, device=config.get("device", "cpu"))
    return A2CAgent(alg, config)


def batch_arrays(
    config: dict[str, Any], obs_space: gym.Space, action_space: gym.Space, alloc: Any = np.empty
) -> dict[str, np.ndarray]:
    """One actor's batch: ``(sample_batch_steps * env_num, ...)``, time-major."""
    n = config["sample_batch_steps"] * config["env_num"]
    assert obs_space.shape is not None
    shape = action_shape(action_space)
    return {
        "obs": alloc((n, *obs_space.shape), obs_space.dtype),
        "actions": alloc((n, *shape), np.float32 if shape else np.int64),
        "advantages": alloc(n, np.float32),
        "target_values": alloc(n, np.float32),
    }


@parl.remote_class(wait=False)
class Actor:
    def __init__(
        self,
        config: dict[str, Any],
        seed: int,
        weights: SharedWeights | None = None,
        slot: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.config = config
        torch.manual_seed(seed)
        fns = [functools.partial(make_env, config["env_name"])] * config["env_num"]
        mode = gym.vector.AutoresetMode.SAME_STEP
        self.envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
        self.obs, _ = self.envs.reset(seed=seed)
        space, action_space = self.envs.single_observation_space, self.envs.single_action_space
        self.agent = build_agent(config, space, action_space)
        self.weights = weights
        self.out = slot if slot is not None else batch_arrays(config, space, action_space)
        self.shared = slot is not None
        self.times = {"weights": 0.0, "sampling": 0.0}
        self.born: float | None = None

    def getpid(self) -> int:
        return os.getpid()

    def sample(self, flat_weights: np.ndarray | None = None) -> dict[str, Any]:
        """One batch with the newest weights; GAE computed here, as in PARL's actor."""
        start = time.perf_counter()
        self.born = start if self.born is None else self.born
        if flat_weights is not None:
            load_flat_state(self.agent.alg.model, flat_weights)
        elif self.weights is not None:
            self.weights.pull(self.agent.alg.model)
        synced = time.perf_counter()
        steps, n, gamma = (
            self.config["sample_batch_steps"],
            self.config["env_num"],
            self.config["gamma"],
        )
        obs_view = self.out["obs"].reshape(steps, n, *self.obs.shape[1:])
        rewards, dones, values = (np.zeros((steps, n), np.float32) for _ in range(3))
        actions = np.zeros((steps, n, *self.out["actions"].shape[1:]), np.float32)
        episodes: list[float] = []
        for t in range(steps):
            obs_view[t] = self.obs
            action, values[t] = self.agent.sample(self.obs)
            self.obs, rewards[t], terminated, truncated, info = self.envs.step(action)
            actions[t], dones[t] = action, terminated | truncated
            for i in np.nonzero(truncated & ~terminated)[0]:  # bootstrap through time limits
                rewards[t, i] += gamma * self.agent.value(info["final_obs"][i][None])[0]
            final = info.get("final_info", {})  # SAME_STEP: the finished episodes' infos
            if "episode" in final:
                episodes.extend(final["episode"]["r"][final["_episode"]].tolist())
        advantages = calc_gae(
            rewards, values, self.agent.value(self.obs), gamma, self.config["lambda"], dones
        )
        self.out["actions"][:] = actions.reshape(self.out["actions"].shape)
        self.out["advantages"][:] = advantages.reshape(-1)
        self.out["target_values"][:] = (advantages + values).reshape(-1)
        sampled = time.perf_counter()
        self.times["weights"] += synced - start
        self.times["sampling"] += sampled - synced
        result: dict[str, Any] = {"steps": steps * n, "episodes": episodes}
        if not self.shared:
            result["data"] = self.out
        result["times"] = {
            **self.times,
            "alive": time.perf_counter() - self.born,
            "cpu": time.process_time(),
        }
        return result
