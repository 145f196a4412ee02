"""The multi-agent environments that :class:`parl.env.multiagent_env.MAenv` opens by name.

Two families, both seen through PettingZoo's parallel-env interface (``possible_agents``,
``observation_space(agent)``, ``action_space(agent)``, ``reset``, ``step`` with one dict per
agent, ``state()``):

- MPE's particle scenarios from ``mpe2`` (the package PettingZoo moved them to), with the sizes
  PARL's MADDPG benchmark trains on (two good agents in ``simple_adversary``, three agents and a
  fully shared reward in ``simple_spread``, ...). Every action is always available.
- Level-based foraging from ``lbforaging`` (ids such as ``Foraging-8x8-2p-2f-coop-v3``), a
  gymnasium env with one Tuple entry per agent, adapted here; its action masks are real: a move
  into a wall or a food cell, and a load with no food beside the agent, are not available.

mpe2 moves the particles as PettingZoo has since 1.23 (its v3 scenarios, v4 for
``simple_speaker_listener``): a step moves each particle by its velocity from before that step's
force, so an action first shows in the position one step later. PettingZoo 1.22 and earlier (the
v2 scenarios, v3 for speaker-listener, which PARL's ``MAenv`` opened and on which PARL's
published MADDPG curves were measured) moved it by the velocity after the force.
``legacy_dynamics=True`` gives an MPE scenario that order back (:func:`move_after_pushing`);
nothing else in the scenarios changed.

Both packages come with the ``multiagent`` extra (:func:`parl.extras.install_hint` names the
command); they
are imported when an env is opened, never at import time.
"""

from __future__ import annotations

import importlib
import inspect
import re
import types
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import gymnasium
import numpy as np

from parl.extras import install_hint

__all__ = [
    "MPE_SCENARIOS",
    "ForagingParallelEnv",
    "Opened",
    "ParallelEnv",
    "check_env_id",
    "known_names",
    "move_after_pushing",
    "open_env",
]

# PARL's name -> (mpe2's module, the settings PARL's MADDPG benchmark uses)
MPE_SCENARIOS: dict[str, tuple[str, dict[str, Any]]] = {
    "simple": ("simple_v3", {}),
    "simple_adversary": ("simple_adversary_v3", {"N": 2}),
    "simple_crypto": ("simple_crypto_v3", {}),
    "simple_push": ("simple_push_v3", {}),
    "simple_reference": ("simple_reference_v3", {}),
    "simple_speaker_listener": ("simple_speaker_listener_v4", {}),
    "simple_spread": ("simple_spread_v3", {"N": 3, "local_ratio": 0.0}),
    "simple_tag": ("simple_tag_v3", {"num_good": 1, "num_adversaries": 3, "num_obstacles": 2}),
    "simple_world_comm": (
        "simple_world_comm_v3",
        {"num_good": 2, "num_adversaries": 4, "num_obstacles": 1, "num_food": 2, "num_forests": 2},
    ),
}
MPE_STEPS = 25  # PARL's episode length for MPE (max_cycles)


def _install() -> str:
    return install_hint("multiagent", "mpe2 pettingzoo lbforaging")


def _missing(exc: ImportError, package: str) -> str:
    """`` (missing here: pygame)`` when the import failed on a module other than ``package``
    itself (one of its own dependencies), else nothing."""
    name = (exc.name or "").split(".")[0]
    return f" and its dependencies (missing here: {name})" if name and name != package else ""


class ParallelEnv(Protocol):
    """What ``MAenv`` needs of a PettingZoo parallel env."""

    possible_agents: list[str]

    def observation_space(self, agent: str) -> gymnasium.Space: ...

    def action_space(self, agent: str) -> gymnasium.Space: ...

    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]: ...

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]: ...

    def state(self) -> np.ndarray: ...

    def render(self) -> Any: ...

    def close(self) -> None: ...


class Opened(NamedTuple):
    """An env opened by name: the parallel env, its action masks (``None``: every action is
    always available), the space of its global state, its episode length, and whether its
    state is its agents' observations side by side (then read off them: mpe2's ``state()``
    computes every observation again)."""

    env: ParallelEnv
    masks: Callable[[], list[np.ndarray]] | None
    state_space: gymnasium.spaces.Box
    max_step: int
    state_is_obs: bool


