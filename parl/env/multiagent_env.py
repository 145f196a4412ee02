"""``MAenv``: PARL's multi-agent env interface (lists with one entry per agent) over PettingZoo
parallel envs: MPE's scenarios from ``mpe2`` and level-based foraging from ``lbforaging`` (see
:mod:`parl.env.multiagent_scenarios`).

PARL's MADDPG script uses it as it is::

    env = MAenv("simple_spread")            # or "simple_spread_v3", continuous_actions=True
    obs_n = env.reset()                     # one observation per agent
    obs_n, reward_n, done_n, info_n = env.step(action_n)

A discrete action is an index (an int, or an int array of one element), or (as PARL's MADDPG
gives it) a vector of ``n`` scores whose argmax is taken; a continuous action lies in ``[-1, 1]`` and is mapped onto the action space's
``[low, high]``. ``done_n[i]`` is true when agent ``i``'s episode ended, by termination or at the
episode length (``max_step``, 25 for MPE as in PARL); ``terminations``/``truncations`` tell
which. For centralised critics and value mixers the env also gives a global ``state()``, the
available-action masks (``get_avail_actions()``, all ones for MPE) and SMAC's names for them
(``get_obs``, ``get_state``, ``get_avail_agent_actions``, ``get_env_info``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from parl.env.multiagent_scenarios import open_env
from parl.validation import check_bool, check_int

__all__ = ["MAenv"]

_SLACK = 1e-3  # continuous actions may overshoot [-1, 1] by this much (rounding in a tanh)


class MAenv:
    """A multi-agent env with one list entry per agent, in PARL's interface.

    Args:
        scenario_name: an MPE scenario, by PARL's name (``"simple_spread"``, ``"simple_tag"``,
            ...) or mpe2's versioned id (``"simple_spread_v3"``), or a level-based foraging id
            (``"Foraging-8x8-2p-2f-coop-v3"``).
        continuous_actions: continuous actions in ``[-1, 1]`` instead of discrete ones (MPE).
        max_cycles: the episode length; ``None`` keeps PARL's 25 for MPE (50 for foraging).
        legacy_dynamics: move MPE's particles as PettingZoo 1.22 and earlier did (the
            scenarios PARL's ``MAenv`` opened and its published MADDPG curves were measured
            on): a step's force moves the particle in that step. mpe2's own order (the
            default) moves it one step later; see ``parl.env.multiagent_scenarios``.
        **kwargs: more arguments of the scenario's constructor (e.g. ``N=4`` for
            ``simple_spread``), over the settings PARL uses.

    Attributes:
        n: the number of agents.
        agents_name: their names, in the order of every list.
        observation_space: one gymnasium space per agent.
        action_space: one gymnasium space per agent (the env's own: a continuous action is
            given in ``[-1, 1]`` and mapped onto it).
        obs_shape_n: observation sizes (PARL's ``get_shape`` of each space).
        act_shape_n: action sizes: the number of actions, or the length of a continuous one.
        state_space: the space of :meth:`state`.
        share_observation_space: ``state_space`` once per agent (MAPPO's centralised critic).
        max_step: the episode length.
        terminations: after a step, whether each agent's episode ended by termination.
        truncations: after a step, whether it ended at the episode length.
    """

    def __init__(
        self,
        scenario_name: str,
        continuous_actions: bool = False,
        *,
        max_cycles: int | None = None,
        legacy_dynamics: bool = False,
        **kwargs: Any,
    ) -> None:
        check_bool("continuous_actions", continuous_actions)
        check_bool("legacy_dynamics", legacy_dynamics)
        if max_cycles is not None:
            max_cycles = check_int("max_cycles", max_cycles, low=1, what="an int >= 1 or None")
        opened = open_env(
            scenario_name, bool(continuous_actions), max_cycles, kwargs, bool(legacy_dynamics)
        )
        self.scenario_name = scenario_name
        self.env = opened.env
        self.continuous_actions = bool(continuous_actions)
        self.legacy_dynamics = bool(legacy_dynamics)
        self.max_step = opened.max_step
        self._masks = opened.masks
        self._state_is_obs = opened.state_is_obs
        self.agents_name: list[str] = list(self.env.possible_agents)
        self.n = len(self.agents_name)
        self.observation_space = [self.env.observation_space(a) for a in self.agents_name]
        self.action_space = [self.env.action_space(a) for a in self.agents_name]
        self.obs_shape_n = [self.get_shape(s) for s in self.observation_space]
        self.act_shape_n = [self.get_shape(s) for s in self.action_space]
        self.state_space = opened.state_space
        self.share_observation_space = [self.state_space] * self.n
        self.terminations = [False] * self.n
        self.truncations = [False] * self.n
        self._next_seed: int | None = None
        self._obs: list[np.ndarray] = []
        self._no_step = "step() before reset(): call reset() first"

    @staticmethod
    def get_shape(input_space: gymnasium.Space) -> Any:
        """The size PARL gives a space: a ``Box``'s length (its shape if not 1-D), a
        ``Discrete``'s number of actions.

        Args:
            input_space: an observation or action space.
        """
        if isinstance(input_space, spaces.Box):
            return input_space.shape[0] if len(input_space.shape) == 1 else input_space.shape
        if isinstance(input_space, spaces.Discrete):
            return int(input_space.n)
        raise TypeError(f"MAenv handles Box and Discrete spaces, got {input_space}")

    @property
    def state_shape(self) -> int:
        """The length of :meth:`state`."""
        return int(self.state_space.shape[0])

    @property
    def n_actions(self) -> int:
        """The largest action size over the agents (the width of :meth:`get_avail_actions`)."""
        return max(self.act_shape_n)

    def seed(self, seed: int | None = None) -> list[int | None]:
        """Seed the next :meth:`reset` (old gym's way; ``reset(seed=...)`` does the same).

        Args:
            seed: the seed (0 or more), or None for fresh randomness.
        """
        self._next_seed = _seed(seed)
        return [self._next_seed]

    def reset(self, seed: int | None = None, options: dict | None = None) -> list[np.ndarray]:
        """Start an episode; returns one observation per agent.

        Args:
            seed: seeds the env's random generator (then later resets continue from it);
                None uses the seed given to :meth:`seed`, if any.
            options: passed to the env's reset.
        """
        seed = _seed(seed)
        if seed is None:
            seed, self._next_seed = self._next_seed, None
        obs, _ = self.env.reset(seed=seed, options=options)
        self._obs = [obs[a] for a in self.agents_name]
        self.terminations = [False] * self.n
        self.truncations = [False] * self.n
        self._no_step = ""
        return list(self._obs)

    def step(
        self, actions: Sequence[Any] | np.ndarray
    ) -> tuple[list[np.ndarray], list[float], list[bool], list[dict]]:
        """Step every agent; returns lists of observations, rewards, dones and infos.

        Args:
            actions: one action per agent, in ``agents_name`` order (a list, or an array or a
                tensor whose first axis is the agent): an index (an int or an int array of one
                element) or a vector of ``n`` scores (its argmax) for a discrete space, a vector
                in ``[-1, 1]`` for a continuous one.
        """
        if self._no_step:
            raise RuntimeError(self._no_step)
        if not isinstance(actions, (np.ndarray, Sequence)) and hasattr(actions, "__array__"):
            actions = np.asarray(actions)  # every agent's action in one tensor (torch's)
        # a lone action (an int, a 0-d array) or a generator has no len(): name what was given
        listed = isinstance(actions, Sequence) and not isinstance(actions, (str, bytes))
        sized = listed or (isinstance(actions, np.ndarray) and actions.ndim > 0)
        if not sized or len(actions) != self.n:
            got = len(actions) if sized else actions
            raise ValueError(
                f"step() needs a list of {self.n} actions (one per agent, in the order "
                f"{self.agents_name}), got {got!r}"
            )
        masks = self._masks() if self._masks is not None else None
        env_actions = {
            name: self._env_action(i, act, None if masks is None else masks[i])
            for i, (name, act) in enumerate(zip(self.agents_name, actions, strict=True))
        }
        obs, rewards, terms, truncs, infos = self.env.step(env_actions)
        missing = [a for a in self.agents_name if a not in obs]
        if missing:
            raise RuntimeError(f"agents {missing} left the episode early; MAenv needs all agents")
        self._obs = [obs[a] for a in self.agents_name]
        self.terminations = [bool(terms[a]) for a in self.agents_name]
        self.truncations = [bool(truncs[a]) for a in self.agents_name]
        dones = [t or u for t, u in zip(self.terminations, self.truncations, strict=True)]
        if any(dones):
            self._no_step = "step() after the episode ended (done): call reset() first"
        return (
            list(self._obs),
            [float(rewards[a]) for a in self.agents_name],
            dones,
            [infos.get(a, {}) for a in self.agents_name],
        )

    def _env_action(self, i: int, action: Any, mask: np.ndarray | None) -> Any:
        """Agent ``i``'s action in the env's own form, or a clear error."""
        space, who = self.action_space[i], f"agent {i} ({self.agents_name[i]})"
        act = np.asarray(action)
        if isinstance(space, spaces.Box):
            if act.shape != space.shape or act.dtype.kind not in "fiu":
                raise ValueError(
                    f"{who}: a continuous action is a float vector of shape {space.shape}, got "
                    f"{action!r}"
                )
            if not np.all(np.isfinite(act)) or np.any(np.abs(act) > 1.0 + _SLACK):
                raise ValueError(
                    f"{who}: continuous actions lie in [-1, 1] (mapped onto the space's "
                    f"[{space.low.min()}, {space.high.max()}]), got {action!r}; squash them "
                    "(e.g. tanh) or clip them"
                )
            low, high = space.low, space.high
            mapped = low + (act + 1.0) * ((high - low) / 2.0)
            return np.clip(mapped, low, high).astype(space.dtype, copy=False)
        assert isinstance(space, spaces.Discrete)
        n = int(space.n)
        if act.shape == (1,) and act.dtype.kind in "iu":
            # an index in a batch of one (a Categorical over (1, n) probabilities samples
            # shape (1,), as PARL's COMA agent gives it); SMAC and old gym took it too
            act = act.reshape(())
        if act.ndim == 0:
            if act.dtype.kind not in "iu":
                raise TypeError(f"{who}: a discrete action is an int in [0, {n}), got {action!r}")
            index = int(act)
            if not 0 <= index < n:
                raise ValueError(f"{who}: action {index} is outside [0, {n})")
        elif act.shape == (n,):
            if act.dtype.kind not in "biuf" or np.isnan(act).any():
                # argmax would take the first NaN: a diverged policy would act on as action 0
                raise ValueError(
                    f"{who}: a vector of {n} scores must be numbers, not NaN, got {action!r}"
                )
            index = int(np.argmax(act))  # PARL's MADDPG gives scores (a relaxed one-hot)
        else:
            raise ValueError(
                f"{who}: a discrete action is an int in [0, {n}) or a vector of {n} scores, "
                f"got shape {act.shape}"
            )
        if mask is not None and not mask[index]:
            raise ValueError(
                f"{who}: action {index} is not available now (available: "
                f"{np.flatnonzero(mask).tolist()}); pick among get_avail_agent_actions({i})"
            )
        return index

    def state(self) -> np.ndarray:
        """The global state (MPE's and foraging's: every agent's observation side by side),
        float32."""
        if not self._obs:
            raise RuntimeError("state() before reset(): call reset() first")
        if self._state_is_obs:
            return np.concatenate(self._obs, axis=None).astype(np.float32, copy=False)
        return np.asarray(self.env.state(), dtype=np.float32)

    def get_state(self) -> np.ndarray:
        """:meth:`state`, by SMAC's name."""
        return self.state()

    def get_obs(self) -> list[np.ndarray]:
        """The agents' current observations (those of the last reset or step)."""
        return list(self._obs)

    def get_avail_agent_actions(self, agent_id: int) -> np.ndarray:
        """Agent ``agent_id``'s available actions now, one bool per action.

        Args:
            agent_id: the agent's index in ``agents_name``.
        """
        agent_id = check_int("agent_id", agent_id, low=0, high=self.n - 1)
        if self._masks is None:
            return np.ones(self.act_shape_n[agent_id], dtype=bool)
        return self._current_masks("get_avail_agent_actions()")[agent_id]

    def get_avail_actions(self) -> np.ndarray:
        """Every agent's available actions, shape ``(n, n_actions)`` (bool); an agent with
        fewer actions than ``n_actions`` has its row padded with False."""
        masks = (
            self._current_masks("get_avail_actions()")
            if self._masks is not None
            else [np.ones(size, dtype=bool) for size in self.act_shape_n]
        )
        out = np.zeros((self.n, self.n_actions), dtype=bool)
        for i, mask in enumerate(masks):
            out[i, : len(mask)] = mask
        return out

    def _current_masks(self, what: str) -> list[np.ndarray]:
        """The env's own masks, which read its field: there is none before the first reset."""
        assert self._masks is not None
        if not self._obs:
            raise RuntimeError(f"{what} before reset(): call reset() first")
        return self._masks()

    def get_env_info(self) -> dict[str, Any]:
        """SMAC's summary: ``n_agents``, ``n_actions``, ``obs_shape`` (the largest),
        ``state_shape`` and ``episode_limit``."""
        return {
            "n_agents": self.n,
            "n_actions": self.n_actions,
            "obs_shape": max(int(np.prod(s)) for s in self.obs_shape_n),
            "state_shape": self.state_shape,
            "episode_limit": self.max_step,
        }

    def render(self) -> Any:
        """Render the env (as it was made: pass ``render_mode=`` to the constructor)."""
        return self.env.render()

    def close(self) -> None:
        """Close the env."""
        self.env.close()

    def __enter__(self) -> MAenv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # PARL's MAenv is a gym.Wrapper: other public names are the parallel env's
        # (``possible_agents``, ``unwrapped``, ``agents``, ...)
        if name.startswith("_") or "env" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"MAenv({self.scenario_name!r}, continuous_actions={self.continuous_actions})"


def _seed(seed: Any) -> int | None:
    return None if seed is None else check_int("seed", seed, low=0, owner="MAenv")
