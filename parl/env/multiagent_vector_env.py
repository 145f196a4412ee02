"""``MultiAgentVectorEnv``: ``num_envs`` copies of a multi-agent env (:class:`MAenv`) stepped in
``@parl.remote_class`` actors, with every result batched as ``(num_envs, n_agents, ...)``.

It is :class:`parl.env.RemoteVectorEnv` (same actors, shared arrays, doorbell, by-value
transport on a cluster or Ray) with a multi-agent batch in each actor: :class:`MAEnvList`
steps its block of envs, writes per-agent rewards and dones, and also the global state and the
available-action masks into two more shared arrays. Agents whose observation or action is
shorter than the longest are zero-padded to it (``obs_shape_n``/``act_shape_n`` give the real
sizes).

Auto-reset: with ``SAME_STEP`` (the default here, as multi-agent rollouts expect) an env whose
episode ended is reset in the same step; its last observation and state are in
``infos["final_obs"]``/``infos["final_state"]`` and its per-agent return and length in
``infos["final_info"]["episode"]`` (``"r"``, ``"l"``). With ``NEXT_STEP`` (gymnasium's default)
it is reset on the following step, whose reward is 0 and whose actions are ignored, and
``infos["episode"]`` comes with the step that ended it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

import parl
from parl.env.env_batch import Infos, check_same_spaces
from parl.env.env_worker import Builder
from parl.env.multiagent_env import _SLACK, MAenv
from parl.env.multiagent_scenarios import check_env_id
from parl.env.remote_vector_env import RemoteVectorEnv, _check_common, _split
from parl.validation import check_int

__all__ = ["MAEnvList", "MultiAgentVectorEnv"]


def _agent_spaces(env: MAenv) -> tuple[gymnasium.spaces.Box, gymnasium.Space]:
    """One env's observations and actions as single arrays: ``(n_agents, longest obs)``
    float32, and an index per agent (``MultiDiscrete``) or ``(n_agents, longest action)`` in
    ``[-1, 1]``."""
    obs = gymnasium.spaces.Box(
        -np.inf, np.inf, (env.n, max(int(np.prod(s)) for s in env.obs_shape_n)), np.float32
    )
    act: gymnasium.Space
    if env.continuous_actions:
        act = gymnasium.spaces.Box(-1.0, 1.0, (env.n, max(env.act_shape_n)), np.float32)
    else:
        act = gymnasium.spaces.MultiDiscrete(env.act_shape_n)
    return obs, act


class MAEnvList:
    """One actor's block of multi-agent envs, ``env_fns[k]()`` being env ``k``, stepped one
    after another (the multi-agent :class:`parl.env.env_batch.EnvList`).

    Args:
        env_fns: functions that each build one :class:`MAenv`.
        mode: gymnasium's auto-reset mode (NEXT_STEP or SAME_STEP).
        keep_info: unused (kept for the actor's interface): the infos hold only what auto-reset
            reports.
    """

    def __init__(
        self, env_fns: Sequence[Callable[[], MAenv]], mode: AutoresetMode, keep_info: bool
    ) -> None:
        self.envs = [fn() for fn in env_fns]
        first = self.envs[0]
        if not isinstance(first, MAenv):
            raise TypeError(f"MultiAgentVectorEnv's env_fns must build MAenv, got {first!r}")
        self.num_envs = len(self.envs)
        spaces = _agent_spaces(first)
        self.single_observation_space: gymnasium.Space = spaces[0]
        self.single_action_space: gymnasium.Space = spaces[1]
        for k, env in enumerate(self.envs[1:], start=1):
            try:
                check_same_spaces(
                    (self.single_observation_space, self.single_action_space),
                    _agent_spaces(env),
                    f"env {k}",
                )
            except ValueError:
                self.close()
                raise
        self.same_step = mode is AutoresetMode.SAME_STEP
        self.autoreset = np.zeros(self.num_envs, dtype=bool)
        self.returns = np.zeros((self.num_envs, first.n), dtype=np.float64)
        self.lengths = np.zeros(self.num_envs, dtype=np.int64)
        self._continuous = first.continuous_actions
        self._act_sizes = list(first.act_shape_n)
        self.state = np.zeros((self.num_envs, first.state_shape), np.float32)
        self.avail_actions = np.zeros((self.num_envs, first.n, first.n_actions), bool)

    def attach(self, buffers: dict[str, np.ndarray]) -> None:
        """Write the global state and the masks into the actor's slices of the shared arrays.

        Args:
            buffers: the actor's slices, by name (``"state"`` and ``"avail_actions"`` here).
        """
        self.state, self.avail_actions = buffers["state"], buffers["avail_actions"]

    def _observe(self, k: int, obs_n: list[np.ndarray], obs: np.ndarray) -> None:
        """Env ``k``'s observations, state and masks into the arrays (padding with zeros)."""
        row = obs[k]
        for i, o in enumerate(obs_n):
            flat = np.ravel(o)
            row[i, : flat.size] = flat
            row[i, flat.size :] = 0.0
        env = self.envs[k]
        self.state[k] = env.state()
        self.avail_actions[k] = env.get_avail_actions()

    def _env_actions(self, actions: np.ndarray) -> list[Any]:
        if self._continuous:  # drop the padding of shorter actions
            return [actions[i, :size] for i, size in enumerate(self._act_sizes)]
        return list(actions)

    def reset(self, seeds: Sequence[int | None], options: Any, obs: np.ndarray) -> Infos:
        """Reset every env of the block, env ``k`` with ``seeds[k]``.

        Args:
            seeds: one seed (or None) per env.
            options: passed to every env's reset.
            obs: the block's observations, written in place.
        """
        for k, (env, seed) in enumerate(zip(self.envs, seeds, strict=True)):
            self._observe(k, env.reset(seed=seed, options=options), obs)
        self.autoreset[:] = False
        self.returns[:] = 0.0
        self.lengths[:] = 0
        return []

    def step(
        self,
        actions: np.ndarray,
        obs: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
    ) -> Infos:
        """Step every env of the block (auto-resetting), writing the results in place.

        Args:
            actions: ``(k, n_agents)`` indices or ``(k, n_agents, longest action)`` floats.
            obs: ``(k, n_agents, longest obs)``, written.
            rewards: ``(k, n_agents)``, written.
            terminations: ``(k, n_agents)``, written.
            truncations: ``(k, n_agents)``, written.
        """
        infos: Infos = []
        for k, env in enumerate(self.envs):
            if self.autoreset[k]:  # NEXT_STEP: this step only resets the env
                self._observe(k, env.reset(), obs)
                rewards[k], terminations[k], truncations[k] = 0.0, False, False
                self.autoreset[k] = False
                continue
            obs_n, reward_n, done_n, _ = env.step(self._env_actions(actions[k]))
            rewards[k], terminations[k], truncations[k] = (
                reward_n,
                env.terminations,
                env.truncations,
            )
            self.returns[k] += rewards[k]
            self.lengths[k] += 1
            self._observe(k, obs_n, obs)
            if not any(done_n):
                continue
            episode = {"r": self.returns[k].copy(), "l": int(self.lengths[k])}
            self.returns[k], self.lengths[k] = 0.0, 0
            if self.same_step:
                final = {"final_obs": obs[k].copy(), "final_state": self.state[k].copy()}
                infos.append((k, {**final, "final_info": {"episode": episode}}))
                self._observe(k, env.reset(), obs)
            else:
                infos.append((k, {"episode": episode}))
                self.autoreset[k] = True
        return infos

    def call(self, name: str, args: tuple, kwargs: dict) -> list[Any]:
        """Call method ``name`` of every env (an attribute is read); results in env order."""
        results = []
        for env in self.envs:
            attr = getattr(env, name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        return results

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """Set attribute ``name`` of env ``k`` to ``values[k]``."""
        for env, value in zip(self.envs, values, strict=True):
            setattr(env, name, value)

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            env.close()


class MultiAgentVectorEnv(RemoteVectorEnv):
    """``len(env_fns)`` multi-agent envs in ``num_workers`` actors, batched.

    ``reset()`` returns observations ``(num_envs, n_agents, obs_dim)``; ``step(actions)`` takes
    ``(num_envs, n_agents)`` action indices (or ``(num_envs, n_agents, act_dim)`` in
    ``[-1, 1]`` for continuous actions) and returns observations, rewards, terminations and
    truncations, all ``(num_envs, n_agents, ...)``, and the infos. After either,
    :meth:`state` and :meth:`get_avail_actions` give the envs' global states and action masks.
    ``reset(seed=s)`` seeds env ``i`` with ``s + i``: the trajectories are those of the same
    envs stepped one after another in this process.

    Args:
        env_fns: functions that each build one :class:`MAenv` (``functools.partial(MAenv,
            "simple_spread")``; a lambda travels to the actor by value).
        num_workers: actors to spread the envs over (at most ``len(env_fns)``).
        autoreset_mode: ``SAME_STEP`` (default) or ``NEXT_STEP``, see the module's docs.
        transport: ``"shm"``, ``"values"`` or ``None`` (pick), as for ``RemoteVectorEnv``.

    Attributes:
        n_agents: agents per env.
        agents_name: their names.
        obs_shape_n: each agent's observation size (before padding).
        act_shape_n: each agent's action size (before padding).
        state_shape: the length of an env's global state.
        n_actions: the width of the action masks (the largest action size).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], MAenv]],
        num_workers: int = 2,
        autoreset_mode: str | AutoresetMode = AutoresetMode.SAME_STEP,
        transport: str | None = None,
    ) -> None:
        if not env_fns or not all(callable(fn) for fn in env_fns):
            raise TypeError(
                "MultiAgentVectorEnv needs a non-empty list of functions that build MAenv"
            )
        transport = _check_common(num_workers, transport)
        self._was_reset = False
        ranges = _split(len(env_fns), min(num_workers, len(env_fns)))
        builders: list[Builder] = [
            functools.partial(MAEnvList, [env_fns[i] for i in r]) for r in ranges
        ]
        self._start(builders, ranges, autoreset_mode, True, transport)

    @classmethod
    def make(
        cls,
        env_id: str,
        num_envs: int,
        num_workers: int = 2,
        *,
        continuous_actions: bool = False,
        autoreset_mode: str | AutoresetMode = AutoresetMode.SAME_STEP,
        transport: str | None = None,
        **kwargs: Any,
    ) -> MultiAgentVectorEnv:
        """``num_envs`` envs ``MAenv(env_id, continuous_actions, **kwargs)`` in ``num_workers``
        actors (each actor builds its own; only the arguments travel).

        Args:
            env_id: an MPE scenario or a foraging id, as :class:`MAenv` takes.
            num_envs: how many envs.
            num_workers: actors to spread them over.
            continuous_actions: continuous actions in ``[-1, 1]`` (MPE).
            autoreset_mode: ``SAME_STEP`` (default) or ``NEXT_STEP``.
            transport: ``"shm"``, ``"values"`` or ``None`` (pick).
            **kwargs: more arguments of :class:`MAenv` (``max_cycles=``, scenario settings).
        """
        check_env_id(
            env_id,
            continuous_actions=bool(continuous_actions),
            legacy_dynamics=bool(kwargs.get("legacy_dynamics", False)),
        )
        num_envs = check_int("num_envs", num_envs, low=1)
        fn = functools.partial(MAenv, env_id, continuous_actions, **kwargs)
        return cls([fn] * num_envs, num_workers, autoreset_mode, transport)

    def _allocate(self) -> dict[str, np.ndarray]:
        # the single-agent arrays, with rewards and dones per agent, plus state and masks
        first = self._workers[0]
        layout = {
            name: parl.get(first.call(name, (), {}))[0]
            for name in ("agents_name", "obs_shape_n", "act_shape_n", "state_shape", "n_actions")
        }
        self.agents_name: list[str] = layout["agents_name"]
        self.n_agents = len(self.agents_name)
        self.obs_shape_n: list[Any] = layout["obs_shape_n"]
        self.act_shape_n: list[int] = layout["act_shape_n"]
        self.state_shape: int = layout["state_shape"]
        self.n_actions: int = layout["n_actions"]
        bufs = super()._allocate()
        zeros = np.zeros if self._values else parl.shm.zeros
        n, agents = self.num_envs, self.n_agents
        bufs["rewards"] = zeros((n, agents), np.float64)
        bufs["terminations"] = zeros((n, agents), np.bool_)
        bufs["truncations"] = zeros((n, agents), np.bool_)
        bufs["state"] = zeros((n, self.state_shape), np.float32)
        bufs["avail_actions"] = zeros((n, agents, self.n_actions), np.bool_)
        return bufs

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env; ``seed=s`` gives env ``i`` the seed ``s + i``."""
        result = super().reset(seed=seed, options=options)
        self._was_reset = True
        return result

    def step_async(self, actions: Any) -> None:
        """Start a step with ``actions`` (batched), checked here first: an action an env would
        refuse (out of range, not available now) fails the whole step before any env moves,
        where an actor's error would come after the envs before it had stepped."""
        if not self._was_reset:  # the masks are still all False: every action would be refused
            raise RuntimeError("step() before reset(): call reset() first")
        if not self._pending:  # a pending step is refused by the base class
            self._check_actions(actions)
        super().step_async(actions)

    def _check_actions(self, actions: Any) -> None:
        """Refuse, naming the env and the agent, an action ``MAenv.step`` would refuse (shape
        and dtype are checked when the actions are written)."""
        act = np.asarray(actions)
        if act.shape != self.action_space.shape or act.dtype.kind not in "fiu":
            return
        space = self.single_action_space
        if isinstance(space, gymnasium.spaces.MultiDiscrete):
            if act.dtype.kind == "f":
                return
            sizes = space.nvec[None, :]
            outside = (act < 0) | (act >= sizes)
            if outside.any():
                k, i = np.argwhere(outside)[0]
                raise ValueError(
                    f"env {k}, agent {i} ({self.agents_name[i]}): action {act[k, i]} is outside "
                    f"[0, {sizes[0, i]}); no env was stepped"
                )
            masks = self._bufs["avail_actions"]
            taken = np.take_along_axis(masks, act[..., None].astype(np.intp), axis=2)[..., 0]
            if self.autoreset_mode is AutoresetMode.NEXT_STEP:
                # an env whose episode just ended ignores its actions: it is reset instead
                ended = (self._bufs["terminations"] | self._bufs["truncations"]).any(axis=1)
                taken[ended] = True
            if not taken.all():
                k, i = np.argwhere(~taken)[0]
                raise ValueError(
                    f"env {k}, agent {i} ({self.agents_name[i]}): action {act[k, i]} is not "
                    f"available now (available: {np.flatnonzero(masks[k, i]).tolist()}); pick "
                    "among get_avail_actions(); no env was stepped"
                )
            return
        # continuous: each agent's own columns (the rest is padding, dropped in the actor)
        width = act.shape[-1]
        real = np.arange(width)[None, :] < np.asarray(self.act_shape_n)[:, None]
        bad = real[None] & ~(np.isfinite(act) & (np.abs(act) <= 1.0 + _SLACK))
        if bad.any():
            k, i, j = np.argwhere(bad)[0]
            raise ValueError(
                f"env {k}, agent {i} ({self.agents_name[i]}): continuous actions lie in "
                f"[-1, 1], got {act[k, i, j]} at index {j}; squash them (e.g. tanh) or clip "
                "them; no env was stepped"
            )

    def state(self) -> np.ndarray:
        """The envs' global states after the last reset or step, ``(num_envs, state_shape)``."""
        return self._bufs["state"].copy()

    def get_avail_actions(self) -> np.ndarray:
        """The envs' action masks after the last reset or step, ``(num_envs, n_agents,
        n_actions)`` (bool; a shorter action space's row is padded with False)."""
        return self._bufs["avail_actions"].copy()
