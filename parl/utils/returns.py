"""Returns and advantages: pure functions of numpy arrays, no state, no torch.

Conventions (time runs along axis 0; a second axis holds parallel environments):

* ``rewards[t]`` is the reward received after the action at step ``t``;
* ``dones[t]`` is true when the episode ended at step ``t``: nothing after ``t`` is credited to
  steps up to ``t``;
* ``values[t]`` is the critic's ``V(s_t)`` and ``next_value`` is ``V(s_T)`` for the state after the
  last step (pass 0 if the last step ended its episode, or set ``dones[-1]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parl.validation import check_float

__all__ = ["calc_discount_sum_rewards", "calc_gae"]


def _float_array(name: str, value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be an array of numbers, got dtype {array.dtype}")
    if array.ndim not in (1, 2):
        raise ValueError(f"{name} must have shape (T,) or (T, num_envs), got {array.shape}")
    return array.astype(np.result_type(array.dtype, np.float32), copy=False)


def _not_done(dones: Any, shape: tuple[int, ...]) -> np.ndarray:
    if dones is None:
        return np.ones(shape, dtype=np.float64)
    done = np.asarray(dones)
    if done.shape != shape:
        raise ValueError(f"dones must have the shape of rewards {shape}, got {done.shape}")
    return 1.0 - done.astype(np.float64)


def calc_discount_sum_rewards(rewards: Any, gamma: float, dones: Any = None) -> np.ndarray:
    """Discounted reward-to-go: ``G[t] = rewards[t] + gamma * G[t + 1]`` (cut where ``dones``).

    ``rewards`` has shape ``(T,)`` or ``(T, num_envs)``; the result has the same shape and a
    floating dtype (float32 for float32 or integer input).
    Example: ``calc_discount_sum_rewards([1, 1, 1], 0.5) -> [1.75, 1.5, 1.0]``.
    """
    gamma = check_float("gamma", gamma, low=0.0, high=1.0)
    rew = _float_array("rewards", rewards)
    not_done = _not_done(dones, rew.shape)
    returns = np.zeros(rew.shape, dtype=np.float64)
    running = np.zeros(rew.shape[1:], dtype=np.float64)
    for t in range(rew.shape[0] - 1, -1, -1):
        running = rew[t] + gamma * not_done[t] * running
        returns[t] = running
    return returns.astype(rew.dtype)


def calc_gae(
    rewards: Any,
    values: Any,
    next_value: Any,
    gamma: float,
    lam: float,
    dones: Any = None,
) -> np.ndarray:
    """Generalized advantage estimation (Schulman et al. 2016, https://arxiv.org/abs/1506.02438).

    ``delta[t] = rewards[t] + gamma * V(s_{t+1}) * (1 - dones[t]) - values[t]`` and
    ``A[t] = delta[t] + gamma * lam * (1 - dones[t]) * A[t + 1]``, with ``V(s_T) = next_value``.
    ``lam=1`` gives the discounted return minus ``values``; ``lam=0`` the one-step TD error.
    Returns the advantages, shape of ``rewards``; add ``values`` to get the critic's targets.
    """
    gamma = check_float("gamma", gamma, low=0.0, high=1.0)
    lam = check_float("lam", lam, low=0.0, high=1.0)
    rew = _float_array("rewards", rewards)
    val = _float_array("values", values)
    if val.shape != rew.shape:
        raise ValueError(f"values must have the shape of rewards {rew.shape}, got {val.shape}")
    last = np.asarray(next_value, dtype=np.float64)
    if last.shape not in ((), rew.shape[1:]):
        raise ValueError(
            f"next_value must be a number or have shape {rew.shape[1:]}, got {last.shape}"
        )
    not_done = _not_done(dones, rew.shape)
    if rew.shape[0] == 0:
        return np.zeros(rew.shape, dtype=np.result_type(rew.dtype, val.dtype))
    next_values = np.concatenate(
        [val[1:].astype(np.float64), np.broadcast_to(last, (1, *rew.shape[1:]))]
    )
    deltas = rew + gamma * next_values * not_done - val
    advantages = np.zeros(rew.shape, dtype=np.float64)
    running = np.zeros(rew.shape[1:], dtype=np.float64)
    for t in range(rew.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages.astype(np.result_type(rew.dtype, val.dtype))
