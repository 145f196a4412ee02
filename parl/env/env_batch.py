"""The envs that one ``RemoteVectorEnv`` actor steps: a block of gymnasium envs behind one
batched interface that reads actions from, and writes results into, arrays it is given (the
actor's slices of the shared buffers).

``EnvList`` holds ordinary gymnasium envs and loops over them; its step loop is the per-env
cost of every actor, so it does no per-step work that the result does not need: no info dicts
are built or kept with ``keep_info=False`` unless auto-reset needs them (SAME_STEP's
``final_obs``, and ``final_info["episode"]`` of ``RecordEpisodeStatistics``).

Semantics are ``gymnasium.vector.SyncVectorEnv``'s: ``NEXT_STEP`` resets an env on the step
after it ended (reward 0, not terminated, not truncated, the action ignored); ``SAME_STEP``
resets it at once and reports ``final_obs`` and ``final_info``.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from parl.validation import check_int

Infos = list[tuple[int, dict]]  # (index in the block, info dict) of the envs that returned one
KEPT = ("episode",)  # final-info keys kept with keep_info=False (episode statistics)


class EnvBatch(Protocol):
    """What an actor needs from its block of envs."""

    num_envs: int
    single_observation_space: gymnasium.Space
    single_action_space: gymnasium.Space

    def reset(self, seeds: Sequence[int | None], options: Any, obs: np.ndarray) -> Infos: ...

    def step(
        self,
        actions: np.ndarray,
        obs: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
    ) -> Infos: ...

    def call(self, name: str, args: tuple, kwargs: dict) -> list[Any]: ...

    def set_attr(self, name: str, values: Sequence[Any]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class MoreBuffers(Protocol):
    """An ``EnvBatch`` that writes more than observations and step results (a multi-agent
    batch's global state and action masks): its actor hands it its slices of every shared
    array the caller allocated, once, before the first reset."""

    def attach(self, buffers: dict[str, np.ndarray]) -> None: ...


def check_same_spaces(
    first: tuple[gymnasium.Space, gymnasium.Space],
    other: tuple[gymnasium.Space, gymnasium.Space],
    which: str,
) -> None:
    """A vector env batches one observation and one action space: ``ValueError`` naming
    ``which`` env differs from env 0 (gymnasium's vector envs refuse the same)."""
    for kind, a, b in zip(("observation", "action"), first, other, strict=True):
        if a != b:
            raise ValueError(
                f"vector env: {which} has the {kind} space {b}, env 0 has {a}; the envs of a "
                "vector env must share their spaces (make them from the same id and wrappers)"
            )


class EnvList:
    """``env_fns[k]()`` is env ``k`` of the block; stepped one after another."""

    def __init__(
        self, env_fns: Sequence[Callable[[], gymnasium.Env]], mode: AutoresetMode, keep_info: bool
    ) -> None:
        self.envs = [fn() for fn in env_fns]
        self.num_envs = len(self.envs)
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        for k, env in enumerate(self.envs):
            try:
                check_same_spaces(
                    (self.single_observation_space, self.single_action_space),
                    (env.observation_space, env.action_space),
                    f"env {k}",
                )
            except ValueError:
                for made in self.envs:
                    made.close()
                raise
        self.same_step = mode is AutoresetMode.SAME_STEP
        self.keep_info = keep_info
        self.autoreset = np.zeros(self.num_envs, dtype=bool)
        self._steps = [env.step for env in self.envs]  # bound once: the loop is the hot path
        self._resets = [env.reset for env in self.envs]

    def reset(self, seeds: Sequence[int | None], options: Any, obs: np.ndarray) -> Infos:
        infos = []
        for k, (reset, seed) in enumerate(zip(self._resets, seeds, strict=True)):
            obs[k], info = reset(seed=seed, options=options)
            if info:
                infos.append((k, info))
        self.autoreset[:] = False
        return infos

    def step(
        self,
        actions: np.ndarray,
        obs: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
    ) -> Infos:
        if self.same_step:
            return self._step_same(actions, obs, rewards, terminations, truncations)
        infos: Infos = []
        keep, autoreset, resets = self.keep_info, self.autoreset, self._resets
        for k, step in enumerate(self._steps):
            if autoreset[k]:
                obs[k], info = resets[k]()
                rewards[k], terminations[k], truncations[k] = 0.0, False, False
            else:
                obs[k], rewards[k], terminations[k], truncations[k], info = step(actions[k])
            if keep and info:
                infos.append((k, info))
        np.logical_or(terminations, truncations, out=autoreset)
        return infos

    def _step_same(
        self,
        actions: np.ndarray,
        obs: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
    ) -> Infos:
        infos: Infos = []
        keep, resets = self.keep_info, self._resets
        for k, step in enumerate(self._steps):
            obs[k], rewards[k], terminations[k], truncations[k], info = step(actions[k])
            if terminations[k] or truncations[k]:
                kept = info if keep else {n: info[n] for n in KEPT if n in info}
                infos.append((k, {"final_obs": obs[k].copy(), "final_info": kept}))
                obs[k], info = resets[k]()
            if keep and info:
                infos.append((k, info))
        return infos

    def call(self, name: str, args: tuple, kwargs: dict) -> list[Any]:
        results = []
        for env in self.envs:
            attr = env.get_wrapper_attr(name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        return results

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        for env, value in zip(self.envs, values, strict=True):
            env.set_wrapper_attr(name, value)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def reset_seeds(seed: int | Sequence[int | None] | None, num_envs: int) -> list[int | None]:
    """The per-env seeds of a vector env's ``reset(seed=...)``: ``s + i`` for env ``i`` from one
    int (a Python or numpy integer, 0 or more), or a list with one seed (or None) per env."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        first = check_int("seed", seed, low=0, owner="reset")
        return [first + i for i in range(num_envs)]
    if not isinstance(seed, Sequence | np.ndarray) or isinstance(seed, str | bytes):
        raise TypeError(
            f"reset: seed must be an int, None, or a list of {num_envs} seeds (ints or None), "
            f"got {type(seed).__name__}"
        )
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"reset needs {num_envs} seeds, got {len(seeds)}")
    return [
        None if s is None else check_int(f"seed[{i}]", s, low=0, owner="reset")
        for i, s in enumerate(seeds)
    ]


def per_env_values(values: Any, num_envs: int) -> list[Any]:
    """The values of a vector env's ``set_attr(name, values)``: one value per env from a list or
    tuple of ``num_envs``, or any other value given to every env."""
    if not isinstance(values, (list, tuple)):
        return [values] * num_envs
    if len(values) != num_envs:
        raise ValueError(f"set_attr needs {num_envs} values, got {len(values)}")
    return list(values)
