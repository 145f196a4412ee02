"""Offline RL datasets from local disk, as D4RL's ``qlearning_dataset`` dict.

Every reader returns the same five arrays, checked: ``observations`` and ``next_observations``
``(N, *obs_shape)`` float32, ``actions`` ``(N, act_dim)`` float32, ``rewards`` ``(N,)`` float32
and ``terminals`` ``(N,)`` bool; ``ReplayMemory.load_from_d4rl`` takes that dict. Nothing here
downloads: a dataset that is not on disk is an error that says how to make or place one.

- ``load_d4rl_hdf5(path)``: a file in D4RL's HDF5 layout (``observations``, ``actions``,
  ``rewards``, ``terminals`` and ``timeouts``, one row per step), turned into transitions the
  way D4RL's ``qlearning_dataset`` does. ``save_d4rl_hdf5`` writes one.
- ``load_minari(dataset)``: a Minari dataset by id (under ``MINARI_DATASETS_PATH``, by default
  ``~/.minari/datasets``) or by folder.
- ``load_episodes(dataset)``: either kind as whole episodes, for Decision Transformer.
- ``check_qlearning_dataset(dataset)``: the checks, for a dict made any other way.
- ``d4rl_normalized_score(env, score)``: D4RL's 0-100 score of a return.
- ``dataset_digest(dataset)``: a short hash of the data, which a checkpoint records.

``h5py`` and ``minari`` come with the ``offline`` extra (the errors name the command that
installs it).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parl.extras import install_hint

__all__ = [
    "D4RL_REF_SCORES",
    "QLEARNING_KEYS",
    "check_qlearning_dataset",
    "d4rl_normalized_score",
    "dataset_digest",
    "load_d4rl_hdf5",
    "load_d4rl_steps",
    "load_episodes",
    "load_minari",
    "qlearning_from_steps",
    "save_d4rl_hdf5",
]

#: The keys of D4RL's ``qlearning_dataset`` dict, which every reader here returns.
QLEARNING_KEYS = ("observations", "actions", "rewards", "next_observations", "terminals")

#: D4RL's reference returns ``(random policy, expert policy)`` of the MuJoCo locomotion tasks:
#: a normalized score is ``100 * (return - random) / (expert - random)``.
D4RL_REF_SCORES: dict[str, tuple[float, float]] = {
    "halfcheetah": (-280.178953, 12135.0),
    "hopper": (-20.272305, 3234.3),
    "walker2d": (1.629008, 4592.3),
}


def _extra_hint() -> str:
    return install_hint("offline")


def _rows(name: str, array: np.ndarray, source: str) -> int:
    if array.ndim == 0:
        raise ValueError(f"{source}: {name!r} must have one row per step, got a scalar")
    return int(array.shape[0])


def _finite(name: str, array: np.ndarray, source: str, rows: np.ndarray | None = None) -> None:
    """Refuse NaN or infinite values, naming the first one's index (its first coordinate
    ``rows[i]`` when ``array`` holds only some rows of the source, ``rows`` listing them)."""
    if array.dtype.kind not in "biuf":
        return  # check_qlearning_dataset names a dtype that is not numeric
    bad = ~np.isfinite(array)
    if bad.any():
        where = np.argwhere(bad)[0].tolist()
        if rows is not None:
            where[0] = int(rows[where[0]])
        raise ValueError(
            f"{source}: {name!r} has {int(bad.sum())} NaN or infinite values (the first at "
            f"index {where}); remove or repair those steps before training"
        )


def _column(name: str, array: np.ndarray, rows: int, source: str) -> np.ndarray:
    """``(N,)`` or ``(N, 1)`` -> ``(N,)``; anything else is an error."""
    if array.shape not in ((rows,), (rows, 1)):
        raise ValueError(
            f"{source}: {name!r} must have shape ({rows},) (one value per step), got {array.shape}"
        )
    return array.reshape(rows)


def _flags(name: str, array: np.ndarray, rows: int, source: str) -> np.ndarray:
    """``(N,)`` or ``(N, 1)`` of booleans (or 0 and 1) -> ``(N,)`` bool; anything else is an
    error (a cast to bool would take any non-zero value as the end of an episode)."""
    column = _column(name, array, rows, source)
    if column.dtype != np.bool_:
        odd = ~np.isin(column, (0, 1)) if column.dtype.kind in "biuf" else np.ones(rows, bool)
        if odd.any():
            first = int(np.flatnonzero(odd)[0])
            raise ValueError(
                f"{source}: {name!r} must hold booleans (or 0 and 1), got "
                f"{column[first].item()!r} at index {first} (dtype {column.dtype})"
            )
    return column.astype(np.bool_)


def check_qlearning_dataset(
    dataset: Mapping[str, Any], source: str = "dataset"
) -> dict[str, np.ndarray]:
    """Check a D4RL ``qlearning_dataset`` dict and return it with PARL's dtypes.

    Args:
        dataset: ``observations``, ``next_observations`` ``(N, *obs_shape)``, ``actions``
            ``(N,)`` or ``(N, act_dim)``, ``rewards`` and ``terminals`` ``(N,)`` or ``(N, 1)``;
            other keys (``timeouts``, ``infos``...) are ignored.
        source: what the dataset is called in error messages (a path, a dataset id).

    Returns:
        The five arrays: float32 except ``terminals`` (bool); ``actions`` at least 2-D.

    Raises:
        ValueError: a key is missing, the arrays disagree on the number of steps or on the
            observation shape, the dataset is empty, or a value is NaN or infinite.
    """
    if not isinstance(dataset, Mapping):
        raise TypeError(
            f"{source}: expected a dict of arrays with keys {list(QLEARNING_KEYS)}, got "
            f"{type(dataset).__name__}"
        )
    missing = [key for key in QLEARNING_KEYS if key not in dataset]
    if missing:
        raise ValueError(
            f"{source}: missing {missing}; a D4RL qlearning dataset has {list(QLEARNING_KEYS)}, "
            f"this one has {sorted(dataset)}"
        )
    arrays = {key: np.asarray(dataset[key]) for key in QLEARNING_KEYS}
    for key, array in arrays.items():
        if array.dtype.kind not in "biuf":
            raise ValueError(
                f"{source}: {key!r} must hold numbers, got dtype {array.dtype}; convert it with "
                "np.asarray(values, dtype=np.float32)"
            )
    rows = _rows("observations", arrays["observations"], source)
    if rows == 0:
        raise ValueError(f"{source}: the dataset has no steps")
    for key, array in arrays.items():
        if _rows(key, array, source) != rows:
            counts = {name: a.shape[0] if a.ndim else None for name, a in arrays.items()}
            raise ValueError(f"{source}: every array must have one row per step; rows: {counts}")
    obs, next_obs = arrays["observations"], arrays["next_observations"]
    if obs.ndim < 2 or obs.shape != next_obs.shape:
        raise ValueError(
            f"{source}: observations and next_observations must both be (N, *obs_shape), got "
            f"{obs.shape} and {next_obs.shape}"
        )
    actions = arrays["actions"]
    if actions.ndim == 1:
        actions = actions.reshape(rows, 1)
    if actions.ndim != 2:
        raise ValueError(f"{source}: actions must be (N, act_dim), got {actions.shape}")
    rewards = _column("rewards", arrays["rewards"], rows, source).astype(np.float32)
    terminals = _flags("terminals", arrays["terminals"], rows, source)
    checked = {
        "observations": obs.astype(np.float32, copy=False),
        "actions": actions.astype(np.float32, copy=False),
        "rewards": rewards,
        "next_observations": next_obs.astype(np.float32, copy=False),
        "terminals": terminals,
    }
    for key in ("rewards", "observations", "next_observations", "actions"):
        _finite(key, checked[key], source)
    return checked


def _no_episode_end(source: str, rows: int) -> ValueError:
    return ValueError(
        f"{source}: no step ends an episode ({rows} steps, every terminal and timeout is "
        "False), so the episodes cannot be told apart; mark each episode's last step in "
        "'terminals' (the task ended) or 'timeouts' (a time limit cut it)"
    )


def qlearning_from_steps(
    observations: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    terminals: np.ndarray,
    timeouts: np.ndarray | None = None,
    source: str = "dataset",
) -> dict[str, np.ndarray]:
    """Transitions from a log of consecutive steps, as D4RL's ``qlearning_dataset`` makes them.

    Step ``i``'s next observation is row ``i + 1``. A step that ends its episode by a time
    limit (``timeouts[i]``) has no next observation in the log and is dropped, and so is the
    last row; a terminal step keeps row ``i + 1`` (the next episode's start, never bootstrapped
    from).

    Args:
        observations: ``(N, *obs_shape)``.
        actions: ``(N, act_dim)``.
        rewards: ``(N,)``.
        terminals: ``(N,)``: the episode ended in a terminal state.
        timeouts: ``(N,)``: the episode was cut by a time limit; ``None``: none was.
        source: what the data is called in error messages.

    Raises:
        ValueError: no step ends an episode (no terminal and no timeout anywhere: the
            episodes cannot be told apart), or the arrays disagree in length.
    """
    observations = np.asarray(observations)
    rows = _rows("observations", observations, source)
    terminals = _flags("terminals", np.asarray(terminals), rows, source)
    if timeouts is None:
        timeouts = np.zeros(rows, dtype=np.bool_)
    timeouts = _flags("timeouts", np.asarray(timeouts), rows, source)
    if not (terminals | timeouts).any():
        raise _no_episode_end(source, rows)
    actions, rewards = np.asarray(actions), np.asarray(rewards)
    counts = {"observations": rows, "actions": len(actions) if actions.ndim else None,
              "rewards": len(rewards) if rewards.ndim else None}  # fmt: skip
    if set(counts.values()) != {rows}:
        raise ValueError(f"{source}: every array must have one row per step; rows: {counts}")
    keep = np.flatnonzero(~timeouts[:-1])
    # the values the transitions use, checked here so that an error names the step's own row
    # (a transition's index differs once a timeout's step is dropped)
    seen = np.union1d(keep, keep + 1)
    _finite("observations", observations[seen], source, seen)
    _finite("actions", actions[keep], source, keep)
    _finite("rewards", rewards[keep], source, keep)
    return check_qlearning_dataset(
        {
            "observations": observations[keep],
            "actions": actions[keep],
            "rewards": rewards.reshape(rows, -1)[keep],
            "next_observations": observations[keep + 1],
            "terminals": terminals[keep],
        },
        source,
    )


def _existing(path: str | os.PathLike[str], what: str, how: str) -> Path:
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise FileNotFoundError(
            f"{what} {os.fspath(path)!r} does not exist (nothing is downloaded); {how}"
        )
    return resolved


_EPISODE_KEYS = ("observations", "actions", "rewards", "terminals")


def load_d4rl_steps(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The rows of a D4RL-format HDF5 file as they are: ``observations``, ``actions``,
    ``rewards``, ``terminals`` and ``timeouts`` (all ``False`` when the file has none).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is not HDF5, a dataset is missing, the file has no steps, or the
            datasets disagree on the number of steps.
    """
    file = _existing(
        path,
        "D4RL dataset file",
        "copy the .hdf5 file there (D4RL keeps its downloads in ~/.d4rl/datasets) or write one "
        "with parl.utils.offline_data.save_d4rl_hdf5",
    )
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - the offline extra is installed in CI
        raise ImportError(f"reading {file} needs h5py: {_extra_hint()}") from exc
    source = os.fspath(file)
    try:
        handle = h5py.File(file, "r")
    except PermissionError:
        raise
    except OSError as exc:  # h5py's own message names neither the file nor the fix
        raise ValueError(
            f"{source} is not an HDF5 file ({str(exc).splitlines()[0]}); give a D4RL .hdf5 "
            "file, or a Minari dataset's folder or id"
        ) from exc
    with handle:
        needed = ("observations", "actions", "rewards", "terminals")
        missing = [key for key in needed if key not in handle]
        if missing:
            raise ValueError(
                f"{source}: missing {missing}; a D4RL file has {list(needed)} and optionally "
                f"'timeouts', this one has {sorted(handle.keys())}"
            )
        steps = {key: np.asarray(handle[key][()]) for key in needed}
        rows = _rows("observations", steps["observations"], source)
        if rows == 0:
            raise ValueError(f"{source}: the file has no steps")
        counts = {key: int(array.shape[0]) if array.ndim else None for key, array in steps.items()}
        if set(counts.values()) != {rows}:
            raise ValueError(f"{source}: every dataset must have one row per step; rows: {counts}")
        steps["terminals"] = _flags("terminals", steps["terminals"], rows, source)
        timeouts = np.asarray(handle["timeouts"][()]) if "timeouts" in handle else np.zeros(rows)
        steps["timeouts"] = _flags("timeouts", timeouts, rows, source)
    return steps


