"""Trajectory windows for Decision Transformer, against values computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from parl.utils import TrajectorySampler, trajectory_window
from parl.utils.trajectory_batch import returns_to_go


def episode(rewards: list[float], offset: float = 0.0) -> dict[str, np.ndarray]:
    """States ``[offset + t]``, actions ``[0.1 (t + 1)]``, the given rewards, a last terminal."""
    length = len(rewards)
    return {
        "observations": (offset + np.arange(length, dtype=np.float32))[:, None],
        "actions": (0.1 * np.arange(1, length + 1, dtype=np.float32))[:, None],
        "rewards": np.asarray(rewards, dtype=np.float32),
        "terminals": np.eye(length, dtype=bool)[-1],
    }


def test_returns_to_go() -> None:
    np.testing.assert_array_equal(returns_to_go([1.0, 2.0, 3.0, 4.0]), [10.0, 9.0, 7.0, 4.0])


def test_a_full_window_inside_the_episode() -> None:
    window = trajectory_window(episode([1, 2, 3, 4]), 1, 2, scale=10.0)
    np.testing.assert_array_equal(window.states[0, :, 0], [1, 2])
    np.testing.assert_allclose(window.actions[0, :, 0], [0.2, 0.3])
    np.testing.assert_array_equal(window.rewards[0, :, 0], [2, 3])
    np.testing.assert_array_equal(window.dones[0], [0, 0])
    # returns-to-go of steps 1, 2 and the step after the window: 9, 7, 4
    np.testing.assert_allclose(window.rtg[0, :, 0], [0.9, 0.7, 0.4])
    np.testing.assert_array_equal(window.timesteps[0], [1, 2])
    np.testing.assert_array_equal(window.attention_mask[0], [1, 1])


def test_a_window_past_the_end_is_padded_on_the_left_as_parl_does() -> None:
    window = trajectory_window(
        episode([1, 2, 3, 4]), 2, 4, max_ep_len=3, state_mean=1.0, state_std=2.0
    )
    assert window.states.shape == (1, 4, 1) and window.rtg.shape == (1, 5, 1)
    # padded states are zeros before normalisation: (0 - 1) / 2
    np.testing.assert_array_equal(window.states[0, :, 0], [-0.5, -0.5, 0.5, 1.0])
    np.testing.assert_allclose(window.actions[0, :, 0], [-10, -10, 0.3, 0.4])
    np.testing.assert_array_equal(window.rewards[0, :, 0], [0, 0, 3, 4])
    np.testing.assert_array_equal(window.dones[0], [2, 2, 0, 1])
    # 7 and 4 to go, then 0 after the episode's end; divided by the default scale
    np.testing.assert_allclose(window.rtg[0, :, 0], [0, 0, 0.007, 0.004, 0])
    # time step 3 is clipped to max_ep_len - 1 = 2
    np.testing.assert_array_equal(window.timesteps[0], [0, 0, 2, 2])
    np.testing.assert_array_equal(window.attention_mask[0], [0, 0, 1, 1])
    assert window.states.dtype == np.float32 and window.timesteps.dtype == np.int64


def test_right_padding_puts_the_real_steps_first() -> None:
    window = trajectory_window(episode([1, 2, 3, 4]), 2, 4, padding="right", scale=1.0)
    np.testing.assert_array_equal(window.states[0, :, 0], [2, 3, 0, 0])
    np.testing.assert_array_equal(window.rtg[0, :, 0], [7, 4, 0, 0, 0])
    np.testing.assert_array_equal(window.attention_mask[0], [1, 1, 0, 0])
    np.testing.assert_array_equal(window.timesteps[0], [2, 3, 0, 0])


def test_sampler_keeps_the_best_trajectories_and_normalises_states() -> None:
    # returns 3 (3 steps), 30 (2 steps), 12 (4 steps): 50% of 9 steps keeps 4 -> the best
    # (2 steps) alone, since adding the next best (4 steps) would exceed 4
    episodes = [episode([1, 1, 1]), episode([10, 20], offset=5), episode([3, 3, 3, 3])]
    sampler = TrajectorySampler(episodes, context=3, pct_traj=0.5, seed=0)
    np.testing.assert_array_equal(sampler.indices, [1])
    states = np.concatenate([e["observations"] for e in episodes])
    np.testing.assert_allclose(sampler.state_mean, states.mean(0))
    np.testing.assert_allclose(sampler.state_std, states.std(0) + 1e-6)
    batch = sampler.sample(6)
    assert batch.states.shape == (6, 3, 1) and batch.rtg.shape == (6, 4, 1)
    assert set(np.unique(batch.timesteps)) <= {0, 1}
    everything = TrajectorySampler(episodes, context=3, seed=0)
    np.testing.assert_array_equal(everything.indices, [1, 2, 0])
    np.testing.assert_allclose(everything.probabilities, [2 / 9, 4 / 9, 3 / 9])


def test_sampler_same_seed_same_batches() -> None:
    episodes = [episode([1.0] * n) for n in (3, 5, 8)]
    first, second = (TrajectorySampler(episodes, context=4, seed=3).sample(5) for _ in range(2))
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    tensors = first.to_tensors()
    assert len(tensors) == 7 and tuple(tensors[0].shape) == (5, 4, 1)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="trajectories is empty"):
        TrajectorySampler([])
    no_dones = {key: value for key, value in episode([1, 2]).items() if key != "terminals"}
    with pytest.raises(KeyError, match="'terminals' or 'dones'"):
        trajectory_window(no_dones, 0, 2)
    with pytest.raises(ValueError, match=r"start must be an int in \[0, 1\]"):
        trajectory_window(episode([1, 2]), 2, 2)
    with pytest.raises(ValueError, match="padding must be 'left' or 'right'"):
        TrajectorySampler([episode([1, 2])], padding="middle")


def test_the_sampler_names_an_empty_or_misshapen_trajectory() -> None:
    """An episode of no steps used to end in numpy's "probabilities contain NaN" at the first
    batch (when it was the only one), and 1-D actions in windows without their action axis."""
    empty = {key: value[:0] for key, value in episode([1.0]).items()}
    with pytest.raises(ValueError, match="trajectory 1 has no steps; leave empty episodes out"):
        TrajectorySampler([episode([1, 2]), empty])
    flat = {**episode([1, 2, 3]), "actions": np.array([0.1, 0.2, 0.3], np.float32)}
    with pytest.raises(ValueError, match=r"trajectory 0: actions must be \(3, size\).*\(3,\)"):
        TrajectorySampler([flat])
    short = {**episode([1, 2, 3]), "observations": np.zeros((2, 4), np.float32)}
    with pytest.raises(ValueError, match=r"observations must be \(3, size\).*\(2, 4\)"):
        TrajectorySampler([episode([5]), short])
    with pytest.raises(KeyError, match=r"trajectory 0 has no \['rewards'\]"):
        TrajectorySampler([{"observations": np.zeros((1, 1)), "actions": np.zeros((1, 1))}])


def test_the_sampler_refuses_trajectories_that_would_fail_or_poison_a_batch() -> None:
    """Flags of another length, or trajectories of other sizes, used to fail in numpy's
    concatenate at some later batch, and a NaN reward trained on NaN returns-to-go: each is
    refused when the sampler is built, naming the trajectory."""
    short_flags = {**episode([1, 2, 3]), "terminals": np.zeros(2, bool)}
    with pytest.raises(ValueError, match=r"trajectory 1: terminals/dones must hold one flag per"):
        TrajectorySampler([episode([1, 2, 3]), short_flags])
    wide = {**episode([1, 2]), "observations": np.zeros((2, 5), np.float32)}
    with pytest.raises(ValueError, match="trajectory 1 has observations of 5 values a step"):
        TrajectorySampler([episode([1, 2]), wide])
    other_actions = {**episode([1, 2]), "actions": np.zeros((2, 3), np.float32)}
    with pytest.raises(ValueError, match="trajectory 1 has actions of 3 values a step"):
        TrajectorySampler([episode([1, 2]), other_actions])
    with pytest.raises(ValueError, match=r"trajectory 0: rewards hold NaN .* at 1\)"):
        TrajectorySampler([episode([1, np.nan])])
    nan_obs = episode([1, 2])
    nan_obs["observations"][1, 0] = np.inf
    with pytest.raises(ValueError, match=r"trajectory 0: observations hold NaN .* \[1, 0\]"):
        TrajectorySampler([nan_obs])
