"""Making a gymnasium env by id, with errors that say what to do next.

- An id of an optional extra whose package is missing (an Atari game without ale-py, a MuJoCo
  body without mujoco, a level-based foraging grid without lbforaging) names the env, the extra
  and the command that installs it (:func:`parl.extras.install_hint`).
- An id gymnasium does not know (``CartPole-v2``, ``CartPol-v1``) names the id and gymnasium's
  own suggestion (the versions it has, the name it meant).
- An algorithm given an env of the wrong kind of action space (SAC on CartPole) names the
  algorithm, the space it needs, the env's space and envs that fit.

:func:`make` does all three; :func:`check_env_id` the first two without making the env (the
examples' ``--env`` flag is checked with it as the command line is parsed) and
:func:`check_action_space` the third.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Literal

import gymnasium
from gymnasium.spaces import Box, Discrete, MultiDiscrete, Space

from parl.extras import install_hint

__all__ = ["check_action_space", "check_env_id", "extra_of", "make"]

ActionKind = Literal["continuous", "discrete"]

# Atari ids gymnasium knows only once ale-py has registered them: the ALE namespace (ALE/Pong-v5)
# and the v0/v4 names of the old gym (PongNoFrameskip-v4, Breakout-ramDeterministic-v4, ...)
_ATARI_SUFFIXES = ("NoFrameskip", "Deterministic", "-ram")
_ATARI_GAMES = (
    "Alien", "Amidar", "Assault", "Asterix", "Asteroids", "Atlantis", "BankHeist", "BattleZone",
    "BeamRider", "Berzerk", "Bowling", "Boxing", "Breakout", "Centipede", "ChopperCommand",
    "CrazyClimber", "DemonAttack", "DoubleDunk", "Enduro", "FishingDerby", "Freeway",
    "Frostbite", "Gopher", "Gravitar", "Hero", "IceHockey", "Jamesbond", "Kangaroo", "Krull",
    "KungFuMaster", "MontezumaRevenge", "MsPacman", "NameThisGame", "Phoenix", "Pitfall", "Pong",
    "PrivateEye", "Qbert", "Riverraid", "RoadRunner", "Robotank", "Seaquest", "Skiing",
    "Solaris", "SpaceInvaders", "StarGunner", "Tennis", "TimePilot", "Tutankham", "UpNDown",
    "Venture", "VideoPinball", "WizardOfWor", "YarsRevenge", "Zaxxon",
)  # fmt: skip
# MPE scenarios are not gymnasium ids: they open with parl.env.MAenv
_MPE_PREFIX = "simple"

_KINDS: dict[str, tuple[tuple[type, ...], str, str]] = {
    "continuous": ((Box,), "a continuous (Box) action space", "try Pendulum-v1 or a MuJoCo env"),
    "discrete": (
        (Discrete, MultiDiscrete),
        "a discrete action space",
        "try CartPole-v1 or an Atari env (PongNoFrameskip-v4)",
    ),
}


def extra_of(env_id: str) -> str | None:
    """The extra whose packages an env id needs (``atari``, ``mujoco``, ``multiagent``), judged
    from the id alone; None for gymnasium's own envs and for unknown ids."""
    namespace, _, name = env_id.rpartition("/")
    base = name.split("-v")[0]
    if namespace == "ALE" or base.endswith(_ATARI_SUFFIXES):
        return "atari"
    if not namespace and base.replace("-ram", "") in _ATARI_GAMES:
        return "atari"
    if base.startswith("Foraging") or namespace == "lbforaging":
        return "multiagent"
    if not namespace and base.startswith(_MPE_PREFIX):
        return "multiagent"
    if _entry_point(env_id).startswith("gymnasium.envs.mujoco"):
        return "mujoco"
    return None


def _entry_point(env_id: str) -> str:
    try:
        return str(gymnasium.spec(env_id).entry_point)
    except gymnasium.error.Error:
        return ""


# the module that registers an extra's ids with gymnasium when imported, by extra
_REGISTERS = {"atari": "ale_py", "multiagent": "lbforaging", "mujoco": "mujoco"}


def _load_extra(env_id: str, extra: str) -> None:
    """Import the package of ``extra`` (registering its ids), or raise an ImportError naming
    the env, the extra and the install command."""
    module = _REGISTERS[extra]
    if extra == "multiagent" and env_id.startswith(_MPE_PREFIX):
        raise ValueError(
            f"{env_id!r} is a multi-agent particle (MPE) scenario, not a gymnasium id: open it "
            "with parl.env.MAenv (or the multi-agent examples: MADDPG, QMIX, MAPPO, COMA)"
        )
    if not _installed(module):
        raise ImportError(
            f"{env_id} needs the {module} package, which is not installed here; "
            f"{install_hint(extra)}"
        )
    if extra == "atari":
        gymnasium.register_envs(importlib.import_module(module))
    elif extra == "multiagent":
        importlib.import_module(module)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def check_env_id(env_id: str) -> None:
    """Raise unless gymnasium can make ``env_id`` here: an ImportError naming the extra to
    install, or a ValueError naming the id and gymnasium's suggestion."""
    extra = extra_of(env_id)
    if extra is not None:
        _load_extra(env_id, extra)
    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error as exc:
        raise ValueError(f"unknown env id {env_id!r}: {exc}") from None


def check_action_space(space: Space, env_id: str, kind: ActionKind, algorithm: str) -> None:
    """Raise a TypeError unless ``space`` is of ``kind`` (``"continuous"``: a Box;
    ``"discrete"``: Discrete or MultiDiscrete), naming ``algorithm``, what it needs, what the
    env has and envs that fit."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be 'continuous' or 'discrete', got {kind!r}")
    types, needs, fits = _KINDS[kind]
    if not isinstance(space, types):
        raise TypeError(
            f"{algorithm or 'this algorithm'} needs {needs}; {env_id} has {space}; {fits}"
        )


def make(
    env_id: str, *, action_space: ActionKind | None = None, algorithm: str = "", **kwargs: Any
) -> gymnasium.Env:
    """``gymnasium.make(env_id, **kwargs)`` with the errors of this module's doc: a missing
    extra, an unknown id, and (when ``action_space`` is given) an env whose actions ``algorithm``
    cannot take."""
    check_env_id(env_id)
    try:
        env = gymnasium.make(env_id, **kwargs)
    except gymnasium.error.DependencyNotInstalled as exc:
        extra = extra_of(env_id)
        hint = f"; {install_hint(extra)}" if extra else ""
        raise ImportError(f"{env_id} cannot be made here ({exc}){hint}") from exc
    if action_space is not None:
        try:
            check_action_space(env.action_space, env_id, action_space, algorithm)
        except TypeError:
            env.close()
            raise
    return env
