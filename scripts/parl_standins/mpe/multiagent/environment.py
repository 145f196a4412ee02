"""``multiagent.environment.MultiAgentEnv`` as the MAPPO authors' particle envs give it, on
``parl.env.MAenv``: lists with one entry per agent, one-hot discrete actions, ``[r]`` rewards,
``individual_reward`` in each info and a centralised ``share_observation_space``."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from parl.env import MAenv


class Discrete(spaces.Discrete):
    """gym's ``Discrete`` as the particle envs had it: ``n`` is a Python int (gymnasium's is a
    numpy integer, which PARL's MAPPO model, testing ``isinstance(act_dim, int)``, refuses)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.n = int(n)  # type: ignore[assignment]


class MultiAgentEnv:
    """An MPE scenario of mpe2 with the multi-agent particle envs' interface.

    Args:
        world: the world of ``multiagent.scenarios.load(name).Scenario().make_world()``.
        reset_callback, reward_callback, observation_callback, info_callback: the scenario's
            callbacks, taken for the signature (mpe2's scenario has its own).
    """

    def __init__(
        self,
        world: Any,
        reset_callback: Any = None,
        reward_callback: Any = None,
        observation_callback: Any = None,
        info_callback: Any = None,
        done_callback: Any = None,
        shared_viewer: bool = True,
    ) -> None:
        self.env = MAenv(world.scenario_name)
        self.n = self.env.n
        self.observation_space = list(self.env.observation_space)
        self.action_space = [
            Discrete(int(s.n)) if isinstance(s, spaces.Discrete) else s
            for s in self.env.action_space
        ]
        size = int(sum(s.shape[0] for s in self.observation_space))
        shared = spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self.share_observation_space = [shared] * self.n

    def seed(self, seed: int | None = None) -> list[int | None]:
        return self.env.seed(seed)

    def reset(self) -> list[np.ndarray]:
        return self.env.reset()

    def step(self, action_n: list[Any]) -> tuple[list, list, list, list]:
        obs_n, reward_n, done_n, info_n = self.env.step(list(action_n))
        infos = [{**info, "individual_reward": r} for info, r in zip(info_n, reward_n, strict=True)]
        return obs_n, [[r] for r in reward_n], done_n, infos

    def render(self, mode: str = "human") -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()
