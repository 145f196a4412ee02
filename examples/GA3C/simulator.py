"""GA3C's simulator: an actor that owns ``env_num`` envs and no network. The learner sends it
actions and gets back what the envs did; everything the policy needs is decided on the learner.

Large observations (Atari frames) come back through shared memory on the local carrier and by
value on a cluster or on Ray; the simulator does not know which.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
from agent import make_env

import parl


@parl.remote_class(wait=False)
class Simulator:
    """``env_num`` envs stepped together; finished episodes restart at once (same step)."""

    def __init__(self, config: dict[str, Any], seed: int) -> None:
        fn = functools.partial(make_env, config["env_name"], config.get("env_dim", 42))
        mode = gym.vector.AutoresetMode.SAME_STEP
        self.envs = gym.vector.SyncVectorEnv([fn] * config["env_num"], autoreset_mode=mode)
        self.seed = seed
        self.simulating = 0.0
        self.born = time.perf_counter()

    def getpid(self) -> int:
        return os.getpid()

    def reset(self) -> dict[str, Any]:
        """The first observations, ``{"obs": (env_num, *obs_shape)}``."""
        start = time.perf_counter()
        obs, _ = self.envs.reset(seed=self.seed)
        self.simulating += time.perf_counter() - start
        return {"obs": obs, "times": self._times()}

    def step(self, actions: np.ndarray) -> dict[str, Any]:
        """Step every env with its action ``(env_num,)``.

        Returns ``obs (env_num, *obs_shape)`` (the next episode's first observation where one
        ended), ``rewards`` and ``dones`` ``(env_num,)``, ``truncated_obs``: ``{env: last obs}``
        of the episodes cut by a time limit (the learner bootstraps them with their value),
        ``episodes``: the returns of the episodes that ended, and the actor's times.
        """
        start = time.perf_counter()
        obs, rewards, terminated, truncated, info = self.envs.step(actions)
        cut = np.nonzero(truncated & ~terminated)[0]
        final = info.get("final_info", {})  # SAME_STEP: the finished episodes' infos
        episodes = final["episode"]["r"][final["_episode"]].tolist() if "episode" in final else []
        self.simulating += time.perf_counter() - start
        return {
            "obs": obs,
            "rewards": rewards.astype(np.float32),
            "dones": terminated | truncated,
            "truncated_obs": {int(i): info["final_obs"][i] for i in cut},
            "episodes": episodes,
            "times": self._times(),
        }

    def _times(self) -> dict[str, float]:
        """Seconds spent stepping envs, and alive: the rest went waiting for the learner."""
        return {"simulating": self.simulating, "alive": time.perf_counter() - self.born}
