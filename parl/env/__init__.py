"""Environments: gymnasium wrappers with PARL's names and import paths, and vector envs.

``from parl.env import CompatWrapper, ActionMappingWrapper`` works as in PARL 2.x, and so does
``from parl.env.multiagent_env import MAenv``. ``parl.env.make(env_id)`` is ``gymnasium.make``
with errors that name the extra to install, gymnasium's suggestion for an unknown id, or the
kind of action space an algorithm needs (:mod:`parl.env.making`). Submodules (``parl.env.atari_wrappers``,
``parl.env.mujoco_wrappers``, ``parl.env.vector_env``, ...) load on first access, so this package
imports only gymnasium.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parl._lazy import lazy_attributes

_LAZY: dict[str, tuple[str, str | None]] = {
    "CompatWrapper": ("parl.env.compat_wrapper", "CompatWrapper"),
    "is_gym_version_ge": ("parl.env.compat_wrapper", "is_gym_version_ge"),
    "V_GYM_CHANGED": ("parl.env.compat_wrapper", "V_GYM_CHANGED"),
    "V_NPRANDOM_CHANGED": ("parl.env.compat_wrapper", "V_NPRANDOM_CHANGED"),
    "ActionMappingWrapper": ("parl.env.continuous_wrappers", "ActionMappingWrapper"),
    "make": ("parl.env.making", "make"),
    "check_env_id": ("parl.env.making", "check_env_id"),
    "check_action_space": ("parl.env.making", "check_action_space"),
    "making": ("parl.env.making", None),
    "VectorEnv": ("parl.env.vector_env", "VectorEnv"),
    "RemoteVectorEnv": ("parl.env.remote_vector_env", "RemoteVectorEnv"),
    "BatchVectorEnv": ("parl.env.batch_vector_env", "BatchVectorEnv"),
    "MAenv": ("parl.env.multiagent_env", "MAenv"),
    "MultiAgentVectorEnv": ("parl.env.multiagent_vector_env", "MultiAgentVectorEnv"),
    "compat_wrapper": ("parl.env.compat_wrapper", None),
    "atari_wrappers": ("parl.env.atari_wrappers", None),
    "mujoco_wrappers": ("parl.env.mujoco_wrappers", None),
    "vector_env": ("parl.env.vector_env", None),
    "compat_wrappers": ("parl.env.compat_wrappers", None),
    "multiagent_env": ("parl.env.multiagent_env", None),
    "continuous_wrappers": ("parl.env.continuous_wrappers", None),
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from parl.env.batch_vector_env import BatchVectorEnv
    from parl.env.compat_wrapper import (
        V_GYM_CHANGED,
        V_NPRANDOM_CHANGED,
        CompatWrapper,
        is_gym_version_ge,
    )
    from parl.env.continuous_wrappers import ActionMappingWrapper
    from parl.env.making import check_action_space, check_env_id, make
    from parl.env.multiagent_env import MAenv
    from parl.env.multiagent_vector_env import MultiAgentVectorEnv
    from parl.env.remote_vector_env import RemoteVectorEnv
    from parl.env.vector_env import VectorEnv


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "ActionMappingWrapper",
    "BatchVectorEnv",
    "CompatWrapper",
    "MAenv",
    "MultiAgentVectorEnv",
    "RemoteVectorEnv",
    "V_GYM_CHANGED",
    "V_NPRANDOM_CHANGED",
    "VectorEnv",
    "check_action_space",
    "check_env_id",
    "is_gym_version_ge",
    "make",
]
