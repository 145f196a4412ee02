"""Prioritized experience replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952) on a
sum tree held in one numpy array and updated a whole batch at a time."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from parl.utils.replay_memory import ReplayMemory, Shape
from parl.validation import check_float, check_int

__all__ = ["PrioritizedReplayMemory", "PrioritizedTransitions", "SumTree"]


class SumTree:
    """Binary tree whose every node holds the sum of its two children; leaf ``i`` is slot ``i``.

    Node 1 is the root and node ``k`` has children ``2k`` and ``2k + 1``; the leaves are nodes
    ``capacity .. 2 * capacity - 1`` (``capacity`` rounded up to a power of two). Both updates and
    searches walk the ``log2(capacity)`` levels once for a whole batch, so their Python cost does
    not grow with the batch size.
    """

    def __init__(self, size: int) -> None:
        self.size = check_int("size", size, low=1, owner="SumTree")
        self.capacity = 1 << max(0, (self.size - 1).bit_length())
        self.depth = self.capacity.bit_length() - 1
        self.tree = np.zeros(2 * self.capacity, dtype=np.float64)

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self.tree[1])

    def leaves(self, index: np.ndarray | slice | None = None) -> np.ndarray:
        """Leaf values (a view for a slice); all ``size`` leaves by default."""
        values = self.tree[self.capacity : self.capacity + self.size]
        return values if index is None else values[index]

    def update(self, index: np.ndarray, value: np.ndarray) -> None:
        """Set leaves ``index`` to ``value`` and refresh their ancestors. With repeated indices
        the last value wins, as with ``array[index] = value``."""
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        if index.size == 0:
            return
        if index.min() < 0 or index.max() >= self.size:
            raise IndexError(f"SumTree.update: indices must be in [0, {self.size}), got {index}")
        nodes = index + self.capacity
        self.tree[nodes] = value
        self._refresh(nodes)

    def _refresh(self, nodes: np.ndarray) -> None:
        nodes = np.unique(nodes >> 1)
        while nodes.size and nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[-1] == 1:
                break
            nodes = np.unique(nodes >> 1)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each value ``v`` of ``prefix`` (in ``[0, total)``), the leaf ``i`` with
        ``sum(leaves[:i]) <= v < sum(leaves[:i + 1])``."""
        value = np.array(prefix, dtype=np.float64, copy=True).reshape(-1)
        node = np.ones(value.shape, dtype=np.int64)
        for _ in range(self.depth):
            left = 2 * node
            left_sum = self.tree[left]
            go_right = value >= left_sum
            value -= np.where(go_right, left_sum, 0.0)
            node = left + go_right
        leaf = node - self.capacity
        # Rounding can step past the last stored leaf; those leaves hold 0 and are never meant.
        return np.minimum(leaf, self.size - 1)


class PrioritizedTransitions(NamedTuple):
    """A prioritized batch: the five fields of ``Transitions``, the importance-sampling
    ``weight`` ``(B,)`` (float32, largest 1) and the slots ``indices`` ``(B,)`` to pass back to
    ``update_priorities``."""

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    terminal: np.ndarray
    weight: np.ndarray
    indices: np.ndarray


