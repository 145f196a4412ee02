"""``RemoteVectorEnv``: gymnasium's vector-env API over sub-environments in ``@parl.remote_class``
actors, several per actor, exchanging data through shared arrays.

The caller allocates one shared array (``parl.shm``) each for the observations, actions,
rewards, terminations and truncations of all envs and hands them to the actors once. A step is
then: write the actions, ring every actor's doorbell (one byte down a pipe, see
:mod:`parl.shm.doorbell`), and each actor steps its envs, writes its slice of the results in
place and answers with one byte. Nothing is pickled per step except the info dicts of envs that
returned a non-empty one (``infos=False`` drops those that are not needed for auto-reset).
``step_async``/``step_wait`` split a step so that the caller's own work (its policy) overlaps
the actors' env work. Actors that cannot open the doorbell (another host) are stepped with
ordinary remote calls; with ``transport="values"`` the actors return their slices instead (for
carriers without shared memory).

Semantics follow ``gymnasium.vector.SyncVectorEnv``: ``reset(seed=s)`` seeds env ``i`` with
``s + i``; ``autoreset_mode`` is gymnasium's (``NEXT_STEP``, the default, or ``SAME_STEP`` with
``infos["final_obs"]``/``infos["final_info"]``).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

import parl
from parl.env.env_batch import EnvList, Infos, check_same_spaces, per_env_values, reset_seeds
from parl.env.env_worker import Builder, RemoteEnvWorker
from parl.env.fast_envs import fast_builder
from parl.remote import actors_share_memory
from parl.shm.doorbell import DONE, INFOS, CallerBell, answers
from parl.validation import check_int

__all__ = ["RemoteVectorEnv"]


def _split(num_envs: int, num_workers: int) -> list[range]:
    """Contiguous index ranges, sizes differing by at most one."""
    base, extra = divmod(num_envs, num_workers)
    ranges, start = [], 0
    for w in range(num_workers):
        size = base + (1 if w < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges


def _close_workers(workers: list[Any], bells: list[CallerBell]) -> None:
    for bell in bells:
        bell.close()
    for worker in workers:
        try:
            parl.close_actor(worker)
        except Exception:  # noqa: BLE001 - closing is best effort at interpreter exit
            pass


def _check_common(num_workers: int, transport: str | None) -> str:
    """Checks the arguments ``__init__`` and ``make`` share; returns the transport to use."""
    check_int("num_workers", num_workers, low=1)
    if transport is None:
        transport = "shm" if actors_share_memory() else "values"
    if transport not in ("shm", "values"):
        raise ValueError(f"transport must be 'shm' or 'values', got {transport!r}")
    return transport


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
            or Ray, which cannot share memory (a ``parl.shm`` array is refused there).

    ``RemoteVectorEnv.make(env_id, num_envs)`` builds the envs from a registered id and picks
    the fastest form that gives the same trajectories (see :meth:`make`).
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
        transport = _check_common(num_workers, transport)
        ranges = _split(len(env_fns), min(num_workers, len(env_fns)))
        builders: list[Builder] = [
            functools.partial(EnvList, [env_fns[i] for i in r]) for r in ranges
        ]
        self._start(builders, ranges, autoreset_mode, infos, transport)

    @classmethod
    def make(
        cls,
        env_id: str,
        num_envs: int,
        num_workers: int = 2,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        infos: bool = True,
        transport: str | None = None,
        vectorize: bool = True,
        **kwargs: Any,
    ) -> RemoteVectorEnv:
        """``num_envs`` envs ``gymnasium.make(env_id, **kwargs)`` in ``num_workers`` actors.

        Each actor builds its own envs (nothing but the id travels) without gymnasium's passive
        env checker (it only warns about a malformed env on the first reset and step). With
        ``vectorize`` (the default), an env that :mod:`parl.env.fast_envs` knows is stepped in
        a faster form with the same trajectories as gymnasium's own envs for the same seeds
        (env ``i`` seeded ``seed + i``, same auto-reset): CartPole as one numpy batch per actor
        (from 4 envs per actor), HalfCheetah-v5 without its Python wrappers. Other ids, and
        ``vectorize=False``, step one gymnasium env at a time.
        """
        if not isinstance(env_id, str):
            raise TypeError(f"env_id must be a registered gymnasium id (str), got {env_id!r}")
        num_envs = check_int("num_envs", num_envs, low=1)
        transport = _check_common(num_workers, transport)
        gymnasium.spec(env_id)  # raises gymnasium's error for an unknown id, here
        ranges = _split(num_envs, min(num_workers, num_envs))
        builders: list[Builder] = []
        for r in ranges:
            fast = fast_builder(env_id, len(r), kwargs) if vectorize else None
            if fast is None:
                fn = functools.partial(gymnasium.make, env_id, disable_env_checker=True, **kwargs)
                fast = functools.partial(EnvList, [fn] * len(r))
            builders.append(fast)
        self = cls.__new__(cls)
        self._start(builders, ranges, autoreset_mode, infos, transport)
        return self

    def _start(
        self,
        builders: list[Builder],
        ranges: list[range],
        autoreset_mode: str | AutoresetMode,
        infos: bool,
        transport: str,
    ) -> None:
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            raise ValueError("RemoteVectorEnv supports NEXT_STEP and SAME_STEP auto-reset")
        self.num_envs = ranges[-1].stop
        self._values = transport == "values"
        self._ranges = ranges
        self._bells: list[CallerBell] = []
        self._serving: list[Any] = []  # per actor: the future of its serve_bell() call, or None
        self._rung: list[bool] = []  # per actor: the last ring reached it
        self._futures: list[Any] | None = None  # step_async without the doorbell
        self._pending = False
        self._workers = [
            RemoteEnvWorker(build, self.autoreset_mode.value, bool(infos)) for build in builders
        ]
        self._finalizer = weakref.finalize(self, _close_workers, list(self._workers), self._bells)
        spaces = parl.get([worker.spaces() for worker in self._workers])
        obs_space, act_space = spaces[0]
        for worker_spaces, r in zip(spaces[1:], ranges[1:], strict=True):
            try:
                check_same_spaces(spaces[0], worker_spaces, f"env {r.start}")
            except ValueError:
                self._finalizer()  # end the actors: the caller gets no env to close
                raise
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(obs_space, self.num_envs)
        self.action_space = batch_space(act_space, self.num_envs)
        self.metadata = {"autoreset_mode": self.autoreset_mode}
        self._bufs = self._allocate()
        parl.get(
            [w.attach(self._bufs, r.start) for w, r in zip(self._workers, ranges, strict=True)]
        )
        if not self._values:
            self._open_bells()

    def _open_bells(self) -> None:
        bells = [CallerBell() for _ in self._workers]
        self._bells.extend(bells)
        try:
            opened = parl.get(
                [w.open_bell(b.paths) for w, b in zip(self._workers, bells, strict=True)]
            )
        except BaseException:
            for bell in bells:
                bell.unlink()
            raise
        if not all(opened):  # some actor is elsewhere: ordinary calls for all
            for bell in bells:
                bell.close()
            self._bells.clear()
            return
        for bell in bells:
            bell.connect()
        self._serving = [None] * len(bells)
        self._rung = [False] * len(bells)

    def _allocate(self) -> dict[str, np.ndarray]:
        # shared with local workers; with values, each actor gets a copy to step into (a
        # parl.shm array cannot cross to a cluster, SSH hosts or Ray)
        zeros = np.zeros if self._values else parl.shm.zeros

        def shared(space: gymnasium.Space, name: str) -> np.ndarray:
            if space.shape is None or space.dtype is None:
                raise TypeError(
                    f"RemoteVectorEnv needs array {name} spaces (Box, Discrete, MultiDiscrete, "
                    f"MultiBinary), got {space}"
                )
            return zeros(space.shape, space.dtype)

        n = self.num_envs
        return {
            "obs": shared(self.observation_space, "observation"),
            "actions": shared(self.action_space, "action"),
            "rewards": zeros(n, np.float64),
            "terminations": zeros(n, np.bool_),
            "truncations": zeros(n, np.bool_),
        }

    def _merge(self, per_worker: list[Infos | None]) -> dict[str, Any]:
        infos: dict[str, Any] = {}
        for r, worker_infos in zip(self._ranges, per_worker, strict=True):
            for k, info in worker_infos or ():
                infos = self._add_info(infos, info, r.start + k)
        return infos

    # -- the doorbell's serve() calls: running while steps come, stopped for anything else ---

    def _idle(self, what: str) -> None:
        """Make the actors ready for an ordinary call: no step pending, serve() stopped."""
        if self._pending:
            raise gymnasium.error.AlreadyPendingCallError(
                f"{what} while a step_async() is pending: call step_wait() first", "step"
            )
        running = [
            (bell, f) for bell, f in zip(self._bells, self._serving, strict=True) if f is not None
        ]
        for bell, _ in running:
            bell.stop()
        self._serving = [None] * len(self._bells)
        parl.get([f for _, f in running])

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env; ``seed=s`` gives env ``i`` the seed ``s + i``."""
        seeds = reset_seeds(seed, self.num_envs)
        self._idle("reset()")
        futures = [
            w.reset(seeds[r.start : r.stop], options, self._values)
            for w, r in zip(self._workers, self._ranges, strict=True)
        ]
        results = parl.get(futures)
        if self._values:
            for (_, arrays), r in zip(results, self._ranges, strict=True):
                self._put_results(arrays, r)
        return self._bufs["obs"].copy(), self._merge([infos for infos, _ in results])

    def _put_results(self, arrays: dict[str, np.ndarray], r: range) -> None:
        """Copy an actor's results (``transport="values"``) into the caller's arrays."""
        for name, array in arrays.items():
            self._bufs[name][r.start : r.stop] = array

    def step_async(self, actions: Any) -> None:
        """Start a step with ``actions`` (batched) and return at once; see :meth:`step_wait`."""
        if self._pending:
            raise gymnasium.error.AlreadyPendingCallError(
                "step_async() called twice: call step_wait() for the step already started",
                "step",
            )
        bufs = self._bufs
        _put_actions(bufs["actions"], actions)
        if self._bells:
            serving, rung = self._serving, self._rung
            for i, bell in enumerate(self._bells):
                if serving[i] is None:
                    serving[i] = self._workers[i].serve_bell()
                try:
                    bell.ring()
                    rung[i] = True
                except OSError:  # the actor is gone: step_wait raises its error
                    rung[i] = False
        elif self._values:
            self._futures = [
                w.step(bufs["actions"][r.start : r.stop])
                for w, r in zip(self._workers, self._ranges, strict=True)
            ]
        else:
            self._futures = [w.step() for w in self._workers]
        self._pending = True

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The results of the step started by :meth:`step_async` (copies: the next step
        overwrites the shared arrays)."""
        if not self._pending:
            raise gymnasium.error.NoAsyncCallError("step_wait() without step_async()", "step")
        self._pending = False
        bufs = self._bufs
        if self._bells:
            per_worker = self._answers()
        else:
            futures, self._futures = self._futures or [], None
            results = parl.get(futures)
            if not self._values:
                per_worker = results
            else:
                per_worker = []
                for (infos, arrays), r in zip(results, self._ranges, strict=True):
                    self._put_results(arrays, r)
                    per_worker.append(infos)
        return (
            bufs["obs"].copy(),
            bufs["rewards"].copy(),
            bufs["terminations"].copy(),
            bufs["truncations"].copy(),
            self._merge(per_worker),
        )

    def _answers(self) -> list[Infos | None]:
        """Every actor's answer to the ring; a failed actor's serve() call raises its error
        (the step's exception with its remote traceback, or the actor's death)."""
        try:
            got = answers(
                [b if rung else None for b, rung in zip(self._bells, self._rung, strict=True)]
            )
        except BaseException:  # e.g. Ctrl-C: an answer left unread would answer the next ring
            self._drop_bells()
            raise
        failed = [i for i, (kind, _) in enumerate(got) if kind not in (DONE, INFOS)]
        if failed:
            # every failed serve() call is done with: the next step starts new ones (a stale
            # one would leave its actor's ring unanswered) and close() does not raise its error
            futures = [self._serving[i] for i in failed]
            for i in failed:
                self._serving[i] = None
            for future in futures[1:]:  # the same step failed there too: the first error tells
                with contextlib.suppress(Exception):
                    future.get()
            futures[0].get()  # raises
            raise RuntimeError(f"actor {failed[0]} of RemoteVectorEnv stopped stepping")
        return [infos for _, infos in got]

    def _drop_bells(self) -> None:
        """Go on with ordinary calls. Closing our ends ends the actors' serve() calls (after
        the step in flight, whose answer finds no reader: their errors are not news); they
        are waited for, as that step still reads the shared actions."""
        for bell in self._bells:
            bell.close()
        self._bells.clear()
        for future in self._serving:
            if future is not None:
                with contextlib.suppress(Exception):
                    future.get(timeout=10)
        self._serving, self._rung = [], []

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env with ``actions`` (batched); envs that ended auto-reset."""
        self.step_async(actions)
        return self.step_wait()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every env (an attribute is read); results in env order."""
        self._idle("call()")
        results = parl.get([w.call(name, args, kwargs) for w in self._workers])
        return tuple(item for chunk in results for item in chunk)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """The attribute ``name`` of every env (a method is called with no arguments).

        Args:
            name: The attribute to read.

        Returns:
            One value per env, in env order.
        """
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set the attribute ``name`` of every env.

        Args:
            name: The attribute to set.
            values: One value per env (a list or tuple of ``num_envs`` items), or one value that
                every env gets.
        """
        values = per_env_values(values, self.num_envs)
        self._idle("set_attr()")
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
        """Close the envs, then end the actors (idempotent). An actor that died already was
        reported by the call that met its death; closing the others goes on."""
        if not self._finalizer.alive:
            return
        try:
            with contextlib.suppress(parl.ParlError):
                if self._pending:
                    self.step_wait()
            self._pending = False
            with contextlib.suppress(parl.ParlError):
                self._idle("close()")
            futures = []
            for worker in self._workers:
                with contextlib.suppress(parl.ParlError):
                    futures.append(worker.close())
            for future in futures:
                with contextlib.suppress(parl.ParlError):
                    future.get(timeout=10)
        finally:
            self._pending = False
            self._finalizer()


def _put_actions(buf: np.ndarray, actions: Any) -> None:
    """Write ``actions`` into the shared buffer without silent broadcasting or lossy casts
    (gymnasium's envs reject both: a float action is not in a ``Discrete`` space)."""
    if np.shape(actions) != buf.shape:
        raise ValueError(
            f"step() needs one action per env, shape {buf.shape}, got shape {np.shape(actions)}"
        )
    try:
        np.copyto(buf, actions, casting="same_kind")
    except TypeError:
        dtype = np.asarray(actions).dtype
        raise TypeError(
            f"step() got actions of dtype {dtype}, which the action space's {buf.dtype} cannot "
            f"hold without changing them; pass {buf.dtype} actions (e.g. actions.astype("
            f"np.{buf.dtype}))"
        ) from None
