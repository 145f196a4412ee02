"""Vector envs: PARL's serial ``VectorEnv`` (old gym API) and ``RemoteVectorEnv`` (gymnasium's
vector API, sub-environments in ``@parl.remote_class`` actors).

``VectorEnv(envs)`` is PARL's: a list of old-API envs (``CompatWrapper``) stepped in turn, an env
that is done is reset at once and its reset observation returned.

``RemoteVectorEnv`` lives in :mod:`parl.env.remote_vector_env`; it is re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parl.env.remote_vector_env import RemoteVectorEnv

__all__ = ["RemoteVectorEnv", "VectorEnv"]


class VectorEnv:
    """Step a list of envs (old gym API, e.g. ``CompatWrapper``) as one, resetting finished ones.

    ``reset()`` returns the list of observations; ``step(actions)`` returns lists
    ``(obs, rewards, dones, infos)`` where the observation of an env that is done is already the
    first of its next episode (PARL's semantics).
    """

    def __init__(self, envs: Sequence[Any]) -> None:
        if isinstance(envs, (str, bytes)) or not isinstance(envs, Sequence) or not envs:
            raise TypeError(f"VectorEnv takes a non-empty list of envs, got {type(envs).__name__}")
        self.envs = list(envs)
        self.envs_num = len(self.envs)

    def reset(self) -> list[Any]:
        """Reset every env.

        Returns:
            The first observation of each env, in env order.
        """
        return [env.reset() for env in self.envs]

    def step(self, actions: Sequence[Any]) -> tuple[list[Any], list[Any], list[bool], list[Any]]:
        """Step every env with its action; an env that reports ``done`` is reset at once.

        Args:
            actions: One action per env, in env order.

        Returns:
            ``(obs, rewards, dones, infos)``, lists of one item per env. For an env that ended, the
            observation is the first one of its next episode.

        Raises:
            ValueError: ``actions`` does not hold one action per env.
        """
        if len(actions) != self.envs_num:
            raise ValueError(f"VectorEnv.step needs {self.envs_num} actions, got {len(actions)}")
        obs_batch, reward_batch, done_batch, info_batch = [], [], [], []
        for env, action in zip(self.envs, actions, strict=True):
            obs, reward, done, info = env.step(action)
            if done:
                obs = env.reset()
            obs_batch.append(obs)
            reward_batch.append(reward)
            done_batch.append(bool(done))
            info_batch.append(info)
        return obs_batch, reward_batch, done_batch, info_batch
