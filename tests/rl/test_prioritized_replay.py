"""ReplayMemory.append_batch, RNG state in save/load, SumTree and PrioritizedReplayMemory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parl.utils import PrioritizedReplayMemory, ReplayMemory
from parl.utils.prioritized_replay_memory import SumTree


def test_append_batch_equals_appending_one_by_one() -> None:
    rng = np.random.default_rng(0)
    one, many = ReplayMemory(7, 3, 2), ReplayMemory(7, 3, 2)
    for n in (2, 4, 3, 9):  # wraps around, and the last batch is larger than the memory
        obs, act = rng.normal(size=(n, 3)), rng.normal(size=(n, 2))
        reward, next_obs, terminal = (
            rng.normal(size=n),
            rng.normal(size=(n, 3)),
            rng.random(n) < 0.5,
        )
        for i in range(n):
            one.append(obs[i], act[i], reward[i], next_obs[i], terminal[i])
        many.append_batch(obs, act, reward, next_obs, terminal)
        assert (one.size(), one._curr_pos) == (many.size(), many._curr_pos)
        for name in ("obs", "action", "reward", "next_obs", "terminal"):
            np.testing.assert_array_equal(getattr(one, name), getattr(many, name))
    with pytest.raises(ValueError, match=r"append_batch: reward must have shape \(2,\)"):
        many.append_batch(np.zeros((2, 3)), np.zeros((2, 2)), np.zeros(3), np.zeros((2, 3)), [0, 0])


def test_save_load_restores_the_private_generator(tmp_path: Path) -> None:
    memory = ReplayMemory(50, 2, 0, rng=np.random.default_rng(3))
    memory.append_batch(
        np.arange(80.0).reshape(40, 2),
        np.arange(40) % 2,
        np.arange(40.0),
        np.zeros((40, 2)),
        np.zeros(40, bool),
    )
    memory.sample_batch(5)
    memory.save(tmp_path / "rpm.npz")
    expected = [memory.sample_batch(8).reward for _ in range(3)]
    restored = ReplayMemory(50, 2, 0, rng=np.random.default_rng(99))
    restored.load(tmp_path / "rpm.npz")
    for want in expected:  # the resumed memory draws exactly the batches the original drew
        np.testing.assert_array_equal(restored.sample_batch(8).reward, want)


def test_sum_tree_sums_and_finds_by_prefix() -> None:
    tree = SumTree(5)  # capacity rounds up to 8
    assert tree.capacity == 8 and tree.depth == 3
    tree.update(np.array([0, 1, 2, 3, 4]), np.array([1.0, 0.0, 2.0, 3.0, 4.0]))
    assert tree.total == 10.0
    assert tree.tree[2] == 6.0 and tree.tree[3] == 4.0  # (1 + 0 + 2 + 3) and (4 + 0 + 0 + 0)
    # Leaf i covers [cumsum before i, cumsum through i): [0,1) [1,1) [1,3) [3,6) [6,10).
    found = tree.find(np.array([0.0, 0.99, 1.0, 2.5, 3.0, 5.99, 6.0, 9.999]))
    assert found.tolist() == [0, 0, 2, 2, 3, 3, 4, 4]
    tree.update(np.array([4, 4, 0]), np.array([7.0, 0.5, 1.5]))  # repeated index: last wins
    assert tree.total == 1.5 + 2 + 3 + 0.5
    np.testing.assert_array_equal(tree.leaves(), [1.5, 0.0, 2.0, 3.0, 0.5])


def test_sum_tree_matches_numpy_cumsum_on_random_data() -> None:
    rng = np.random.default_rng(1)
    tree = SumTree(1000)
    values = rng.random(1000)
    tree.update(np.arange(1000), values)
    for _ in range(5):  # random partial updates keep every ancestor right
        index = rng.integers(1000, size=64)
        values[index] = rng.random(64)
        tree.update(index, values[index])
    assert tree.total == pytest.approx(values.sum(), rel=1e-12)
    prefix = rng.random(500) * values.sum()
    np.testing.assert_array_equal(
        tree.find(prefix), np.searchsorted(np.cumsum(values), prefix, "right")
    )


def test_prioritized_sampling_follows_priorities() -> None:
    memory = PrioritizedReplayMemory(4, 1, 0, rng=np.random.default_rng(0), alpha=1.0, beta=1.0)
    for i in range(4):
        memory.append(np.array([i], np.float32), 0, float(i), np.zeros(1), False)
    memory.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]) - memory.eps)
    counts = np.zeros(4)
    for _ in range(200):
        batch = memory.sample_batch(50)
        counts += np.bincount(batch.indices, minlength=4)
        np.testing.assert_array_equal(batch.reward, batch.indices.astype(np.float32))
    np.testing.assert_allclose(counts / counts.sum(), [0.1, 0.2, 0.3, 0.4], atol=0.01)
    # weights (N * P(i))^-1 normalised by the batch maximum: slot 0 has 1, slot 3 has 1/4
    batch = memory.sample_batch(64)
    expected = (1.0 / ((batch.indices + 1) / 10.0)) / (1.0 / ((batch.indices.min() + 1) / 10.0))
    np.testing.assert_allclose(batch.weight, expected, rtol=1e-6)


def test_new_transitions_get_the_largest_priority_and_save_load(tmp_path: Path) -> None:
    memory = PrioritizedReplayMemory(8, 1, 0, rng=np.random.default_rng(0), alpha=0.5)
    for i in range(3):
        memory.append(np.array([i]), 0, 0.0, np.array([i]), False)
    memory.update_priorities([0, 1, 2], [8.0, 0.0, 0.0])
    memory.append_batch(np.ones((2, 1)), [0, 0], [0.0, 0.0], np.ones((2, 1)), [False, False])
    memory.append(np.array([5]), 0, 0.0, np.array([5]), False)
    np.testing.assert_allclose(memory.tree.leaves([3, 4, 5]), np.sqrt(8.0 + memory.eps))
    memory.sample_batch(4)
    memory.save(tmp_path / "per.npz")
    restored = PrioritizedReplayMemory(8, 1, 0, rng=np.random.default_rng(5), alpha=0.5)
    restored.load(tmp_path / "per.npz")
    np.testing.assert_array_equal(restored.tree.tree, memory.tree.tree)
    assert restored.max_priority == memory.max_priority
    np.testing.assert_array_equal(
        restored.sample_batch(16).indices, memory.sample_batch(16).indices
    )
    with pytest.raises(ValueError, match="holds no priorities"):
        ReplayMemory(8, 1, 0).save(tmp_path / "plain.npz") or restored.load(tmp_path / "plain.npz")
    with pytest.raises(ValueError, match="got 2 indices but 3 priorities"):
        memory.update_priorities([0, 1], [1.0, 2.0, 3.0])


def test_a_prioritized_memory_loads_only_into_its_own_capacity(tmp_path: Path) -> None:
    memory = PrioritizedReplayMemory(8, 1, 0, alpha=0.5)
    for i in range(5):
        memory.append(np.full(1, i), 0, float(i), np.full(1, i + 1), False)
    memory.save(tmp_path / "rpm.npz")
    with pytest.raises(ValueError, match=r"max_size=8; a PrioritizedReplayMemory loads only"):
        PrioritizedReplayMemory(16, 1, 0, alpha=0.5).load(tmp_path / "rpm.npz")