# the ids lbforaging registers when imported (its ``__init__``): sizes 5 to 19, 2 to 9 players,
# 1 to 4 foods, with and without ``-coop`` and a sight of 2 (``-2s``)
_FORAGING_ID = re.compile(r"Foraging(?:-2s)?-(\d+)x(\d+)-(\d+)p-(\d+)f(?:-coop)?-v3")
_FORAGING_IDS = (
    "lbforaging's ids read 'Foraging[-2s]-<size>x<size>-<players>p-<food>f[-coop]-v3' (size 5 "
    "to 19, 2 to 9 players, 1 to 4 foods, -2s for a sight of 2), e.g. "
    "'Foraging-8x8-2p-2f-coop-v3'"
)


def _is_foraging_id(env_id: str) -> bool:
    """Whether lbforaging registers ``env_id``, read off the id without importing it; or an id
    this process registered itself (a foraging variant of the user's own)."""
    if env_id in gymnasium.registry:
        return True
    match = _FORAGING_ID.fullmatch(env_id)
    if match is None:
        return False
    size, other_size, players, food = (int(group) for group in match.groups())
    return size == other_size and 5 <= size <= 19 and 2 <= players <= 9 and 1 <= food <= 4


def known_names() -> list[str]:
    """The names ``open_env`` accepts (PARL's, then mpe2's versioned ids), for error messages."""
    return [*MPE_SCENARIOS, *(module for module, _ in MPE_SCENARIOS.values())]


def _mpe_module(name: str) -> tuple[str, dict[str, Any]] | None:
    if name in MPE_SCENARIOS:
        return MPE_SCENARIOS[name]
    for module, settings in MPE_SCENARIOS.values():
        if name == module:
            return module, settings
    return None


def check_env_id(
    env_id: str,
    *,
    continuous_actions: bool = False,
    legacy_dynamics: bool = False,
    importable: bool = False,
) -> None:
    """Refuse, naming the known ones, a name that ``open_env`` would not open, and the
    settings it would refuse for it (without importing mpe2 or lbforaging). With
    ``importable``, also raise the ImportError naming the install command when the package
    the env needs (mpe2 or lbforaging, and their dependencies) does not import here."""
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str such as 'simple_spread', got {env_id!r}")
    found = _mpe_module(env_id)
    if found is not None:
        if importable:
            _import_mpe(env_id, found[0])
        return
    if not env_id.startswith("Foraging"):
        raise ValueError(
            f"unknown multi-agent env {env_id!r}: the MPE scenarios are {known_names()}, and "
            "level-based foraging ids start with 'Foraging' (e.g. 'Foraging-8x8-2p-2f-coop-v3')"
        )
    if not _is_foraging_id(env_id):
        raise ValueError(f"unknown foraging id {env_id!r}: {_FORAGING_IDS}")
    if legacy_dynamics:
        raise ValueError(
            f"legacy dynamics (legacy_dynamics=True, the examples' --legacy_dynamics) are for "
            f"MPE's particle scenarios; {env_id} is level-based foraging, which has one kind of "
            "movement: leave them off"
        )
    if continuous_actions:
        raise ValueError(
            f"{env_id} has discrete actions only: leave continuous actions off "
            "(continuous_actions=False, no --continuous_actions) for foraging"
        )
    if importable:
        _import_foraging(env_id)


def _import_mpe(env_id: str, module_name: str) -> Any:
    try:
        return importlib.import_module(f"mpe2.{module_name}")
    except ImportError as exc:
        raise ImportError(
            f"MPE scenario {env_id!r} needs mpe2{_missing(exc, 'mpe2')}: {_install()}"
        ) from exc


def _import_foraging(env_id: str) -> Any:
    try:
        from lbforaging.foraging import ForagingEnv  # importing registers the ids too
    except ImportError as exc:
        raise ImportError(
            f"{env_id} needs lbforaging{_missing(exc, 'lbforaging')}: {_install()}"
        ) from exc
    return ForagingEnv


