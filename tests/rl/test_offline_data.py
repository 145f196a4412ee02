"""Offline datasets: ``ReplayMemory.load_from_d4rl``, the D4RL HDF5 and Minari readers, and
the errors a malformed or missing dataset gives. Every dataset is made here, in ``tmp_path``."""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from parl.utils import ReplayMemory
from parl.utils.offline_data import (
    QLEARNING_KEYS,
    check_qlearning_dataset,
    d4rl_normalized_score,
    dataset_digest,
    load_d4rl_hdf5,
    load_episodes,
    load_minari,
    qlearning_from_steps,
    save_d4rl_hdf5,
)

from . import test_parl_parity as parity

# PARL's published wheel, downloaded once per run (skips without network, except under CI=true)
parl_wheel = parity.parl_wheel

OBS_DIM, ACT_DIM = 3, 2


def _needed(name: str) -> ModuleType:
    """Import ``name`` (the ``offline`` extra); skip without it, except under ``CI=true``."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is missing: CI installs the offline extra", False)
        pytest.skip(f"{name} is not installed (pip install 'parl-torch[offline]')")


def qlearning(rows: int = 10, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "observations": rng.normal(size=(rows, OBS_DIM)).astype(np.float32),
        "actions": rng.uniform(-1, 1, size=(rows, ACT_DIM)).astype(np.float32),
        "rewards": rng.normal(size=rows).astype(np.float32),
        "next_observations": rng.normal(size=(rows, OBS_DIM)).astype(np.float32),
        "terminals": rng.random(rows) < 0.2,
    }


def steps(rows: int = 12) -> dict[str, np.ndarray]:
    """A log of consecutive steps: episode 1 ends terminal at step 3, episode 2 times out at
    step 7, episode 3 is cut by the end of the log."""
    data = qlearning(rows)
    terminals = np.zeros(rows, dtype=bool)
    timeouts = np.zeros(rows, dtype=bool)
    terminals[3], timeouts[7] = True, True
    return {
        "observations": data["observations"],
        "actions": data["actions"],
        "rewards": data["rewards"],
        "terminals": terminals,
        "timeouts": timeouts,
    }


# -- ReplayMemory.load_from_d4rl ----------------------------------------------------------------
def test_load_from_d4rl_fills_the_memory_and_samples_from_it() -> None:
    data = qlearning(10)
    rpm = ReplayMemory(max_size=16, obs_dim=OBS_DIM, act_dim=ACT_DIM)
    rpm.load_from_d4rl(data)
    assert rpm.size() == len(rpm) == 10
    np.testing.assert_array_equal(rpm.obs[:10], data["observations"])
    np.testing.assert_array_equal(rpm.next_obs[:10], data["next_observations"])
    np.testing.assert_array_equal(rpm.action[:10], data["actions"])
    np.testing.assert_array_equal(rpm.reward[:10], data["rewards"])
    np.testing.assert_array_equal(rpm.terminal[:10], data["terminals"])
    obs, action, reward, next_obs, terminal = rpm.sample_batch(32)
    assert obs.shape == (32, OBS_DIM) and action.shape == (32, ACT_DIM)
    assert reward.shape == terminal.shape == (32,) and terminal.dtype == np.bool_
    # every sampled row is one of the dataset's transitions, never an empty slot
    assert np.isin(reward, data["rewards"]).all()


def test_load_from_d4rl_takes_column_rewards_and_discrete_actions() -> None:
    data = qlearning(6)
    data["rewards"] = data["rewards"][:, None]
    data["terminals"] = data["terminals"][:, None].astype(np.float32)
    data["actions"] = np.arange(6)
    rpm = ReplayMemory(max_size=6, obs_dim=OBS_DIM, act_dim=0)
    rpm.load_from_d4rl(data)
    np.testing.assert_array_equal(rpm.action, np.arange(6))
    assert rpm.size() == 6


def test_load_from_d4rl_errors_name_the_problem() -> None:
    rpm = ReplayMemory(max_size=5, obs_dim=OBS_DIM, act_dim=ACT_DIM)
    with pytest.raises(
        ValueError, match="max_size is 5; build the ReplayMemory with max_size >= 10"
    ):
        rpm.load_from_d4rl(qlearning(10))
    wide = ReplayMemory(max_size=20, obs_dim=OBS_DIM + 1, act_dim=ACT_DIM)
    with pytest.raises(ValueError, match=r"observations are \(3,\) per step but .* holds \(4,\)"):
        wide.load_from_d4rl(qlearning(10))
    data = qlearning(4)
    del data["next_observations"]
    with pytest.raises(ValueError, match=r"missing \['next_observations'\]"):
        rpm.load_from_d4rl(data)
    assert rpm.size() == 0  # a failed load leaves the memory as it was


# -- the checks ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("rewards"), r"missing \['rewards'\]"),
        (lambda d: d.update(rewards=d["rewards"][:-1]), "one row per step"),
        (
            lambda d: d.update(next_observations=d["next_observations"][:, :2]),
            r"\(N, \*obs_shape\)",
        ),
        (lambda d: d.update(terminals=np.zeros((10, 2))), r"'terminals' must have shape \(10,\)"),
        (lambda d: d["rewards"].__setitem__(4, np.nan), r"'rewards' has 1 NaN .* index \[4\]"),
        (lambda d: d["observations"].__setitem__((2, 1), np.inf), "'observations' has 1 NaN"),
        (lambda d: d.update({k: v[:0] for k, v in d.items()}), "has no steps"),
        (
            lambda d: d.update(terminals=np.arange(10) % 3),
            r"'terminals' must hold booleans \(or 0 and 1\), got 2 at index 2",
        ),
        (lambda d: d.update(rewards=d["rewards"].astype(str)), "'rewards' must hold numbers"),
        (lambda d: d.update(rewards=[None] * 10), "'rewards' must hold numbers, got dtype object"),
    ],
    ids=[
        "missing-key", "rows", "obs-shape", "terminal-shape", "nan-reward", "inf-obs", "empty",
        "terminal-values", "string-rewards", "object-rewards",
    ],
)  # fmt: skip
def test_malformed_datasets_are_clear_errors(change: Any, message: str) -> None:
    data = qlearning(10)
    change(data)
    with pytest.raises(ValueError, match=message):
        check_qlearning_dataset(data, "mydata")


def test_a_dataset_that_is_not_a_dict_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="expected a dict of arrays"):
        check_qlearning_dataset([1, 2, 3])  # type: ignore[arg-type]


def test_steps_become_transitions_as_d4rl_makes_them() -> None:
    log = steps(12)
    data = qlearning_from_steps(**log)
    # step 7 timed out (no next observation) and step 11 is the last row: both dropped
    kept = [0, 1, 2, 3, 4, 5, 6, 8, 9, 10]
    np.testing.assert_array_equal(data["observations"], log["observations"][kept])
    np.testing.assert_array_equal(
        data["next_observations"], log["observations"][[k + 1 for k in kept]]
    )
    np.testing.assert_array_equal(data["terminals"], log["terminals"][kept])
    assert data["terminals"].sum() == 1


def test_steps_without_any_episode_end_are_an_error() -> None:
    log = steps(12)
    log["terminals"][:] = False
    log["timeouts"][:] = False
    with pytest.raises(ValueError, match="no step ends an episode .* 'terminals' .* 'timeouts'"):
        qlearning_from_steps(**log, source="log.hdf5")


def test_dataset_digest_tells_data_apart_however_it_was_read(tmp_path: Path) -> None:
    _needed("h5py")
    log = steps(12)
    save_d4rl_hdf5(tmp_path / "a.hdf5", **log)
    (tmp_path / "b.hdf5").write_bytes((tmp_path / "a.hdf5").read_bytes())
    digest = dataset_digest(load_d4rl_hdf5(tmp_path / "a.hdf5"))
    assert dataset_digest(load_d4rl_hdf5(tmp_path / "b.hdf5")) == digest
    assert dataset_digest(qlearning_from_steps(**log)) == digest
    changed = qlearning_from_steps(**log)
    changed["rewards"][5] += 1.0
    assert dataset_digest(changed) != digest
    episodes = load_episodes(tmp_path / "a.hdf5")
    assert dataset_digest(episodes) == dataset_digest(load_episodes(tmp_path / "b.hdf5"))
    assert dataset_digest(episodes) != dataset_digest(episodes[:-1])


def test_d4rl_normalized_scores_use_d4rl_reference_returns() -> None:
    assert d4rl_normalized_score("hopper-medium-v2", 3234.3) == pytest.approx(100.0)
    assert d4rl_normalized_score("HalfCheetah-v5", -280.178953) == pytest.approx(0.0)
    np.testing.assert_allclose(
        d4rl_normalized_score("walker2d", np.array([1.629008, 4592.3])), [0.0, 100.0]
    )
    with pytest.raises(ValueError, match="known tasks: .*hopper"):
        d4rl_normalized_score("ant-medium-v2", 1.0)


# -- D4RL HDF5 files ----------------------------------------------------------------------------
def test_d4rl_hdf5_round_trip(tmp_path: Path) -> None:
    _needed("h5py")
    log = steps(12)
    path = tmp_path / "d4rl" / "toy-medium-v2.hdf5"
    save_d4rl_hdf5(path, **log)
    data = load_d4rl_hdf5(path)
    expected = qlearning_from_steps(**log)
    assert set(data) == set(QLEARNING_KEYS)
    for key in QLEARNING_KEYS:
        np.testing.assert_array_equal(data[key], expected[key])
    rpm = ReplayMemory(max_size=100, obs_dim=OBS_DIM, act_dim=ACT_DIM)
    rpm.load_from_d4rl(data)
    assert rpm.size() == 10


def test_d4rl_hdf5_errors(tmp_path: Path) -> None:
    h5py = _needed("h5py")
    with pytest.raises(FileNotFoundError, match="does not exist .*save_d4rl_hdf5"):
        load_d4rl_hdf5(tmp_path / "absent.hdf5")
    path = tmp_path / "partial.hdf5"
    with h5py.File(path, "w") as handle:
        handle["observations"] = np.zeros((4, OBS_DIM))
        handle["rewards"] = np.zeros(4)
    with pytest.raises(ValueError, match=r"missing \['actions', 'terminals'\]"):
        load_d4rl_hdf5(path)
    log = steps(12)
    log["rewards"][2] = np.nan
    save_d4rl_hdf5(tmp_path / "nan.hdf5", **log)
    with pytest.raises(ValueError, match="'rewards' has 1 NaN"):
        load_d4rl_hdf5(tmp_path / "nan.hdf5")


@pytest.mark.parametrize("reader", [load_d4rl_hdf5, load_episodes], ids=["qlearning", "episodes"])
def test_a_malformed_d4rl_file_is_a_clear_error_for_either_reader(
    tmp_path: Path, reader: Any
) -> None:
    h5py = _needed("h5py")
    short = steps(12)
    short["actions"] = short["actions"][:9]
    save_d4rl_hdf5(tmp_path / "short.hdf5", **short)
    rows = r"rows: \{'observations': 12, 'actions': 9, 'rewards': 12, 'terminals': 12\}"
    with pytest.raises(
        ValueError, match=f"short.hdf5: every dataset must have one row per step; {rows}"
    ):
        reader(tmp_path / "short.hdf5")
    (tmp_path / "text.hdf5").write_text("not hdf5")
    with pytest.raises(ValueError, match="text.hdf5 is not an HDF5 file"):
        reader(tmp_path / "text.hdf5")
    empty = {key: value[:0] for key, value in steps(12).items()}
    save_d4rl_hdf5(tmp_path / "empty.hdf5", **empty)
    with pytest.raises(ValueError, match="empty.hdf5: the file has no steps"):
        reader(tmp_path / "empty.hdf5")
    endless = steps(12)
    endless["terminals"][:] = endless["timeouts"][:] = False
    save_d4rl_hdf5(tmp_path / "endless.hdf5", **endless)
    with pytest.raises(ValueError, match="endless.hdf5: no step ends an episode"):
        reader(tmp_path / "endless.hdf5")
    with h5py.File(tmp_path / "odd.hdf5", "w") as handle:  # save_d4rl_hdf5 writes booleans
        for key, value in steps(12).items():
            handle[key] = value * 2.0 if key == "timeouts" else value
    with pytest.raises(ValueError, match="'timeouts' must hold booleans .* got 2.0 at index 7"):
        reader(tmp_path / "odd.hdf5")


# -- Minari datasets ----------------------------------------------------------------------------
def write_minari(
    root: Path, dataset_id: str, episodes: list[dict[str, np.ndarray]], monkeypatch: Any
) -> Any:
    """A Minari dataset under ``root`` (as ``MINARI_DATASETS_PATH``), from numpy episodes."""
    minari = _needed("minari")
    from gymnasium import spaces
    from minari.data_collector import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    buffers = [EpisodeBuffer(id=i, **episode, infos={}) for i, episode in enumerate(episodes)]
    return minari.create_dataset_from_buffers(
        dataset_id,
        buffers,
        action_space=spaces.Box(-1.0, 1.0, (ACT_DIM,), dtype=np.float32),
        observation_space=spaces.Box(-np.inf, np.inf, (OBS_DIM,), dtype=np.float32),
        algorithm_name="random",
    )


def episode(length: int, seed: int, terminated: bool, truncated: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ends = np.zeros(length, dtype=bool)
    return {
        "observations": rng.normal(size=(length + 1, OBS_DIM)).astype(np.float32),
        "actions": rng.uniform(-1, 1, size=(length, ACT_DIM)).astype(np.float32),
        "rewards": rng.normal(size=length),
        "terminations": np.where(np.arange(length) == length - 1, terminated, ends),
        "truncations": np.where(np.arange(length) == length - 1, truncated, ends),
    }


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_minari_dataset_by_id_and_by_folder(tmp_path: Path, monkeypatch: Any) -> None:
    episodes = [episode(5, 0, True, False), episode(4, 1, False, True)]
    write_minari(tmp_path, "toy/bandit/noisy-v0", episodes, monkeypatch)
    by_id = load_minari("toy/bandit/noisy-v0")
    by_folder = load_minari(tmp_path / "toy" / "bandit" / "noisy-v0")
    for key in QLEARNING_KEYS:
        np.testing.assert_array_equal(by_id[key], by_folder[key])
    assert by_id["rewards"].shape == (9,)
    np.testing.assert_array_equal(by_id["observations"][:5], episodes[0]["observations"][:-1])
    np.testing.assert_array_equal(by_id["next_observations"][5:], episodes[1]["observations"][1:])
    # the terminated episode ends terminal, the truncated one does not
    np.testing.assert_array_equal(by_id["terminals"].nonzero()[0], [4])
    rpm = ReplayMemory(max_size=9, obs_dim=OBS_DIM, act_dim=ACT_DIM)
    rpm.load_from_d4rl(by_id)
    assert rpm.size() == 9


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_minari_errors(tmp_path: Path, monkeypatch: Any) -> None:
    _needed("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="not on disk.*minari download.*create_dataset"):
        load_minari("mujoco/hopper/medium-v0")
    # a path that is not there is not a dataset id to download
    with pytest.raises(FileNotFoundError, match=r"no offline dataset at /\S+/nothere: a Minari"):
        load_minari(tmp_path / "nothere")
    endless = [episode(5, 0, True, False), episode(4, 1, False, False)]
    write_minari(tmp_path, "toy/endless-v0", endless, monkeypatch)
    with pytest.raises(ValueError, match="episode 1: the last step is neither terminated nor"):
        load_minari("toy/endless-v0")
    noisy = [episode(5, 0, True, False)]
    noisy[0]["rewards"][1] = np.nan
    write_minari(tmp_path, "toy/nan-v0", noisy, monkeypatch)
    with pytest.raises(ValueError, match="'rewards' has 1 NaN"):
        load_minari("toy/nan-v0")


# -- PARL's own load_from_d4rl ------------------------------------------------------------------
def test_load_from_d4rl_samples_what_published_parl_samples(
    parl_wheel: Path, tmp_path: Path
) -> None:
    """PARL 2.2.1's ``parl/utils/replay_memory.py``, loaded from its published wheel against this
    package, and ours load the same dataset and, from the same numpy seed, draw the same
    batches. (PARL's memory then holds the dataset's own arrays, of whatever size; ours copies
    them into its preallocated storage, checked.)"""
    import zipfile

    with zipfile.ZipFile(parl_wheel) as archive:
        path = Path(archive.extract("parl/utils/replay_memory.py", tmp_path))
    spec = importlib.util.spec_from_file_location("published_parl_replay_memory", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = qlearning(40)
    theirs = module.ReplayMemory(max_size=64, obs_dim=OBS_DIM, act_dim=ACT_DIM)
    theirs.load_from_d4rl({key: value.copy() for key, value in data.items()})
    ours = ReplayMemory(max_size=64, obs_dim=OBS_DIM, act_dim=ACT_DIM)
    ours.load_from_d4rl(data)
    assert theirs.size() == ours.size() == 40
    for seed in range(3):
        np.random.seed(seed)
        expected = theirs.sample_batch(16)
        np.random.seed(seed)
        for theirs_array, ours_array in zip(expected, ours.sample_batch(16), strict=True):
            np.testing.assert_array_equal(ours_array, theirs_array)


def test_load_episodes_splits_a_d4rl_file_at_terminals_and_timeouts(tmp_path: Path) -> None:
    _needed("h5py")
    steps = 7
    terminals = np.array([0, 0, 1, 0, 0, 0, 0], dtype=bool)
    timeouts = np.array([0, 0, 0, 0, 1, 0, 0], dtype=bool)
    observations = np.arange(steps * 2, dtype=np.float32).reshape(steps, 2)
    save_d4rl_hdf5(tmp_path / "d.hdf5", observations, np.zeros((steps, 1)), np.arange(steps),
                   terminals, timeouts)  # fmt: skip
    episodes = load_episodes(tmp_path / "d.hdf5")
    assert [len(e["rewards"]) for e in episodes] == [3, 2, 2]  # the last one has no end yet
    np.testing.assert_array_equal(episodes[1]["observations"], observations[3:5])
    assert [e["terminals"].tolist() for e in episodes] == [[0, 0, 1], [0, 0], [0, 0]]
    assert episodes[0]["actions"].shape == (3, 1) and episodes[0]["rewards"].dtype == np.float32


def test_load_episodes_reads_a_minari_dataset_episode_by_episode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    minari = _needed("minari")
    from minari.data_collector import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    rng = np.random.default_rng(0)
    buffers = [
        EpisodeBuffer(id=i, observations=rng.normal(size=(n + 1, 3)).astype(np.float32),
                      actions=rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                      rewards=rng.normal(size=n), terminations=np.arange(n) == n - 1 if i else
                      np.zeros(n, dtype=bool), truncations=np.arange(n) == n - 1 if not i else
                      np.zeros(n, dtype=bool), infos={})
        for i, n in enumerate((4, 6))
    ]  # fmt: skip
    minari.create_dataset_from_buffers(
        "toy/episodes-v0", buffers, algorithm_name="random",
        observation_space=gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
        action_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    )  # fmt: skip
    episodes = load_episodes("toy/episodes-v0")
    assert [len(e["rewards"]) for e in episodes] == [4, 6]
    np.testing.assert_allclose(episodes[1]["observations"], buffers[1].observations[:-1])
    assert episodes[0]["terminals"].tolist() == [False] * 4
    assert episodes[1]["terminals"].tolist() == [False] * 5 + [True]
    flat = load_minari("toy/episodes-v0")
    np.testing.assert_array_equal(
        flat["observations"], np.concatenate([e["observations"] for e in episodes])
    )


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_minari_dataset_of_dict_observations_is_refused_saying_to_flatten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    minari = _needed("minari")
    from minari.data_collector import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    rng = np.random.default_rng(0)
    space = gym.spaces.Dict({
        "position": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
        "goal": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
    })  # fmt: skip
    buffers = [
        EpisodeBuffer(id=0, observations={"position": rng.normal(size=(4, 3)).astype(np.float32),
                                          "goal": rng.normal(size=(4, 2)).astype(np.float32)},
                      actions=rng.uniform(-1, 1, (3, 2)).astype(np.float32),
                      rewards=rng.normal(size=3), terminations=np.array([0, 0, 1], dtype=bool),
                      truncations=np.zeros(3, dtype=bool), infos={})
    ]  # fmt: skip
    minari.create_dataset_from_buffers(
        "toy/goals-v0", buffers, algorithm_name="random", observation_space=space,
        action_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    )  # fmt: skip
    message = r"toy/goals-v0 episode 0: observations come from a Dict space \(parts \['goal', "
    for reader in (load_minari, load_episodes):
        with pytest.raises(ValueError, match=message + r"'position'\]\).*flatten"):
            reader("toy/goals-v0")


def test_a_nan_in_a_d4rl_file_is_named_by_its_row_in_the_file(tmp_path: Path) -> None:
    """A transition's index is not the step's row once a timeout's step is dropped, and an
    episode's index is not the file's row: the error names the row to repair."""
    _needed("h5py")
    rows = 30
    timeouts = np.arange(rows) % 10 == 9  # three episodes cut by a time limit
    data = steps(rows)
    data["observations"][29, 1] = np.inf  # only ever a next observation
    save_d4rl_hdf5(tmp_path / "d.hdf5", **{**data, "timeouts": timeouts})
    with pytest.raises(ValueError, match=r"'observations' has 1 NaN .* at index \[29, 1\]"):
        load_d4rl_hdf5(tmp_path / "d.hdf5")
    data["observations"][29, 1] = 0.0
    data["rewards"][19] = np.nan  # a timeout's step, which D4RL drops: no transition uses it
    save_d4rl_hdf5(tmp_path / "d.hdf5", **{**data, "timeouts": timeouts})
    assert load_d4rl_hdf5(tmp_path / "d.hdf5")["rewards"].shape == (rows - 3,)
    data["rewards"][19], data["actions"][23, 0] = 0.0, np.nan
    save_d4rl_hdf5(tmp_path / "d.hdf5", **{**data, "timeouts": timeouts})
    with pytest.raises(ValueError, match=r"d.hdf5: 'actions' has 1 NaN .* at index \[23, 0\]"):
        load_d4rl_hdf5(tmp_path / "d.hdf5")
    episode = r"d.hdf5 episode 3 \(file rows 20 to 29\): 'actions' has 1 NaN .* at index \[3, 0\]"
    with pytest.raises(ValueError, match=episode):
        load_episodes(tmp_path / "d.hdf5")


def test_steps_of_another_length_than_the_observations_are_named() -> None:
    data = steps(12)
    with pytest.raises(ValueError, match=r"one row per step; rows: \{'observations': 12, "):
        qlearning_from_steps(**{**data, "actions": data["actions"][:11]})
    with pytest.raises(ValueError, match=r"rows: .*'rewards': 13\}"):
        qlearning_from_steps(**{**data, "rewards": np.zeros(13)})
