"""ReplayMemory: ring buffer semantics, shapes, sampling, save/load and speed."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from parl.utils import ReplayMemory


def fill(memory: ReplayMemory, start: int, count: int) -> None:
    """Transition i has obs i, action i % 3, reward i, next_obs i + 1 and terminal i % 2."""
    for i in range(start, start + count):
        obs = np.full(memory.obs_shape, i, dtype=np.float32)
        memory.append(obs, i % 3, float(i), obs + 1, i % 2 == 1)


def test_wrap_around_overwrites_the_oldest() -> None:
    memory = ReplayMemory(max_size=5, obs_dim=2, act_dim=0)
    fill(memory, 0, 3)
    assert memory.size() == len(memory) == 3
    fill(memory, 3, 4)  # transitions 0..6 into 5 slots: 0 and 1 are overwritten by 5 and 6
    assert memory.size() == 5
    assert memory.reward.tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert memory.obs[:, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert memory.action.tolist() == [2, 0, 2, 0, 1]
    assert memory.terminal.tolist() == [True, False, False, True, False]
    batch = memory.sample_batch(200)
    assert set(batch.reward.tolist()) == {2.0, 3.0, 4.0, 5.0, 6.0}


def test_sampled_transitions_stay_consistent() -> None:
    memory = ReplayMemory(100, obs_dim=3, act_dim=0, rng=np.random.default_rng(0))
    fill(memory, 0, 50)
    obs, act, reward, next_obs, terminal = memory.sample_batch(64)  # PARL's tuple unpacking
    assert obs.shape == (64, 3) and act.shape == (64,) and act.dtype == np.int64
    np.testing.assert_array_equal(obs[:, 0], reward)
    np.testing.assert_array_equal(next_obs[:, 0], reward + 1)
    np.testing.assert_array_equal(act, reward.astype(np.int64) % 3)
    np.testing.assert_array_equal(terminal, reward.astype(np.int64) % 2 == 1)
    assert reward.max() < 50


def test_stacked_frames_and_continuous_actions() -> None:
    memory = ReplayMemory(10, obs_dim=(4, 8, 8), act_dim=2, obs_dtype=np.uint8)
    frame = np.arange(256, dtype=np.uint8).reshape(4, 8, 8)
    memory.append(frame, np.array([0.5, -0.5]), 1.0, frame, False)
    batch = memory.sample_batch(3)
    assert batch.obs.shape == (3, 4, 8, 8) and batch.obs.dtype == np.uint8
    np.testing.assert_array_equal(batch.obs[0], frame)
    assert batch.action.shape == (3, 2) and batch.action.dtype == np.float32
    assert memory.obs.nbytes == 10 * 256  # preallocated, one byte per pixel


def test_save_and_load(tmp_path: Path) -> None:
    memory = ReplayMemory(8, obs_dim=2, act_dim=1)
    for i in range(11):
        memory.append(np.full(2, i), np.array([i / 10]), i, np.full(2, i + 1), False)
    path = tmp_path / "sub" / "rpm.npz"
    memory.save(path)
    restored = ReplayMemory(8, obs_dim=2, act_dim=1)
    restored.load(path)
    assert restored.size() == 8
    np.testing.assert_array_equal(restored.obs, memory.obs)
    np.testing.assert_array_equal(restored.action, memory.action)
    restored.append(np.zeros(2), np.zeros(1), -1.0, np.zeros(2), True)
    assert restored.reward[3] == -1.0  # the write position was restored too
    with pytest.raises(
        ValueError, match=r"'obs' rows have shape \(2,\) but this ReplayMemory's have \(3,\)"
    ):
        ReplayMemory(8, obs_dim=3, act_dim=1).load(path)


def test_load_beside_checkpoint_takes_only_the_memory_the_checkpoint_recorded(
    tmp_path: Path,
) -> None:
    memory = ReplayMemory(8, obs_dim=2, act_dim=0)
    fill(memory, 0, 11)
    path = tmp_path / "rpm.npz"
    memory.save(path)
    assert memory.stamp() == ReplayMemory.saved_stamp(path) == [8, 3]
    restored = ReplayMemory(8, obs_dim=2, act_dim=0)
    assert restored.load_beside_checkpoint(path, memory.stamp())
    np.testing.assert_array_equal(restored.obs, memory.obs)
    assert restored.load_beside_checkpoint(path, None)  # a checkpoint from before stamps
    fill(memory, 11, 1)  # the checkpoint was written one step later than the file
    with pytest.raises(RuntimeError, match=r"rpm.npz \(rows and next row \[8, 3\]\) is not the"):
        ReplayMemory(8, obs_dim=2, act_dim=0).load_beside_checkpoint(path, memory.stamp())
    empty = ReplayMemory(8, obs_dim=2, act_dim=0)
    assert not empty.load_beside_checkpoint(path, None, written=False)
    assert not empty.load_beside_checkpoint(tmp_path / "none.npz", [1, 1])
    assert empty.size() == 0


@pytest.mark.parametrize("saved_size", [8, 20])
@pytest.mark.parametrize("appended", [0, 3, 8, 11, 29])
@pytest.mark.parametrize("new_size", [4, 8, 13, 20, 50])
def test_a_memory_of_another_capacity_loads_the_newest_transitions_in_order(
    tmp_path: Path, saved_size: int, appended: int, new_size: int
) -> None:
    # a resumed run with a larger (or smaller) budget sizes its memory anew
    memory = ReplayMemory(saved_size, obs_dim=2, act_dim=0)
    fill(memory, 0, appended)
    memory.save(tmp_path / "rpm.npz")
    restored = ReplayMemory(new_size, obs_dim=2, act_dim=0)
    if appended:
        restored.load(tmp_path / "rpm.npz")
    held = list(range(max(0, appended - saved_size), appended))  # what the saved memory held
    expected = held[-new_size:]
    if new_size == saved_size:  # the same capacity: every row back at its place
        np.testing.assert_array_equal(restored.reward, memory.reward)
        assert restored.size() == memory.size()
        assert sorted(restored.reward[: restored.size()].tolist()) == [float(i) for i in expected]
        return
    assert restored.size() == len(expected)
    assert restored.reward[: len(expected)].tolist() == [float(i) for i in expected]
    np.testing.assert_array_equal(restored.obs[: len(expected), 0], expected)
    np.testing.assert_array_equal(restored.next_obs[: len(expected), 0], np.add(expected, 1))
    assert restored.action[: len(expected)].tolist() == [i % 3 for i in expected]
    # the next append lands after the newest, or overwrites the oldest once full
    fill(restored, 1000, 1)
    assert 1000.0 in restored.reward.tolist()
    after = (expected + [1000])[-new_size:]
    assert sorted(restored.reward[: restored.size()].tolist()) == sorted(map(float, after))


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="ReplayMemory: max_size must be an int >= 1, got 0"):
        ReplayMemory(0, 4, 0)
    with pytest.raises(TypeError, match=r"obs_dim must be an int >= 1, got 4.0 \(float\)"):
        ReplayMemory(10, 4.0, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"obs_dim\[1\] must be an int >= 1, got 0"):
        ReplayMemory(10, (4, 0), 0)
    memory = ReplayMemory(10, 4, 0)
    with pytest.raises(ValueError, match="cannot sample from an empty ReplayMemory"):
        memory.sample_batch(2)
    with pytest.raises(ValueError, match=r"obs and next_obs must have shape \(4,\), got \(3,\)"):
        memory.append(np.zeros(3), 0, 0.0, np.zeros(4), False)
    with pytest.raises(ValueError, match=r"act must have shape \(\), got \(2,\)"):
        memory.append(np.zeros(4), [0, 1], 0.0, np.zeros(4), False)
    memory.append(np.zeros(4), 1, 0.0, np.zeros(4), False)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        memory.sample_batch(0)


def test_sampling_256_from_a_million_is_fast() -> None:
    memory = ReplayMemory(1_000_000, obs_dim=8, act_dim=2)
    memory._curr_size = memory.max_size  # as if full; storage is preallocated anyway
    memory.sample_batch(256)
    timings = []
    for _ in range(200):
        start = time.perf_counter()
        memory.sample_batch(256)
        timings.append(time.perf_counter() - start)
    assert float(np.median(timings)) < 300e-6, f"median {np.median(timings) * 1e6:.0f} us"