def move_after_pushing(world: Any, p_force: list[Any]) -> None:
    """An MPE ``World``'s ``integrate_state`` in the order of PettingZoo 1.22 and earlier: each
    movable entity's velocity is damped, pushed by its force and capped at its top speed, and
    only then moves its position (mpe2 moves the position first, by the old velocity)."""
    for entity, force in zip(world.entities, p_force, strict=True):
        if not entity.movable:
            continue
        state = entity.state
        state.p_vel = state.p_vel * (1 - world.damping)
        if force is not None:
            state.p_vel += (force / entity.mass) * world.dt
        if entity.max_speed is not None:
            speed = np.sqrt(np.square(state.p_vel[0]) + np.square(state.p_vel[1]))
            if speed > entity.max_speed:
                state.p_vel = state.p_vel / speed * entity.max_speed
        state.p_pos += state.p_vel * world.dt


def check_keywords(what: str, constructor: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Refuse keywords ``constructor`` does not take, naming them and the ones it does: the
    scenario's own ``TypeError`` names its class (``raw_env``), not the env the user asked for."""
    parameters = inspect.signature(constructor).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    accepted = [name for name in parameters if name != "self"]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise TypeError(
            f"{what} takes no keyword {', '.join(map(repr, unknown))}; its keywords are "
            f"{', '.join(accepted)}"
        )


def open_env(
    env_id: str,
    continuous_actions: bool,
    max_cycles: int | None,
    kwargs: dict[str, Any],
    legacy_dynamics: bool = False,
) -> Opened:
    """Open ``env_id``: an MPE scenario (PARL's name or mpe2's versioned id) or an
    ``lbforaging`` id (``Foraging-...``). ``kwargs`` go to the env's constructor;
    ``legacy_dynamics`` gives an MPE scenario PettingZoo 1.22's order of moving
    (:func:`move_after_pushing`)."""
    check_env_id(env_id, continuous_actions=continuous_actions, legacy_dynamics=legacy_dynamics)
    found = _mpe_module(env_id)
    if found is not None:
        module_name, settings = found
        module = _import_mpe(env_id, module_name)
        if kwargs.get("render_mode") not in (None, "human", "rgb_array"):
            # mpe2 takes any mode and then renders nothing
            raise ValueError(
                f"render_mode={kwargs['render_mode']!r}: MPE renders 'human' (a window) or "
                "'rgb_array' (frames), or nothing with None"
            )
        check_keywords(f"MPE scenario {env_id!r}", module.raw_env.__init__, kwargs)
        steps = MPE_STEPS if max_cycles is None else max_cycles
        env = module.parallel_env(
            **{
                **settings,
                "max_cycles": steps,
                "continuous_actions": continuous_actions,
                **kwargs,
            }
        )
        if legacy_dynamics:
            world = env.unwrapped.world
            world.integrate_state = types.MethodType(move_after_pushing, world)
        return Opened(env, None, env.state_space, steps, True)
    if env_id.startswith("Foraging"):
        foraging = ForagingParallelEnv(env_id, max_cycles, kwargs)
        return Opened(
            foraging, foraging.action_masks, foraging.state_space, foraging.max_step, True
        )
    raise AssertionError(f"check_env_id let {env_id!r} through")  # pragma: no cover


# lbforaging's actions, in its order
_NONE, _NORTH, _SOUTH, _WEST, _EAST, _LOAD = range(6)


class ForagingParallelEnv:
    """``lbforaging``'s gymnasium env as a PettingZoo-style parallel env.

    lbforaging reports one ``done`` for all players, both when the food is gone and at its step
    limit; here the first is a termination and the second a truncation. Its global state is the
    players' observations side by side (with full sight, each one already sees the whole field).

    Args:
        env_id: a registered ``Foraging-...`` id.
        max_cycles: the episode length; ``None`` keeps the id's (50).
        kwargs: more arguments of ``lbforaging``'s ``ForagingEnv``.
    """

    def __init__(self, env_id: str, max_cycles: int | None, kwargs: dict[str, Any]) -> None:
        ForagingEnv = _import_foraging(env_id)
        # built from the id's settings, not with gymnasium.make: make would take
        # max_episode_steps for its own TimeLimit, while lbforaging ends episodes itself
        try:
            spec = gymnasium.spec(env_id)
        except gymnasium.error.Error as exc:
            raise ValueError(f"unknown foraging id {env_id!r}: {_FORAGING_IDS}") from exc
        check_keywords(env_id, ForagingEnv.__init__, kwargs)
        settings = {**spec.kwargs, **kwargs}
        if settings.get("render_mode") not in (None, "human", "rgb_array"):
            raise ValueError(
                f"render_mode={settings['render_mode']!r}: foraging renders 'human' (a window) "
                "or 'rgb_array' (frames), or nothing with None"
            )
        if max_cycles is not None:
            settings["max_episode_steps"] = max_cycles
        self.max_step = int(settings["max_episode_steps"])
        self._env = ForagingEnv(**settings)
        self._game: Any = self._env  # untyped: lbforaging's field, players, ...
        obs_spaces = self._env.observation_space
        act_spaces = self._env.action_space
        assert isinstance(obs_spaces, gymnasium.spaces.Tuple)
        assert isinstance(act_spaces, gymnasium.spaces.Tuple)
        self.possible_agents = [f"player_{i}" for i in range(len(obs_spaces))]
        self._obs_spaces = dict(zip(self.possible_agents, obs_spaces.spaces, strict=True))
        self._act_spaces = dict(zip(self.possible_agents, act_spaces.spaces, strict=True))
        boxes = list(obs_spaces.spaces)
        self.state_space = gymnasium.spaces.Box(
            np.concatenate([b.low for b in boxes]),  # type: ignore[attr-defined]
            np.concatenate([b.high for b in boxes]),  # type: ignore[attr-defined]
            dtype=np.float32,
        )
        self._obs: tuple[np.ndarray, ...] = ()

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.Space:
        return self._act_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        # lbforaging spawns a player only on a cell free of every player's position, the last
        # episode's too: forgotten here, an episode is a function of its seed alone
        for player in self._game.players:
            player.position = None
        self._obs, _ = self._env.reset(seed=seed, options=options)
        return self._per_agent(self._obs), {a: {} for a in self.possible_agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        step: Any = self._env.step
        self._obs, rewards, done, _, _ = step(tuple(int(actions[a]) for a in self.possible_agents))
        food_left = bool(self._game.field.sum() > 0)
        terminated, truncated = done and not food_left, done and food_left
        agents = self.possible_agents
        return (
            self._per_agent(self._obs),
            dict(zip(agents, (float(r) for r in rewards), strict=True)),
            dict.fromkeys(agents, terminated),
            dict.fromkeys(agents, truncated),
            {a: {} for a in agents},
        )

    def _per_agent(self, obs: tuple[np.ndarray, ...]) -> dict[str, np.ndarray]:
        return dict(zip(self.possible_agents, obs, strict=True))

    def state(self) -> np.ndarray:
        return np.concatenate(self._obs).astype(np.float32)

    def action_masks(self) -> list[np.ndarray]:
        """One bool mask of the 6 actions per player, from the field as it is now (the rule
        lbforaging applies: it turns an unavailable action into doing nothing)."""
        game = self._game
        field, (rows, cols) = game.field, game.field_size
        masks = []
        for player in game.players:
            r, c = player.position
            mask = np.zeros(6, dtype=bool)
            mask[_NONE] = True
            mask[_NORTH] = r > 0 and field[r - 1, c] == 0
            mask[_SOUTH] = r < rows - 1 and field[r + 1, c] == 0
            mask[_WEST] = c > 0 and field[r, c - 1] == 0
            mask[_EAST] = c < cols - 1 and field[r, c + 1] == 0
            mask[_LOAD] = game.adjacent_food(r, c) > 0
            masks.append(mask)
        return masks

    def render(self) -> Any:
        """What the env was made to render (``render_mode=``): ``"rgb_array"`` a frame,
        ``"human"`` a window (both need a display: lbforaging draws with pyglet); made without a
        mode, nothing but gymnasium's warning, where lbforaging alone would open a window."""
        mode = self._env.render_mode
        if mode is None:
            gymnasium.logger.warn(
                "render() on a foraging env made without a render mode does nothing: pass "
                "render_mode='rgb_array' or 'human' when making it"
            )
            return None
        return self._env.render(mode=mode)

    def close(self) -> None:
        self._env.close()
