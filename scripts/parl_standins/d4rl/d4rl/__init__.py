"""The import name of D4RL, for PARL's CQL and IQL scripts: ``gym.make("halfcheetah-random-v0")``,
``d4rl.qlearning_dataset(env)``, ``env.get_dataset()`` and ``d4rl.get_normalized_score``.

Importing it registers D4RL's ids (``<task>-<kind>-v0``) with gymnasium, as D4RL did
with gym: each makes the task's gymnasium MuJoCo env with the old gym API (``parl.env``'s
``CompatWrapper``), whose dataset is the Minari dataset ``<task>-<kind>-v0`` that
``scripts/make_offline_dataset.py`` wrote into ``$D4RL_DATASET_DIR`` (D4RL's own setting;
default ``~/.d4rl/datasets``). Nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from parl.env import CompatWrapper
from parl.utils.offline_data import d4rl_normalized_score, load_episodes, load_minari

__all__ = ["OfflineEnv", "get_normalized_score", "qlearning_dataset"]

TASKS = {"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5", "walker2d": "Walker2d-v5"}
KINDS = ("random", "medium", "medium-replay", "expert", "medium-expert")


def dataset_folder(name: str) -> Path:
    """Where the dataset of D4RL's id ``name`` lies."""
    root = Path(os.environ.get("D4RL_DATASET_DIR", Path.home() / ".d4rl" / "datasets"))
    return root / name


class OfflineEnv(CompatWrapper):
    """A MuJoCo task in the old gym API that knows its offline dataset."""

    def __init__(self, env: gymnasium.Env, dataset_name: str) -> None:
        super().__init__(env)
        self.dataset_name = dataset_name

    def get_dataset(self) -> dict[str, np.ndarray]:
        """D4RL's step arrays: ``observations``, ``actions``, ``rewards``, ``terminals`` and
        ``timeouts`` (an episode cut by its time limit)."""
        episodes = load_episodes(dataset_folder(self.dataset_name))
        timeouts = []
        for episode in episodes:
            cut = np.zeros(len(episode["rewards"]), dtype=bool)
            cut[-1] = not episode["terminals"][-1]
            timeouts.append(cut)
        keys = ("observations", "actions", "rewards", "terminals")
        dataset = {key: np.concatenate([e[key] for e in episodes]) for key in keys}
        dataset["timeouts"] = np.concatenate(timeouts)
        return dataset

    def get_normalized_score(self, score: Any) -> Any:
        return get_normalized_score(self.dataset_name, score)


def _make(task: str, dataset_name: str, **kwargs: Any) -> OfflineEnv:
    return OfflineEnv(gymnasium.make(TASKS[task], **kwargs), dataset_name)


def qlearning_dataset(env: Any, dataset: Any = None, **kwargs: Any) -> dict[str, np.ndarray]:
    """``observations``, ``actions``, ``next_observations``, ``rewards`` and ``terminals`` of
    ``env``'s dataset, one row per transition."""
    if dataset is not None:
        raise NotImplementedError("qlearning_dataset reads the env's own dataset only")
    return load_minari(dataset_folder(env.dataset_name))


def get_normalized_score(env_name: str, score: Any) -> Any:
    """D4RL's ``(score - random) / (expert - random)``, a fraction (not a percentage)."""
    return d4rl_normalized_score(env_name, score) / 100.0


for _task in TASKS:
    for _kind in KINDS:
        _name = f"{_task}-{_kind}-v0"  # the name make_offline_dataset.py gives
        if _name not in gymnasium.registry:
            gymnasium.register(
                _name,
                entry_point=_make,
                kwargs={"task": _task, "dataset_name": _name},
                max_episode_steps=None,
                order_enforce=False,
                disable_env_checker=True,
            )
