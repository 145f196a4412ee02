"""``ReplayMemory``: a fixed-size ring buffer of transitions in preallocated numpy arrays."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from parl.atomic_file import atomic_write
from parl.utils import logger
from parl.validation import check_int

__all__ = ["ReplayMemory", "Transitions"]

Shape = int | tuple[int, ...]


class Transitions(NamedTuple):
    """A batch of transitions; unpacks like PARL's ``(obs, act, reward, next_obs, terminal)``.

    Shapes: ``obs``/``next_obs`` ``(B, *obs_dim)``, ``action`` ``(B,)`` for discrete actions
    (``act_dim=0``) else ``(B, *act_dim)``, ``reward`` ``(B,)``, ``terminal`` ``(B,)``.
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    terminal: np.ndarray


def _shape(name: str, dim: object, allow_zero: bool) -> tuple[int, ...]:
    if isinstance(dim, tuple):
        if not dim:
            raise ValueError(f"{name} must be a positive int or a non-empty tuple of them, got ()")
        return tuple(
            check_int(f"{name}[{i}]", d, low=1, owner="ReplayMemory") for i, d in enumerate(dim)
        )
    low = 0 if allow_zero else 1
    size = check_int(name, dim, low=low, owner="ReplayMemory")
    return () if size == 0 else (size,)


