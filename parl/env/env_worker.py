"""The actor of ``RemoteVectorEnv``: one block of envs, the shared arrays it reads actions from
and writes results into, and the doorbell that steps it (see :mod:`parl.env.remote_vector_env`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

import parl
from parl.env.env_batch import EnvBatch, Infos, MoreBuffers
from parl.shm.doorbell import ActorBell

__all__ = ["BUFFERS", "Builder", "EnvWorker", "RemoteEnvWorker"]

BUFFERS = ("obs", "actions", "rewards", "terminations", "truncations")  # every batch has these
Builder = Callable[[AutoresetMode, bool], EnvBatch]


class EnvWorker:
    """The envs of one actor: ``build(mode, keep_info)`` makes envs ``start..`` of the vector."""

    def __init__(self, build: Builder, mode: str, keep_info: bool) -> None:
        self.batch = build(AutoresetMode(mode), keep_info)
        self.bufs: dict[str, np.ndarray] = {}
        self.bell: ActorBell | None = None

    def spaces(self) -> tuple[gymnasium.Space, gymnasium.Space]:
        return self.batch.single_observation_space, self.batch.single_action_space

    def attach(self, buffers: dict[str, np.ndarray], start: int) -> None:
        """Take this actor's slices of ``buffers``: ``BUFFERS``, and any more that the caller
        allocated for a batch that writes them (see :class:`parl.env.env_batch.MoreBuffers`)."""
        stop = start + self.batch.num_envs
        self.bufs = {name: buf[start:stop] for name, buf in buffers.items()}
        for name, buf in self.bufs.items():
            if not buf.flags.writeable:  # a read-only copy (Ray's object store): own one
                self.bufs[name] = buf.copy()
        if isinstance(self.batch, MoreBuffers):
            self.batch.attach(self.bufs)

    def open_bell(self, paths: tuple[str, str]) -> bool:
        """Open the doorbell's pipes; False where they are not here (another host)."""
        try:
            self.bell = ActorBell(paths)
        except OSError:
            return False
        return True

    def serve_bell(self) -> None:
        """Step at each ring until the caller stops this call (see parl.shm.doorbell)."""
        assert self.bell is not None
        self.bell.serve(self._step_shared)

    def reset(self, seeds: Sequence[int | None], options: Any, values: bool) -> tuple[Infos, Any]:
        """Reset the envs; with ``values``, also return copies of the results (a dict)."""
        bufs = self.bufs
        infos = self.batch.reset(seeds, options, bufs["obs"])
        bufs["terminations"][:] = False
        bufs["truncations"][:] = False
        return infos, (self._results() if values else None)

    def _results(self) -> dict[str, np.ndarray]:
        """Copies of every buffer the envs write (all but the actions)."""
        return {name: buf.copy() for name, buf in self.bufs.items() if name != "actions"}

    def _step_shared(self) -> Infos:
        b = self.bufs
        return self.batch.step(
            b["actions"], b["obs"], b["rewards"], b["terminations"], b["truncations"]
        )

    def step(self, actions: Any = None) -> Any:
        """Without ``actions``: step from and into the shared arrays, return the infos. With
        them (``transport="values"``): return the infos and copies of the results (a dict)."""
        if actions is None:
            return self._step_shared()
        self.bufs["actions"][:] = actions
        infos = self._step_shared()
        return infos, self._results()

    def call(self, name: str, args: tuple, kwargs: dict) -> list[Any]:
        return self.batch.call(name, args, kwargs)

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        self.batch.set_attr(name, values)

    def close(self) -> None:
        self.batch.close()
        if self.bell is not None:
            self.bell.close()
            self.bell = None


RemoteEnvWorker = parl.remote_class(wait=False)(EnvWorker)
