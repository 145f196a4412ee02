"""Environments of the PPO example: the training vector env and the evaluation env.

CartPole-like tasks run as they are; ``--continuous_action`` tasks (MuJoCo) go through
``parl.env.mujoco_wrappers.wrap_rms`` (running normalisation); any other id is an Atari game and
goes through ``parl.env.atari_wrappers.wrap_deepmind``. All use the gymnasium API here (the
``compat=False`` form of PARL's wrappers), so that they can be vectorised.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym

from parl.env.batch_vector_env import BatchVectorEnv
from parl.env.remote_vector_env import RemoteVectorEnv


def kind_of(config: dict[str, Any]) -> str:
    if config["continuous_action"]:
        return "mujoco"
    if "NoFrameskip" in config["env"] or config["env"].startswith("ALE/"):
        return "atari"
    return "classic"


def make_env(env_id: str, kind: str, gamma: float, test: bool = False) -> gym.Env:
    """One env of ``kind`` (``"classic"``, ``"mujoco"``, ``"atari"``), gymnasium API.

    ``info["episode"]["r"]`` holds the raw return at the end of an episode (a game for Atari).
    """
    if kind == "atari":
        from parl.env.atari_wrappers import wrap_deepmind

        return wrap_deepmind(gym.make(env_id), dim=84, obs_format="NCHW", test=test, compat=False)
    env = gym.make(env_id)
    if kind == "mujoco":
        from parl.env.mujoco_wrappers import wrap_rms

        env = gym.wrappers.ClipAction(env)
        return wrap_rms(env, gamma, test=test, compat=False)
    return gym.wrappers.RecordEpisodeStatistics(env)


def make_train_envs(config: dict[str, Any]) -> gym.vector.VectorEnv:
    """``env_num`` envs with same-step auto-reset (the final observation in the infos).

    With ``xparl_addr`` or ``num_workers > 0`` they run in actors (``parl.env.RemoteVectorEnv``),
    otherwise in this process (``parl.env.BatchVectorEnv``): classic-control tasks as one batch
    (CartPole as one numpy pass, same trajectories as gymnasium's), MuJoCo tasks one env after
    another as ``gymnasium.vector.SyncVectorEnv`` would, Atari games in ``SyncVectorEnv``.
    """
    fn = functools.partial(make_env, config["env"], kind_of(config), config["gamma"])
    fns = [fn] * int(config["env_num"])
    mode = gym.vector.AutoresetMode.SAME_STEP
    workers = int(config.get("num_workers") or 0)
    if config.get("xparl_addr"):
        import parl

        parl.connect(config["xparl_addr"])
        workers = max(workers, 1)
    if workers > 0:
        return RemoteVectorEnv(fns, num_workers=workers, autoreset_mode=mode, infos=False)
    if kind_of(config) == "classic":
        return BatchVectorEnv(config["env"], int(config["env_num"]), mode)
    if kind_of(config) == "mujoco":
        return BatchVectorEnv.from_env_fns(fns, mode)
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
