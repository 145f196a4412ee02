"""One place to seed everything: Python's ``random``, numpy, torch and a gymnasium env.

Parallel workers should each get their own seed: ``worker_seed(seed, i)`` (``seed + i``).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from parl.validation import check_int

__all__ = ["seed_env", "set_seed", "worker_seed"]

_MAX_SEED = 2**32 - 1


def set_seed(seed: int, env: Any = None) -> None:
    """Seed ``random``, numpy's global generator, torch (CPU and CUDA) and, if given, ``env``.

    Deterministic results also need deterministic operations; on CPU that holds for the usual
    MLPs and convolutions, on GPU see ``torch.use_deterministic_algorithms``.
    """
    seed = check_int("seed", seed, low=0, high=_MAX_SEED)
    random.seed(seed)
    np.random.seed(seed)
    import torch  # here, so that importing parl.utils does not load torch

    torch.manual_seed(seed)  # seeds every CUDA device too
    if env is not None:
        seed_env(env, seed)


def seed_env(env: Any, seed: int) -> tuple[Any, dict[str, Any]]:
    """Seed a gymnasium env and its action and observation spaces; returns ``env.reset(seed)``.

    Later ``env.reset()`` calls without a seed continue the seeded generator, so a whole run is
    reproducible from this one call.
    """
    seed = check_int("seed", seed, low=0, high=_MAX_SEED)
    if not callable(getattr(env, "reset", None)):
        raise TypeError(
            f"env must be a gymnasium.Env (with reset(seed=...)), got {type(env).__name__}"
        )
    for space_name in ("action_space", "observation_space"):
        space = getattr(env, space_name, None)
        if space is not None and callable(getattr(space, "seed", None)):
            space.seed(seed)
    obs, info = env.reset(seed=seed)
    return obs, info


def worker_seed(seed: int, index: int) -> int:
    """The seed of parallel worker ``index``: ``seed + index``."""
    seed = check_int("seed", seed, low=0, high=_MAX_SEED)
    index = check_int("index", index, low=0)
    if seed + index > _MAX_SEED:
        raise ValueError(f"seed + index must be at most {_MAX_SEED}, got {seed} + {index}")
    return seed + index
