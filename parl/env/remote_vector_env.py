"""``RemoteVectorEnv``: gymnasium's vector-env API over sub-environments in ``@parl.remote_class``
actors, several per actor, exchanging data through shared arrays.

The caller allocates one shared array (``parl.shm``) each for the observations, actions,
rewards, terminations and truncations of all envs and hands them to the actors once. A step is
then: write the actions, call ``step()`` on every actor (a call with no arguments), and each actor
steps its envs and writes its slice of the results in place. Nothing is pickled per step except
the info dicts of envs that returned a non-empty one (``infos=False`` drops those that are not
needed for auto-reset). With ``transport="values"`` the actors return their slices instead (for
carriers without shared memory, e.g. other hosts).

Semantics follow ``gymnasium.vector.SyncVectorEnv``: ``reset(seed=s)`` seeds env ``i`` with
``s + i``; ``autoreset_mode`` is gymnasium's (``NEXT_STEP``, the default, or ``SAME_STEP`` with
``infos["final_obs"]``/``infos["final_info"]``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

import parl
from parl.remote.context import actors_share_memory

__all__ = ["RemoteVectorEnv"]

_BUFFERS = ("obs", "actions", "rewards", "terminations", "truncations")
_RESULTS = ("obs", "rewards", "terminations", "truncations")
_KEPT = ("episode",)  # final-info keys kept with infos=False (episode statistics)


class _EnvWorker:
    """The envs of one actor: ``env_fns[k]`` is env ``start + k`` of the vector."""

    def __init__(self, env_fns: Sequence[Callable[[], gymnasium.Env]], mode: str) -> None:
        self.envs = [fn() for fn in env_fns]
        self.mode = AutoresetMode(mode)
        self.autoreset = np.zeros(len(self.envs), dtype=bool)
        self.bufs: dict[str, np.ndarray] = {}

    def spaces(self) -> tuple[gymnasium.Space, gymnasium.Space]:
        return self.envs[0].observation_space, self.envs[0].action_space

    def attach(self, buffers: dict[str, np.ndarray], start: int) -> None:
        stop = start + len(self.envs)
        self.bufs = {name: buffers[name][start:stop] for name in _BUFFERS}
        for name, buf in self.bufs.items():
            if not buf.flags.writeable:  # a read-only copy (Ray's object store): own one
                self.bufs[name] = buf.copy()

    def reset(
        self, seeds: Sequence[int | None], options: Any, values: bool
    ) -> tuple[list[tuple[int, dict]], Any]:
        infos = []
        for k, (env, seed) in enumerate(zip(self.envs, seeds, strict=True)):
            obs, info = env.reset(seed=seed, options=options)
            self.bufs["obs"][k] = obs
            if info:
                infos.append((k, info))
        self.bufs["terminations"][:] = False
        self.bufs["truncations"][:] = False
        self.autoreset[:] = False
        return infos, (self.bufs["obs"].copy() if values else None)

    def step(self, keep_info: bool, actions: Any = None) -> Any:
        bufs = self.bufs
        if actions is not None:
            bufs["actions"][:] = actions
        obs, acts, rew, term, trunc = (bufs[name] for name in _BUFFERS)
        infos = []
        same_step = self.mode is AutoresetMode.SAME_STEP
        for k, env in enumerate(self.envs):
            if self.autoreset[k]:
                obs[k], info = env.reset()
                rew[k], term[k], trunc[k] = 0.0, False, False
            else:
                obs[k], rew[k], term[k], trunc[k], info = env.step(acts[k])
                if same_step and (term[k] or trunc[k]):
                    kept = info if keep_info else {n: info[n] for n in _KEPT if n in info}
                    final = {"final_obs": obs[k].copy(), "final_info": kept}
                    infos.append((k, final))
                    obs[k], info = env.reset()
            if keep_info and info:
                infos.append((k, info))
        if not same_step:
            np.logical_or(term, trunc, out=self.autoreset)
        if actions is None:
            return infos
        return infos, obs.copy(), rew.copy(), term.copy(), trunc.copy()

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


_RemoteEnvWorker = parl.remote_class(wait=False)(_EnvWorker)


def _split(num_envs: int, num_workers: int) -> list[range]:
    """Contiguous index ranges, sizes differing by at most one."""
    base, extra = divmod(num_envs, num_workers)
    ranges, start = [], 0
    for w in range(num_workers):
        size = base + (1 if w < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges


def _close_workers(workers: list[Any]) -> None:
    for worker in workers:
        try:
            parl.close_actor(worker)
        except Exception:  # noqa: BLE001 - closing is best effort at interpreter exit
            pass


class RemoteVectorEnv(gymnasium.vector.VectorEnv):
    """``num_envs = len(env_fns)`` envs in ``num_workers`` actors (contiguous blocks).

    Args:
        env_fns: functions that each build one gymnasium env (``functools.partial(
            gymnasium.make, "CartPole-v1")``, or a lambda: it travels to the actor by value).
        num_workers: actors to spread the envs over (at most ``len(env_fns)``).
        autoreset_mode: gymnasium's ``AutoresetMode`` (or its string value).
        infos: return the envs' info dicts; ``False`` keeps only what auto-reset needs
            (``final_obs``, and ``final_info["episode"]`` of ``RecordEpisodeStatistics``).
        transport: ``"shm"`` (shared arrays, local actors) or ``"values"`` (results returned
            by value, for carriers without shared memory); ``None`` (default) picks ``"shm"``
            for local workers and ``"values"`` after ``parl.connect`` to a cluster, SSH hosts
            or Ray, where a shared array crosses as a copy.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gymnasium.Env]],
        num_workers: int = 2,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        infos: bool = True,
        transport: str | None = None,
    ) -> None:
        if not env_fns or not all(callable(fn) for fn in env_fns):
            raise TypeError("RemoteVectorEnv needs a non-empty list of functions that build envs")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive int, got {num_workers!r}")
        if transport is None:
            transport = "shm" if actors_share_memory() else "values"
        if transport not in ("shm", "values"):
            raise ValueError(f"transport must be 'shm' or 'values', got {transport!r}")
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            raise ValueError("RemoteVectorEnv supports NEXT_STEP and SAME_STEP auto-reset")
        self.num_envs = len(env_fns)
        self._keep_info = bool(infos)
        self._values = transport == "values"
        self._ranges = _split(self.num_envs, min(num_workers, self.num_envs))
        self._workers = [
            _RemoteEnvWorker([env_fns[i] for i in r], self.autoreset_mode.value)
            for r in self._ranges
        ]
        self._finalizer = weakref.finalize(self, _close_workers, list(self._workers))
        obs_space, act_space = self._workers[0].spaces().get()
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(obs_space, self.num_envs)
        self.action_space = batch_space(act_space, self.num_envs)
        self.metadata = {"autoreset_mode": self.autoreset_mode}
        self._bufs = self._allocate()
        parl.get(
            [
                w.attach(self._bufs, r.start)
                for w, r in zip(self._workers, self._ranges, strict=True)
            ]
        )

    def _allocate(self) -> dict[str, np.ndarray]:
        def shared(space: gymnasium.Space, name: str) -> np.ndarray:
            if space.shape is None or space.dtype is None:
                raise TypeError(
                    f"RemoteVectorEnv needs array {name} spaces (Box, Discrete, MultiDiscrete, "
                    f"MultiBinary), got {space}"
                )
            return parl.shm.zeros(space.shape, space.dtype)

        n = self.num_envs
        return {
            "obs": shared(self.observation_space, "observation"),
            "actions": shared(self.action_space, "action"),
            "rewards": parl.shm.zeros(n, np.float64),
            "terminations": parl.shm.zeros(n, np.bool_),
            "truncations": parl.shm.zeros(n, np.bool_),
        }

    def _merge(self, per_worker: list[list[tuple[int, dict]]]) -> dict[str, Any]:
        infos: dict[str, Any] = {}
        for r, worker_infos in zip(self._ranges, per_worker, strict=True):
            for k, info in worker_infos:
                infos = self._add_info(infos, info, r.start + k)
        return infos

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env; ``seed=s`` gives env ``i`` the seed ``s + i``."""
        if seed is None or isinstance(seed, int):
            seeds: list[int | None] = [
                None if seed is None else seed + i for i in range(self.num_envs)
            ]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset needs {self.num_envs} seeds, got {len(seeds)}")
        futures = [
            w.reset(seeds[r.start : r.stop], options, self._values)
            for w, r in zip(self._workers, self._ranges, strict=True)
        ]
        results = parl.get(futures)
        if self._values:
            for (_, obs), r in zip(results, self._ranges, strict=True):
                self._bufs["obs"][r.start : r.stop] = obs
        return self._bufs["obs"].copy(), self._merge([infos for infos, _ in results])

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env with ``actions`` (batched); envs that ended auto-reset."""
        bufs = self._bufs
        bufs["actions"][...] = actions
        if not self._values:
            results = parl.get([w.step(self._keep_info) for w in self._workers])
        else:
            futures = [
                w.step(self._keep_info, bufs["actions"][r.start : r.stop])
                for w, r in zip(self._workers, self._ranges, strict=True)
            ]
            results = []
            for (infos, *arrays), r in zip(parl.get(futures), self._ranges, strict=True):
                for name, array in zip(_RESULTS, arrays, strict=True):
                    bufs[name][r.start : r.stop] = array
                results.append(infos)
        return (
            bufs["obs"].copy(),
            bufs["rewards"].copy(),
            bufs["terminations"].copy(),
            bufs["truncations"].copy(),
            self._merge(results),
        )

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every env (an attribute is read); results in env order."""
        results = parl.get([w.call(name, args, kwargs) for w in self._workers])
        return tuple(item for chunk in results for item in chunk)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr needs {self.num_envs} values, got {len(values)}")
        parl.get(
            [
                w.set_attr(name, list(values[r.start : r.stop]))
                for w, r in zip(self._workers, self._ranges, strict=True)
            ]
        )

    def __enter__(self) -> RemoteVectorEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close_extras(self, **kwargs: Any) -> None:
        """Close the envs, then end the actors (idempotent)."""
        if self._finalizer.alive:
            try:
                parl.get([w.close() for w in self._workers], timeout=10)
            finally:
                self._finalizer()
