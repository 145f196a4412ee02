"""IMPALA's actor: owns ``env_num`` envs and a copy of the model, samples trajectory batches
with whatever weights it has (possibly a few updates old: V-trace corrects for it).

Locally, the learner gives each actor two shared trajectory slots (``parl.shm`` arrays) and the
shared weight buffer: the actor writes its trajectories straight into a slot and returns only
a small dict, and reads new weights from shared memory, so nothing large is pickled. On a
cluster (no shared memory) the trajectories come back as the call's value and the weights
ride along with the next ``sample`` call, one send each way per trajectory batch.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from agent import ImpalaAgent
from model import build_model

import parl
from parl.algorithms import IMPALA
from parl.env.atari_wrappers import MonitorEnv, get_wrapper_by_cls
from parl.utils.weight_sync import SharedWeights, load_flat_state

FIELDS = ("obs", "actions", "behaviour_logits", "rewards", "dones")


def is_mujoco(env_name: str) -> bool:
    return "mujoco" in str(gym.spec(env_name).entry_point)


def make_env(config: dict[str, Any], test: bool = False) -> gym.Env:
    name = config["env_name"]
    if name.startswith("CartPole"):
        return MonitorEnv(gym.make(name))
    if is_mujoco(name):  # the policy's Gaussian samples are clipped here, learned unclipped
        return gym.wrappers.ClipAction(MonitorEnv(gym.make(name)))
    entry_point = str(gym.spec(name).entry_point)
    if "ale_py" not in entry_point:  # the Atari wrappers would fail obscurely on, say, Pendulum
        raise ValueError(
            f"IMPALA's example runs CartPole, MuJoCo (HalfCheetah-v5...) and Atari "
            f"(PongNoFrameskip-v4...) envs; {name} ({entry_point}) is none of them"
        )
    from parl.env.atari_wrappers import wrap_deepmind

    env = gym.make(name)
    return wrap_deepmind(env, dim=config.get("env_dim", 42), obs_format="NCHW", test=test,
                         compat=False)  # fmt: skip


def action_layout(space: gym.Space) -> tuple[bool, tuple[int, ...], Any, int]:
    """``(continuous, shape of one action, its dtype, width of the behaviour logits)``."""
    if isinstance(space, gym.spaces.Discrete):
        return False, (), np.int64, int(space.n)
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return True, space.shape, np.float32, 2 * space.shape[0]
    raise TypeError(f"IMPALA's example handles Discrete and 1-d Box actions, not {space}")


def build_algorithm(
    config: dict[str, Any], obs_shape: tuple[int, ...], action_space: gym.Space
) -> IMPALA:
    continuous, shape, _, _ = action_layout(action_space)
    act_dim = shape[0] if continuous else int(action_space.n)  # type: ignore[attr-defined]
    return IMPALA(
        build_model(config, obs_shape, act_dim, continuous),
        sample_batch_steps=config["sample_batch_steps"],
        gamma=config["gamma"],
        vf_loss_coeff=config["vf_loss_coeff"],
        clip_rho_threshold=config["clip_rho_threshold"],
        clip_pg_rho_threshold=config["clip_pg_rho_threshold"],
        max_grad_norm=config.get("max_grad_norm", 40.0),
        continuous_action=continuous,
        device=config.get("device", "cpu"),
    )


def trajectory_arrays(
    config: dict[str, Any], obs_space: gym.Space, action_space: gym.Space, alloc: Any = np.empty
) -> dict[str, np.ndarray]:
    """Arrays of one trajectory batch, ``(env_num * T, ...)``, trajectory-major."""
    n = config["env_num"] * config["sample_batch_steps"]
    assert obs_space.shape is not None
    _, action_shape, action_dtype, width = action_layout(action_space)
    return {
        "obs": alloc((n, *obs_space.shape), obs_space.dtype),
        "actions": alloc((n, *action_shape), action_dtype),
        "behaviour_logits": alloc((n, width), np.float32),
        "rewards": alloc(n, np.float32),
        "dones": alloc(n, np.float32),
    }


@parl.remote_class(wait=False)
class Actor:
    def __init__(
        self,
        config: dict[str, Any],
        seed: int,
        weights: SharedWeights | None = None,
        slots: list[dict[str, np.ndarray]] | None = None,
    ) -> None:
        self.config = config
        torch.manual_seed(seed)
        fns = [functools.partial(make_env, config)] * config["env_num"]
        self.envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.obs, _ = self.envs.reset(seed=seed)
        obs_space, action_space = self.envs.single_observation_space, self.envs.single_action_space
        self.agent = ImpalaAgent(build_algorithm(config, obs_space.shape, action_space))
        self.weights, self.slots = weights, slots
        self.private = None if slots else trajectory_arrays(config, obs_space, action_space)
        self.times = {"weights": 0.0, "sampling": 0.0}
        self.born: float | None = None  # the first sample call's start

    def getpid(self) -> int:
        return os.getpid()

    def _sync(self, flat_weights: np.ndarray | None) -> None:
        if flat_weights is not None:
            load_flat_state(self.agent.alg.model, flat_weights)
        elif self.weights is not None:
            self.weights.pull(self.agent.alg.model)

    def sample(self, slot: int | None = None, flat_weights: np.ndarray | None = None) -> dict:
        """Step every env ``sample_batch_steps`` times; returns the episode results and this
        call's time split, plus the arrays when the actor has no shared slots."""
        start = time.perf_counter()
        if self.born is None:
            self.born = start
        self._sync(flat_weights)
        synced = time.perf_counter()
        out = self.slots[slot] if self.slots and slot is not None else self.private
        assert out is not None
        steps, n = self.config["sample_batch_steps"], self.config["env_num"]
        # views (env, t): each env's T steps are consecutive in the flat arrays
        view = {k: v.reshape(n, steps, *v.shape[1:]) for k, v in out.items()}
        gamma = self.config["gamma"]
        for t in range(steps):
            view["obs"][:, t] = self.obs
            actions, logits = self.agent.sample(self.obs)
            self.obs, rewards, terminated, truncated, info = self.envs.step(actions)
            cut = np.nonzero(truncated & ~terminated)[0]
            if cut.size:  # a time limit is not an end: bootstrap through it
                final = np.stack([info["final_obs"][i] for i in cut])
                rewards = rewards.astype(np.float32)
                rewards[cut] += gamma * self.agent.value(final)
            view["actions"][:, t] = actions
            view["behaviour_logits"][:, t] = logits
            view["rewards"][:, t] = rewards
            view["dones"][:, t] = terminated | truncated
        sampled = time.perf_counter()
        self.times["weights"] += synced - start
        self.times["sampling"] += sampled - synced
        episodes = [
            result
            for env in self.envs.envs
            for result in get_wrapper_by_cls(env, MonitorEnv).next_episode_results()
        ]
        result: dict[str, Any] = {"steps": n * steps, "episodes": episodes}
        if self.private is not None:
            result["data"] = self.private  # returned as a value: the carrier ships it
        # alive - weights - sampling: idle, waiting for the learner's next call
        result["times"] = {
            **self.times,
            "alive": time.perf_counter() - self.born,
            "cpu": time.process_time(),
        }
        return result