class ReplayMemory:
    """Experience replay with PARL's interface: ``append``, ``sample_batch``, ``size``, ``save``.

    Args:
        max_size: capacity; once full, the oldest transitions are overwritten.
        obs_dim: observation size, or a shape such as ``(4, 84, 84)`` for stacked frames.
        act_dim: action size or shape; ``0`` means one discrete action per step (stored as int64).
        obs_dtype: storage dtype of observations (``np.uint8`` for frames saves 4x memory).
        act_dtype: storage dtype of actions (default int64 if ``act_dim == 0`` else float32).
        rng: generator used by ``sample_batch``; default numpy's global one (seeded by
            ``parl.utils.set_seed``).

    All storage is allocated up front, so running out of memory happens at once, not after
    hours of training.
    """

    def __init__(
        self,
        max_size: int,
        obs_dim: Shape,
        act_dim: Shape,
        obs_dtype: Any = np.float32,
        act_dtype: Any = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.max_size = check_int("max_size", max_size, low=1, owner="ReplayMemory")
        self.obs_shape = _shape("obs_dim", obs_dim, allow_zero=False)
        self.act_shape = _shape("act_dim", act_dim, allow_zero=True)
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise TypeError(
                f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}"
            )
        self._rng = rng
        if act_dtype is None:
            act_dtype = np.int64 if not self.act_shape else np.float32
        self.obs = np.zeros((self.max_size, *self.obs_shape), dtype=obs_dtype)
        self.action = np.zeros((self.max_size, *self.act_shape), dtype=act_dtype)
        self.reward = np.zeros((self.max_size,), dtype=np.float32)
        self.next_obs = np.zeros((self.max_size, *self.obs_shape), dtype=obs_dtype)
        self.terminal = np.zeros((self.max_size,), dtype=np.bool_)
        self._curr_size = 0
        self._curr_pos = 0

    def append(self, obs: Any, act: Any, reward: float, next_obs: Any, terminal: bool) -> None:
        """Store one transition, overwriting the oldest one when full."""
        if np.shape(obs) != self.obs_shape or np.shape(next_obs) != self.obs_shape:
            raise ValueError(
                f"obs and next_obs must have shape {self.obs_shape}, got {np.shape(obs)} and "
                f"{np.shape(next_obs)}"
            )
        if np.shape(act) != self.act_shape:
            raise ValueError(f"act must have shape {self.act_shape}, got {np.shape(act)}")
        pos = self._curr_pos
        self.obs[pos] = obs
        self.action[pos] = act
        self.reward[pos] = reward
        self.next_obs[pos] = next_obs
        self.terminal[pos] = terminal
        self._curr_pos = (pos + 1) % self.max_size
        self._curr_size = min(self._curr_size + 1, self.max_size)

    def append_batch(
        self, obs: Any, act: Any, reward: Any, next_obs: Any, terminal: Any
    ) -> np.ndarray:
        """Store ``n`` transitions at once (e.g. one step of ``n`` parallel envs), without a
        Python loop; returns the slots written. Shapes: ``obs (n, *obs_dim)``, ``act (n,)`` or
        ``(n, *act_dim)``, ``reward (n,)``, ``next_obs (n, *obs_dim)``, ``terminal (n,)``.

        When ``n > max_size`` only the last ``max_size`` transitions are kept, as ``n`` calls to
        ``append`` would.
        """
        obs, next_obs = np.asarray(obs), np.asarray(next_obs)
        act, reward, terminal = np.asarray(act), np.asarray(reward), np.asarray(terminal)
        n = obs.shape[0] if obs.ndim else 0
        expected = {
            "obs": (obs, (n, *self.obs_shape)),
            "act": (act, (n, *self.act_shape)),
            "reward": (reward, (n,)),
            "next_obs": (next_obs, (n, *self.obs_shape)),
            "terminal": (terminal, (n,)),
        }
        for name, (array, shape) in expected.items():
            if array.shape != shape:
                raise ValueError(
                    f"append_batch: {name} must have shape {shape} (n={n} transitions), "
                    f"got {array.shape}"
                )
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        keep = slice(max(0, n - self.max_size), n)
        start = self._curr_pos + max(0, n - self.max_size)
        slots = (start + np.arange(min(n, self.max_size))) % self.max_size
        self.obs[slots] = obs[keep]
        self.action[slots] = act[keep]
        self.reward[slots] = reward[keep]
        self.next_obs[slots] = next_obs[keep]
        self.terminal[slots] = terminal[keep]
        self._curr_pos = (self._curr_pos + n) % self.max_size
        self._curr_size = min(self._curr_size + n, self.max_size)
        return slots

    def load_from_d4rl(self, dataset: Mapping[str, Any]) -> None:
        """Replace the contents with an offline dataset (PARL's method), ready to sample.

        Args:
            dataset: D4RL's ``qlearning_dataset`` dict: ``observations`` and
                ``next_observations`` ``(N, *obs_dim)``, ``actions`` ``(N, *act_dim)``,
                ``rewards`` and ``terminals`` ``(N,)``; what ``parl.utils.offline_data``'s
                readers return.

        Raises:
            ValueError: a key is missing, the arrays are malformed or hold NaN (see
                ``check_qlearning_dataset``), their shapes are not this memory's, or ``N``
                exceeds ``max_size``.
        """
        from parl.utils.offline_data import check_qlearning_dataset

        data = check_qlearning_dataset(dataset, "load_from_d4rl")
        rows = data["rewards"].shape[0]
        logger.info("Dataset Info:")
        for key, array in data.items():
            logger.info(f"key: {key},\tshape: {array.shape},\tdtype: {array.dtype}")
        if rows > self.max_size:
            raise ValueError(
                f"load_from_d4rl: the dataset has {rows} transitions but max_size is "
                f"{self.max_size}; build the ReplayMemory with max_size >= {rows}"
            )
        actions = data["actions"]
        if not self.act_shape and actions.shape[1:] == (1,):
            actions = actions.reshape(rows)  # discrete actions, one per step
        for name, array, shape in (
            ("observations", data["observations"], self.obs_shape),
            ("next_observations", data["next_observations"], self.obs_shape),
            ("actions", actions, self.act_shape),
        ):
            if array.shape[1:] != shape:
                raise ValueError(
                    f"load_from_d4rl: {name} are {array.shape[1:]} per step but this ReplayMemory "
                    f"holds {shape} (obs_dim={self.obs_shape}, act_dim={self.act_shape}); build it "
                    "with the dataset's sizes"
                )
        self.obs[:rows] = data["observations"]
        self.action[:rows] = actions
        self.reward[:rows] = data["rewards"]
        self.next_obs[:rows] = data["next_observations"]
        self.terminal[:rows] = data["terminals"]
        self._curr_size = rows
        self._curr_pos = rows % self.max_size
        logger.info(f"Number of terminals on: {int(data['terminals'].sum())}")

    def make_index(self, batch_size: int) -> np.ndarray:
        """``batch_size`` random indices of stored transitions (with replacement)."""
        if self._curr_size == 0:
            raise ValueError("cannot sample from an empty ReplayMemory; append transitions first")
        if self._rng is None:
            return np.random.randint(self._curr_size, size=batch_size)
        return self._rng.integers(self._curr_size, size=batch_size)

    def sample_batch_by_index(self, batch_idx: np.ndarray) -> Transitions:
        """The transitions at ``batch_idx`` (copies)."""
        return Transitions(
            self.obs[batch_idx],
            self.action[batch_idx],
            self.reward[batch_idx],
            self.next_obs[batch_idx],
            self.terminal[batch_idx],
        )

    def sample_batch(self, batch_size: int) -> Transitions:
        """``batch_size`` transitions drawn uniformly with replacement."""
        batch_size = check_int("batch_size", batch_size, low=1, owner="ReplayMemory.sample_batch")
        return self.sample_batch_by_index(self.make_index(batch_size))

    def size(self) -> int:
        """Number of stored transitions."""
        return self._curr_size

    def __len__(self) -> int:
        return self._curr_size

    def stamp(self) -> list[int]:
        """``[rows held, next row written]``: what a training checkpoint records of the memory
        saved beside it, so that a resume can tell that file from one of another point of the
        run (:meth:`saved_stamp`)."""
        return [self._curr_size, self._curr_pos]

    def load_beside_checkpoint(
        self, pathname: str | os.PathLike[str], stamp: list[int] | None, written: bool = True
    ) -> bool:
        """Load the memory saved beside a training checkpoint, if the file is that memory.

        Args:
            pathname: the file :meth:`save` writes beside the checkpoint.
            stamp: the :meth:`stamp` the checkpoint recorded (``None``: it recorded none, a
                checkpoint from before stamps: the file is taken as it is).
            written: whether the memory was saved with the checkpoint; a file there when it
                was not is from an earlier one (a part of the run without ``--save_rpm``) and
                is left aside.

        Returns:
            Whether the memory was loaded; a warning says why not.

        Raises:
            RuntimeError: the file holds the memory of another point of the run (the run was
                stopped between writing the two files).
        """
        where = os.fspath(pathname)
        if not os.path.exists(where):
            logger.warning("no replay memory %s: resuming with an empty one", where)
            return False
        if not written:
            logger.warning(
                "%s is from an earlier checkpoint (the last one was written without the memory):"
                " resuming with an empty one",
                where,
            )
            return False
        held = self.saved_stamp(where)
        if stamp is not None and list(stamp) != held:
            raise RuntimeError(
                f"{where} (rows and next row {held}) is not the memory written with the "
                f"checkpoint ({list(stamp)}): the run was stopped while writing them; move it "
                "away to resume with an empty memory, or start again without --resume"
            )
        self.load(where)
        return True

    @staticmethod
    def saved_stamp(pathname: str | os.PathLike[str]) -> list[int]:
        """The :meth:`stamp` of the memory a file written by :meth:`save` holds, read without
        loading its rows."""
        with np.load(os.fspath(pathname), allow_pickle=False) as data:
            return [int(data["size"]), int(data["pos"])]

    def _arrays(self) -> dict[str, np.ndarray]:
        return {
            "obs": self.obs,
            "action": self.action,
            "reward": self.reward,
            "next_obs": self.next_obs,
            "terminal": self.terminal,
        }

    def save(self, pathname: str | os.PathLike[str]) -> None:
        """Write the contents to ``pathname`` (a ``.npz`` file, written atomically), with the
        state of ``rng`` when one was given (the global generator is saved by
        ``Agent.save_checkpoint``)."""
        arrays = self._save_arrays()
        atomic_write(pathname, lambda handle: np.savez(handle, **arrays))

    def _save_arrays(self) -> dict[str, Any]:
        """Everything ``save`` writes; subclasses add their own arrays."""
        arrays: dict[str, Any] = {
            "size": np.int64(self._curr_size),
            "pos": np.int64(self._curr_pos),
        }
        arrays.update(self._arrays())
        if self._rng is not None:  # so that a resumed run draws the same batches
            arrays["rng_state"] = np.array(json.dumps(self._rng.bit_generator.state))
        return arrays

    def _load_extra(self, data: Any) -> None:
        """Restore what ``_save_arrays`` added to the base arrays (here: the generator)."""
        if self._rng is not None and "rng_state" in data:
            self._rng.bit_generator.state = json.loads(str(data["rng_state"]))

    def load(self, pathname: str | os.PathLike[str]) -> None:
        """Replace the contents with a file written by ``save``.

        A memory of the same capacity gets every row back at its place. A memory of another
        capacity (a resumed run given a larger or smaller budget) gets the saved transitions in
        the order they were added, the newest ``max_size`` of them when there are more.

        Raises:
            ValueError: when the file lacks an array, or its observations or actions have
                another shape than this memory's.
        """
        where = repr(os.fspath(pathname))
        with np.load(os.fspath(pathname), allow_pickle=False) as data:
            arrays = self._arrays()
            for name, array in arrays.items():
                if name not in data:
                    raise ValueError(f"{where} has no {name!r} array")
                if data[name].shape[1:] != array.shape[1:]:
                    raise ValueError(
                        f"{where}: {name!r} rows have shape {data[name].shape[1:]} but this "
                        f"ReplayMemory's have {array.shape[1:]} (obs_dim={self.obs_shape}, "
                        f"act_dim={self.act_shape})"
                    )
            saved_capacity = len(data["obs"])
            if saved_capacity == self.max_size:
                for name, array in arrays.items():
                    array[...] = data[name]
                self._curr_size = int(data["size"])
                self._curr_pos = int(data["pos"])
            else:
                self._load_resized(data, saved_capacity, where)
            self._load_extra(data)

    def _load_resized(self, data: Any, saved_capacity: int, where: str) -> None:
        if type(self)._save_arrays is not ReplayMemory._save_arrays:
            raise ValueError(
                f"{where} was saved from a memory of max_size={saved_capacity}; a "
                f"{type(self).__name__} loads only into the same max_size, not {self.max_size}"
            )
        size, pos = int(data["size"]), int(data["pos"])
        # the saved rows, oldest first: a full memory's oldest row sits at its write position
        order = np.arange(size) if size < saved_capacity else np.roll(np.arange(size), -pos)
        keep = order[-self.max_size :]
        for name, array in self._arrays().items():
            array[: len(keep)] = data[name][keep]
        self._curr_size = len(keep)
        self._curr_pos = len(keep) % self.max_size
