"""RL algorithms built on ``parl.Algorithm``.

Each algorithm lives in its own module and is imported on first access, so
``parl.algorithms.PolicyGradient`` loads only what PolicyGradient needs. To add one, write its
module and add a line to ``_ALGORITHMS``, one to ``__all__`` and one import under
``TYPE_CHECKING``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> module defining it
_ALGORITHMS: dict[str, str] = {
    "PolicyGradient": "parl.algorithms.policy_gradient",
    "DQN": "parl.algorithms.dqn",
    "DDQN": "parl.algorithms.ddqn",
    "DDPG": "parl.algorithms.ddpg",
    "TD3": "parl.algorithms.td3",
    "SAC": "parl.algorithms.sac",
    "PPO": "parl.algorithms.ppo",
    "A2C": "parl.algorithms.a2c",
    "IMPALA": "parl.algorithms.impala",
    "ES": "parl.algorithms.es",
    "MADDPG": "parl.algorithms.maddpg",
    "MAPPO": "parl.algorithms.mappo",
    "PopArt": "parl.algorithms.popart",
    "QMIX": "parl.algorithms.qmix",
    "COMA": "parl.algorithms.coma",
    "MAML": "parl.algorithms.maml",
    "AlphaZero": "parl.algorithms.alphazero",
    "CQL": "parl.algorithms.cql",
    "IQL": "parl.algorithms.iql",
    "OAC": "parl.algorithms.oac",
    "DecisionTransformer": "parl.algorithms.dt",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from parl.algorithms.a2c import A2C
    from parl.algorithms.alphazero import AlphaZero
    from parl.algorithms.coma import COMA
    from parl.algorithms.cql import CQL
    from parl.algorithms.ddpg import DDPG
    from parl.algorithms.ddqn import DDQN
    from parl.algorithms.dqn import DQN
    from parl.algorithms.dt import DecisionTransformer
    from parl.algorithms.es import ES
    from parl.algorithms.impala import IMPALA
    from parl.algorithms.iql import IQL
    from parl.algorithms.maddpg import MADDPG
    from parl.algorithms.maml import MAML
    from parl.algorithms.mappo import MAPPO
    from parl.algorithms.oac import OAC
    from parl.algorithms.policy_gradient import PolicyGradient
    from parl.algorithms.popart import PopArt
    from parl.algorithms.ppo import PPO
    from parl.algorithms.qmix import QMIX
    from parl.algorithms.sac import SAC
    from parl.algorithms.td3 import TD3


def __getattr__(name: str) -> Any:
    try:
        module_name = _ALGORITHMS[name]
    except KeyError:
        raise AttributeError(
            f"module 'parl.algorithms' has no attribute {name!r}; available: {sorted(_ALGORITHMS)}"
        ) from None
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ALGORITHMS))


__all__ = ["A2C", "PPO", "PolicyGradient"]
__all__ += ["DQN", "DDQN", "DDPG", "TD3", "SAC"]
__all__ += ["IMPALA", "ES"]
__all__ += ["MADDPG", "MAPPO", "PopArt", "QMIX", "COMA"]
__all__ += ["MAML", "AlphaZero"]
__all__ += ["CQL", "IQL"]
__all__ += ["OAC", "DecisionTransformer"]