def load_d4rl_hdf5(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read a D4RL-format HDF5 file and return its ``qlearning_dataset`` dict.

    Args:
        path: the ``.hdf5`` file: top-level datasets ``observations``, ``actions``,
            ``rewards``, ``terminals`` and optionally ``timeouts``, one row per step (the
            files D4RL downloads to ``~/.d4rl/datasets``, or ``save_d4rl_hdf5``'s output).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a dataset is missing or malformed (see ``qlearning_from_steps`` and
            ``check_qlearning_dataset``).
    """
    steps = load_d4rl_steps(path)
    return qlearning_from_steps(**steps, source=os.fspath(Path(path).expanduser()))


def save_d4rl_hdf5(
    path: str | os.PathLike[str],
    observations: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    terminals: np.ndarray,
    timeouts: np.ndarray,
) -> None:
    """Write steps in D4RL's HDF5 layout (``load_d4rl_hdf5`` reads them back).

    Args:
        path: the file to write (its folder is created).
        observations: ``(N, *obs_shape)``, the observation each action was taken in.
        actions: ``(N, act_dim)``.
        rewards: ``(N,)``.
        terminals: ``(N,)``: the step ended the episode in a terminal state.
        timeouts: ``(N,)``: a time limit cut the episode after this step.
    """
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - the offline extra is installed in CI
        raise ImportError(f"writing {os.fspath(path)} needs h5py: {_extra_hint()}") from exc
    file = Path(path).expanduser()
    file.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(file, "w") as handle:
        handle["observations"] = np.asarray(observations, dtype=np.float32)
        handle["actions"] = np.asarray(actions, dtype=np.float32)
        handle["rewards"] = np.asarray(rewards, dtype=np.float32)
        handle["terminals"] = np.asarray(terminals, dtype=np.bool_)
        handle["timeouts"] = np.asarray(timeouts, dtype=np.bool_)


def _refuse_nested(where: str, key: str, value: Any) -> None:
    """Refuse a Dict or Tuple space's ``value`` (a dict or tuple of arrays per episode): the
    readers give one array per step."""
    if isinstance(value, Mapping | tuple):
        parts = sorted(value) if isinstance(value, Mapping) else list(range(len(value)))
        space = "Dict" if isinstance(value, Mapping) else "Tuple"
        raise ValueError(
            f"{where}: {key} come from a {space} space (parts {parts}), but the offline "
            f"readers take a Box of {key} (one array per step); flatten them into one array "
            "(gymnasium.spaces.flatten, or gymnasium's FlattenObservation wrapper while "
            "collecting) and make the dataset again"
        )


def _minari_episodes(
    dataset: str | os.PathLike[str],
) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """``(where, episode)`` for each episode of a Minari dataset on disk, checked: the episode's
    ``observations`` (``T + 1`` rows), ``actions`` ``(T, act_dim)``, ``rewards``,
    ``terminations`` and ``truncations`` (``T``)."""
    try:
        import minari
        from minari.storage import get_dataset_path
    except ImportError as exc:
        raise ImportError(f"reading Minari datasets needs minari: {_extra_hint()}") from exc
    name = os.fspath(dataset)
    candidates = [Path(name).expanduser(), get_dataset_path(name)]
    folder = next((c for c in candidates if (c / "data").is_dir() or c.name == "data"), None)
    if folder is None or not folder.exists():
        if Path(name).expanduser().is_absolute() or name.startswith((".", "~")):
            raise FileNotFoundError(
                f"no offline dataset at {name}: a Minari dataset is a folder holding data/, a "
                "D4RL file ends in .hdf5. Make one with scripts/make_offline_dataset.py or "
                "minari.create_dataset_from_buffers, or give a Minari dataset id"
            )
        raise FileNotFoundError(
            f"Minari dataset {name!r} is not on disk: looked for {candidates[0]} and "
            f"{candidates[1]} (nothing is downloaded). Download it once with `minari download "
            f"{name}`, copy its folder under MINARI_DATASETS_PATH, or make one with "
            "minari.create_dataset_from_buffers or scripts/make_offline_dataset.py"
        )
    data = folder if folder.name == "data" else folder / "data"
    loaded = minari.MinariDataset(data)
    found = False
    for episode in loaded.iterate_episodes():
        where = f"{name} episode {episode.id}"
        for key in ("observations", "actions"):
            _refuse_nested(where, key, getattr(episode, key))
        obs = np.asarray(episode.observations)
        steps = len(episode.rewards)
        lengths = {
            "observations": obs.shape[0] - 1,
            "actions": len(episode.actions),
            "terminations": len(episode.terminations),
            "truncations": len(episode.truncations),
        }
        if any(length != steps for length in lengths.values()):
            raise ValueError(
                f"{where}: {steps} rewards but {lengths} (observations hold one more row, "
                "the last next observation)"
            )
        if steps and not (episode.terminations[-1] or episode.truncations[-1]):
            raise ValueError(
                f"{where}: the last step is neither terminated nor truncated, so the episode "
                "has no end; record episodes until terminated or truncated"
            )
        found = True
        yield (
            where,
            {
                "observations": obs,
                "actions": np.asarray(episode.actions).reshape(steps, -1),
                "rewards": np.asarray(episode.rewards).reshape(steps),
                "terminations": np.asarray(episode.terminations).reshape(steps),
                "truncations": np.asarray(episode.truncations).reshape(steps),
            },
        )
    if not found:
        raise ValueError(f"Minari dataset {name!r} has no episodes")


def load_minari(dataset: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read a Minari dataset from local disk as a ``qlearning_dataset`` dict.

    Each episode of ``T`` steps gives ``T`` transitions: observation ``t`` and ``t + 1``,
    action, reward and ``terminations[t]``. Truncated episodes keep their last transition
    (its next observation is in the episode), with ``terminal=False``.

    Args:
        dataset: a dataset id such as ``"mujoco/hopper/medium-v0"``, looked up under
            ``MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``), or the path of a
            dataset's folder (the one holding ``data/``) or of its ``data`` folder.

    Raises:
        FileNotFoundError: the dataset is not on disk (nothing is downloaded).
        ValueError: an episode's arrays disagree in length, an episode ends with neither a
            termination nor a truncation, or a value is NaN.
    """
    parts: dict[str, list[np.ndarray]] = {key: [] for key in QLEARNING_KEYS}
    for _, episode in _minari_episodes(dataset):
        parts["observations"].append(episode["observations"][:-1])
        parts["next_observations"].append(episode["observations"][1:])
        parts["actions"].append(episode["actions"])
        parts["rewards"].append(episode["rewards"])
        parts["terminals"].append(episode["terminations"])
    return check_qlearning_dataset(
        {key: np.concatenate(arrays) for key, arrays in parts.items()}, os.fspath(dataset)
    )


def load_episodes(dataset: str | os.PathLike[str]) -> list[dict[str, np.ndarray]]:
    """Read an offline dataset from local disk as whole episodes (for Decision Transformer).

    Each episode is a dict of ``observations`` ``(T, *obs_shape)`` (the observation each action
    was taken in), ``actions`` ``(T, act_dim)``, ``rewards`` ``(T,)`` float32 and ``terminals``
    ``(T,)`` bool, what :class:`parl.utils.TrajectorySampler` takes.

    Args:
        dataset: a D4RL ``.hdf5``/``.h5`` file (episodes end at a terminal or a timeout; steps
            after the last end make one more episode), else a Minari dataset id or folder as
            for :func:`load_minari`.

    Raises:
        FileNotFoundError: the dataset is not on disk.
        ValueError: as :func:`load_d4rl_hdf5` and :func:`load_minari`.
    """
    name = os.fspath(dataset)
    episodes: list[dict[str, np.ndarray]] = []
    sources: list[str] = []  # what each episode is called in an error: a NaN's index is its own
    if name.endswith((".hdf5", ".h5")):
        steps = load_d4rl_steps(name)
        ends = np.flatnonzero(steps["terminals"] | steps["timeouts"]) + 1
        if ends.size == 0:  # the whole file as one episode is never what was recorded
            raise _no_episode_end(name, len(steps["rewards"]))
        bounds = [0, *ends.tolist()]
        if bounds[-1] < len(steps["rewards"]):
            bounds.append(len(steps["rewards"]))
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            episodes.append({key: steps[key][start:stop] for key in _EPISODE_KEYS})
            sources.append(f"{name} episode {len(sources)} (file rows {start} to {stop - 1})")
    else:
        for where, episode in _minari_episodes(name):
            sources.append(where)
            episodes.append({
                "observations": episode["observations"][:-1],
                "actions": episode["actions"],
                "rewards": episode["rewards"],
                "terminals": episode["terminations"],
            })  # fmt: skip
    for episode, source in zip(episodes, sources, strict=True):
        checked = check_qlearning_dataset(
            {**episode, "next_observations": episode["observations"]}, source
        )
        episode.update({key: checked[key] for key in _EPISODE_KEYS})
    return episodes


def dataset_digest(dataset: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> str:
    """A short hash of a dataset's arrays, the same however the data was named or read: a
    training checkpoint records it, so that a resumed run can tell it is given other data.

    Args:
        dataset: a ``qlearning_dataset`` dict, or a list of episodes (``load_episodes``'s).
    """
    digest = hashlib.sha256()
    for part in [dataset] if isinstance(dataset, Mapping) else dataset:
        for key in sorted(part):
            array = np.ascontiguousarray(part[key])
            digest.update(f"{key} {array.dtype.str} {array.shape};".encode())
            digest.update(array.data)
    return digest.hexdigest()[:16]


def d4rl_normalized_score(env: str, score: float | np.ndarray) -> float | np.ndarray:
    """D4RL's normalized score, ``100 * (score - random) / (expert - random)``.

    Args:
        env: a name that starts with the task, any case: ``"hopper-medium-v2"``,
            ``"Hopper-v5"``, ``"walker2d"``.
        score: an episode return, or an array of them.

    Raises:
        ValueError: no reference returns for ``env`` (they are in ``D4RL_REF_SCORES``).
    """
    key = env.lower().split("-")[0].split("/")[-1]
    if key not in D4RL_REF_SCORES:
        raise ValueError(
            f"no D4RL reference returns for {env!r}; known tasks: {sorted(D4RL_REF_SCORES)}"
        )
    random_score, expert_score = D4RL_REF_SCORES[key]
    normalized = 100.0 * (np.asarray(score, dtype=np.float64) - random_score)
    normalized = normalized / (expert_score - random_score)
    return float(normalized) if normalized.ndim == 0 else normalized