class PrioritizedReplayMemory(ReplayMemory):
    """Proportional prioritized replay: slot ``i`` is drawn with probability
    ``p_i^alpha / sum_k p_k^alpha`` and weighted by ``(N * P(i))^-beta``, normalised by the
    largest weight of the batch.

    New transitions get the largest priority seen so far, so each is replayed at least once
    soon. After a learning step call ``update_priorities(batch.indices, |td_error|)``
    (``DQN.td_error`` holds them).

    Args:
        max_size, obs_dim, act_dim, obs_dtype, act_dtype, rng: as ``ReplayMemory``.
        alpha: how much prioritization is used (0: uniform).
        beta: importance-sampling exponent (1: full correction); ``sample_batch(beta=...)`` can
            anneal it.
        eps: added to every priority so that no transition has probability zero.
    """

    def __init__(
        self,
        max_size: int,
        obs_dim: Shape,
        act_dim: Shape,
        obs_dtype: Any = np.float32,
        act_dtype: Any = None,
        rng: np.random.Generator | None = None,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(max_size, obs_dim, act_dim, obs_dtype, act_dtype, rng)
        owner = "PrioritizedReplayMemory"
        self.alpha = check_float("alpha", alpha, low=0.0, owner=owner)
        self.beta = check_float("beta", beta, low=0.0, owner=owner)
        self.eps = check_float("eps", eps, low=0.0, low_open=True, owner=owner)
        self.tree = SumTree(self.max_size)
        self.max_priority = 1.0
        self._pending: list[int] = []  # slots appended since the tree was last refreshed

    def append(self, obs: Any, act: Any, reward: float, next_obs: Any, terminal: bool) -> None:
        """Store one transition with the largest priority so far."""
        pos = self._curr_pos
        super().append(obs, act, reward, next_obs, terminal)
        # Set the leaf now, refresh its ancestors lazily: one tree walk for all pending slots.
        self.tree.tree[self.tree.capacity + pos] = self.max_priority**self.alpha
        self._pending.append(pos)

    def append_batch(
        self, obs: Any, act: Any, reward: Any, next_obs: Any, terminal: Any
    ) -> np.ndarray:
        """Store ``n`` transitions with the largest priority so far (see ``ReplayMemory``)."""
        slots = super().append_batch(obs, act, reward, next_obs, terminal)
        self.tree.update(slots, np.full(slots.shape, self.max_priority**self.alpha))
        return slots

    def _flush(self) -> None:
        if self._pending:
            self.tree._refresh(np.asarray(self._pending, dtype=np.int64) + self.tree.capacity)
            self._pending.clear()

    def _uniform(self, size: int) -> np.ndarray:
        return np.random.random(size) if self._rng is None else self._rng.random(size)

    def make_index(self, batch_size: int) -> np.ndarray:
        """``batch_size`` slots drawn by priority, one from each of ``batch_size`` equal slices
        of the total priority (stratified, as in the paper)."""
        if self._curr_size == 0:
            raise ValueError("cannot sample from an empty ReplayMemory; append transitions first")
        self._flush()
        total = self.tree.total
        prefix = (np.arange(batch_size) + self._uniform(batch_size)) * (total / batch_size)
        return np.minimum(self.tree.find(prefix), self._curr_size - 1)

    def sample_batch(  # type: ignore[override]
        self, batch_size: int, beta: float | None = None
    ) -> PrioritizedTransitions:
        """``batch_size`` transitions drawn by priority, with weights and slots."""
        batch_size = check_int("batch_size", batch_size, low=1, owner="sample_batch")
        beta = self.beta if beta is None else check_float("beta", beta, low=0.0)
        index = self.make_index(batch_size)
        probability = self.tree.leaves(index) / self.tree.total
        weight = (self._curr_size * probability) ** (-beta)
        weight = (weight / weight.max()).astype(np.float32)
        return PrioritizedTransitions(*self.sample_batch_by_index(index), weight, index)

    def update_priorities(self, index: Any, priority: Any) -> None:
        """Set the priorities of slots ``index`` (from a sampled batch) to ``priority`` (e.g.
        ``|TD error|``, numpy or a tensor); ``eps`` is added and ``alpha`` applied here."""
        if hasattr(priority, "detach"):
            priority = priority.detach().cpu().numpy()
        priority = np.abs(np.asarray(priority, dtype=np.float64).reshape(-1)) + self.eps
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        if priority.shape != index.shape:
            raise ValueError(
                f"update_priorities: got {index.size} indices but {priority.size} priorities"
            )
        if not np.all(np.isfinite(priority)):
            raise ValueError("update_priorities: priorities must be finite (got NaN or inf)")
        self._flush()
        self.tree.update(index, priority**self.alpha)
        self.max_priority = max(self.max_priority, float(priority.max()))

    def _save_arrays(self) -> dict[str, Any]:
        self._flush()
        arrays = super()._save_arrays()
        arrays["priority"] = self.tree.leaves().copy()
        arrays["max_priority"] = np.float64(self.max_priority)
        return arrays

    def _load_extra(self, data: Any) -> None:
        super()._load_extra(data)
        if "priority" not in data or data["priority"].shape != (self.max_size,):
            raise ValueError(
                "this file holds no priorities for this PrioritizedReplayMemory (max_size="
                f"{self.max_size}); was it saved by a plain ReplayMemory?"
            )
        self._pending.clear()
        self.tree.update(np.arange(self.max_size), data["priority"])
        self.max_priority = float(data["max_priority"])
