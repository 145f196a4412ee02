"""Windows of trajectories for Decision Transformer: returns-to-go, time steps, padding and
attention masks, batched the way PARL's DT example batches them.

A trajectory is a mapping with ``"observations"`` ``(T, state_dim)``, ``"actions"`` ``(T,
act_dim)``, ``"rewards"`` ``(T,)`` and ``"terminals"`` or ``"dones"`` ``(T,)`` (D4RL's episode
dicts). A window of ``K`` steps starting at step ``start`` holds steps ``start .. start + K - 1``
(fewer at the end of the trajectory, padded up to ``K``) and ``K + 1`` returns-to-go: the
algorithm feeds the first ``K`` to the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from parl.validation import check_float, check_int

__all__ = ["TrajectoryBatch", "TrajectorySampler", "returns_to_go", "trajectory_window"]

# what the padded steps hold, as in PARL's example
PAD_ACTION = -10.0
PAD_DONE = 2


class TrajectoryBatch(NamedTuple):
    """A batch of windows, in the order ``DecisionTransformer.learn`` takes them.

    ``states`` ``(B, K, state_dim)`` float32, normalised; ``actions`` ``(B, K, act_dim)``
    float32, padding ``-10``; ``rewards`` ``(B, K, 1)`` float32, padding 0; ``dones`` ``(B,
    K)`` int64, padding 2; ``rtg`` ``(B, K + 1, 1)`` float32 returns-to-go divided by the
    scale, padding 0; ``timesteps`` ``(B, K)`` int64, padding 0; ``attention_mask`` ``(B, K)``
    float32, 1 for real steps and 0 for padding.
    """

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    rtg: np.ndarray
    timesteps: np.ndarray
    attention_mask: np.ndarray

    def to_tensors(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
        """The seven arrays as tensors on ``device``, for ``learn(*batch.to_tensors())``.

        Args:
            device: where the tensors go.
        """
        return tuple(torch.as_tensor(array, device=device) for array in self)


def returns_to_go(rewards: Any) -> np.ndarray:
    """``G[t] = rewards[t] + rewards[t + 1] + ... + rewards[T - 1]``, undiscounted, in float64.

    Args:
        rewards: ``(T,)``.
    """
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    return np.cumsum(rewards[::-1])[::-1].copy()


def _done_flags(trajectory: Mapping[str, Any]) -> np.ndarray:
    for key in ("terminals", "dones"):
        if key in trajectory:
            return np.asarray(trajectory[key])
    raise KeyError(
        f"a trajectory needs 'terminals' or 'dones' next to its rewards; it has {sorted(trajectory)}"
    )


def trajectory_window(
    trajectory: Mapping[str, Any],
    start: int,
    context: int,
    *,
    max_ep_len: int = 1000,
    state_mean: np.ndarray | float = 0.0,
    state_std: np.ndarray | float = 1.0,
    scale: float = 1000.0,
    padding: str = "left",
) -> TrajectoryBatch:
    """One window of ``trajectory`` as a batch of one.

    Args:
        trajectory: the episode (see the module's docstring).
        start: its first step, in ``[0, T)``.
        context: the window's length ``K``.
        max_ep_len: time steps from ``max_ep_len - 1`` on are clipped to it.
        state_mean: subtracted from the states (padding included, as PARL's example does).
        state_std: the states are divided by it.
        scale: the returns-to-go are divided by it.
        padding: ``"left"`` (PARL's: the window ends with its last real step, as at
            inference) or ``"right"``.

    Returns:
        A :class:`TrajectoryBatch` with ``B = 1``.
    """
    if padding not in ("left", "right"):
        raise ValueError(f"padding must be 'left' or 'right', got {padding!r}")
    observations = np.asarray(trajectory["observations"])
    rewards = np.asarray(trajectory["rewards"]).reshape(-1)
    length = rewards.shape[0]
    check_int("start", start, low=0, high=length - 1)
    context = check_int("context", context, low=1)
    stop = min(start + context, length)
    real = stop - start
    # returns-to-go from start to the end of the episode; one more than the window's steps,
    # which is 0 when the window reaches the episode's end
    rtg = np.zeros(real + 1)
    to_go = returns_to_go(rewards[start:])[: real + 1]
    rtg[: to_go.shape[0]] = to_go
    timesteps = np.minimum(np.arange(start, stop), max_ep_len - 1)
    pad = context - real

    def place(values: np.ndarray, fill: float) -> np.ndarray:
        padded = np.full((pad, *values.shape[1:]), fill, dtype=np.float64)
        parts = [padded, values] if padding == "left" else [values, padded]
        return np.concatenate(parts, axis=0)

    states = (place(observations[start:stop], 0.0) - state_mean) / state_std
    mask = place(np.ones(real), 0.0)
    rtg_padded = place(rtg, 0.0) / scale
    return TrajectoryBatch(
        states=states[None].astype(np.float32),
        actions=place(np.asarray(trajectory["actions"])[start:stop], PAD_ACTION)[None].astype(
            np.float32
        ),
        rewards=place(rewards[start:stop], 0.0)[None, :, None].astype(np.float32),
        dones=place(_done_flags(trajectory).reshape(-1)[start:stop], PAD_DONE)[None].astype(
            np.int64
        ),
        rtg=rtg_padded[None, :, None].astype(np.float32),
        timesteps=place(timesteps, 0)[None].astype(np.int64),
        attention_mask=mask[None].astype(np.float32),
    )


def _check_trajectory(owner: str, index: int, trajectory: Mapping[str, Any]) -> None:
    """One step or more, with ``(T, obs_dim)`` observations, ``(T, act_dim)`` actions and ``T``
    rewards."""
    where = f"{owner}: trajectory {index}"
    missing = [k for k in ("observations", "actions", "rewards") if k not in trajectory]
    if missing:
        raise KeyError(f"{where} has no {missing}; each needs observations, actions and rewards")
    rewards = np.asarray(trajectory["rewards"])
    steps = len(rewards) if rewards.ndim else 0
    if steps == 0:
        raise ValueError(f"{where} has no steps; leave empty episodes out")
    for key in ("observations", "actions"):
        array = np.asarray(trajectory[key])
        if array.ndim != 2 or len(array) != steps:
            raise ValueError(
                f"{where}: {key} must be ({steps}, size), one row per reward, got shape "
                f"{array.shape}"
                + ("; give one value a step as array.reshape(-1, 1)" if array.ndim == 1 else "")
            )
        if array.dtype.kind in "biuf" and not np.isfinite(array).all():
            first = np.argwhere(~np.isfinite(array))[0].tolist()
            raise ValueError(f"{where}: {key} hold NaN or infinite values (the first at {first})")
    if not np.isfinite(np.asarray(rewards, dtype=np.float64)).all():
        first = int(np.flatnonzero(~np.isfinite(np.asarray(rewards, dtype=np.float64)))[0])
        raise ValueError(f"{where}: rewards hold NaN or infinite values (the first at {first})")
    flags = _done_flags(trajectory)
    if flags.size != steps:
        raise ValueError(
            f"{where}: terminals/dones must hold one flag per reward ({steps}), got shape "
            f"{flags.shape}"
        )


class TrajectorySampler:
    """Random windows of a set of trajectories, as PARL's DT example samples them.

    The states' mean and standard deviation (plus 1e-6) over every step normalise the states.
    Only the best trajectories by return, covering a fraction ``pct_traj`` of all steps, are
    kept (at least one); a trajectory is drawn with probability proportional to its length and a
    window's start uniformly among its steps.

    Args:
        trajectories: the episodes (see the module's docstring).
        context: the windows' length ``K``.
        max_ep_len: time steps from ``max_ep_len - 1`` on are clipped to it.
        scale: the returns-to-go are divided by it.
        pct_traj: the fraction of steps to keep, from the best trajectories down.
        padding: ``"left"`` (PARL's) or ``"right"``.
        seed: seed of the sampler's own numpy generator.
    """

    def __init__(
        self,
        trajectories: Sequence[Mapping[str, Any]],
        context: int = 20,
        max_ep_len: int = 1000,
        scale: float = 1000.0,
        pct_traj: float = 1.0,
        padding: str = "left",
        seed: int | None = None,
    ) -> None:
        owner = "TrajectorySampler"
        if len(trajectories) == 0:
            raise ValueError(f"{owner}: trajectories is empty; pass at least one episode")
        self.trajectories = list(trajectories)
        for i, trajectory in enumerate(self.trajectories):
            _check_trajectory(owner, i, trajectory)
        # a batch stacks windows of different trajectories: every one needs the same sizes
        for key in ("observations", "actions"):
            sizes = [np.asarray(t[key]).shape[1] for t in self.trajectories]
            odd = next((i for i, size in enumerate(sizes) if size != sizes[0]), None)
            if odd is not None:
                raise ValueError(
                    f"{owner}: trajectory {odd} has {key} of {sizes[odd]} values a step, "
                    f"trajectory 0 of {sizes[0]}; every trajectory must come from the same env"
                )
        self.context = check_int("context", context, low=1, owner=owner)
        self.max_ep_len = check_int("max_ep_len", max_ep_len, low=1, owner=owner)
        self.scale = check_float("scale", scale, low=0.0, low_open=True, owner=owner)
        pct_traj = check_float("pct_traj", pct_traj, low=0.0, high=1.0, owner=owner)
        if padding not in ("left", "right"):
            raise ValueError(f"{owner}: padding must be 'left' or 'right', got {padding!r}")
        self.padding = padding
        self.rng = np.random.default_rng(seed)
        states = np.concatenate([np.asarray(t["observations"]) for t in self.trajectories])
        self.state_mean = states.mean(axis=0)
        self.state_std = states.std(axis=0) + 1e-6
        lengths = np.array([len(np.asarray(t["rewards"])) for t in self.trajectories])
        returns = np.array([np.asarray(t["rewards"]).sum() for t in self.trajectories])
        # the best trajectory always, then the next best while they fit in pct_traj of the steps
        budget = max(int(pct_traj * lengths.sum()), 1)
        order = np.argsort(returns)[::-1]
        kept, steps = 1, int(lengths[order[0]])
        while kept < len(order) and steps + lengths[order[kept]] <= budget:
            steps += int(lengths[order[kept]])
            kept += 1
        self.indices = order[:kept]
        self.probabilities = lengths[self.indices] / lengths[self.indices].sum()

    def sample(self, batch_size: int) -> TrajectoryBatch:
        """``batch_size`` random windows.

        Args:
            batch_size: number of windows ``B``.
        """
        check_int("batch_size", batch_size, low=1, owner="TrajectorySampler.sample")
        picks = self.rng.choice(self.indices, size=batch_size, replace=True, p=self.probabilities)
        windows = []
        for index in picks:
            trajectory = self.trajectories[int(index)]
            start = int(self.rng.integers(len(np.asarray(trajectory["rewards"]))))
            windows.append(
                trajectory_window(
                    trajectory,
                    start,
                    self.context,
                    max_ep_len=self.max_ep_len,
                    state_mean=self.state_mean,
                    state_std=self.state_std,
                    scale=self.scale,
                    padding=self.padding,
                )
            )
        return TrajectoryBatch(*(np.concatenate(parts) for parts in zip(*windows, strict=True)))
