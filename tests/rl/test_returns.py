"""calc_discount_sum_rewards and calc_gae against numbers worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from parl.utils import calc_discount_sum_rewards, calc_gae


def test_discounted_returns_by_hand() -> None:
    # G2 = 3; G1 = 2 + 0.9 * 3 = 4.7; G0 = 1 + 0.9 * 4.7 = 5.23
    np.testing.assert_allclose(
        calc_discount_sum_rewards([1, 2, 3], 0.9), [5.23, 4.7, 3.0], rtol=1e-6
    )
    np.testing.assert_array_equal(calc_discount_sum_rewards([1.0, 1.0, 1.0], 0.5), [1.75, 1.5, 1.0])
    np.testing.assert_array_equal(calc_discount_sum_rewards([1.0, 1.0, 1.0], 1.0), [3, 2, 1])


def test_discounted_returns_stop_at_episode_ends() -> None:
    # dones[1]: G2 = 3; G1 = 2 (nothing after the end); G0 = 1 + 0.5 * 2 = 2
    result = calc_discount_sum_rewards([1.0, 2.0, 3.0], 0.5, dones=[False, True, False])
    np.testing.assert_array_equal(result, [2.0, 2.0, 3.0])


def test_discounted_returns_parallel_envs_and_dtype() -> None:
    rewards = np.array([[1.0, 0.0], [1.0, 1.0]], dtype=np.float32)
    result = calc_discount_sum_rewards(rewards, 0.5)
    np.testing.assert_array_equal(result, [[1.5, 0.5], [1.0, 1.0]])
    assert result.dtype == np.float32
    assert calc_discount_sum_rewards(np.array([1.0, 2.0]), 0.5).dtype == np.float64
    assert calc_discount_sum_rewards([], 0.9).shape == (0,)


def test_gae_by_hand() -> None:
    rewards, values, next_value = [1.0, 0.0, 2.0], [0.5, 1.0, 1.5], 2.0
    # deltas: 1 + 0.5 * 1.0 - 0.5 = 1.0; 0 + 0.5 * 1.5 - 1.0 = -0.25; 2 + 0.5 * 2.0 - 1.5 = 1.5
    # A2 = 1.5; A1 = -0.25 + 0.25 * 1.5 = 0.125; A0 = 1.0 + 0.25 * 0.125 = 1.03125
    np.testing.assert_array_equal(
        calc_gae(rewards, values, next_value, gamma=0.5, lam=0.5), [1.03125, 0.125, 1.5]
    )
    # lam = 0: the one-step TD errors
    np.testing.assert_array_equal(
        calc_gae(rewards, values, next_value, 0.5, 0.0), [1.0, -0.25, 1.5]
    )
    # lam = 1: bootstrapped discounted return (1.75, 1.5, 3.0) minus the values
    np.testing.assert_array_equal(calc_gae(rewards, values, next_value, 0.5, 1.0), [1.25, 0.5, 1.5])


def test_gae_with_episode_end() -> None:
    # dones[1]: delta1 = 0 - 1.0 = -1.0 (no bootstrap) and A1 does not see A2;
    # A2 = 1.5; A1 = -1.0; A0 = 1.0 + 0.25 * -1.0 = 0.75
    result = calc_gae([1.0, 0.0, 2.0], [0.5, 1.0, 1.5], 2.0, 0.5, 0.5, dones=[0, 1, 0])
    np.testing.assert_array_equal(result, [0.75, -1.0, 1.5])


def test_gae_parallel_envs() -> None:
    rewards = np.array([[1.0, 0.0], [0.0, 1.0]])
    values = np.array([[0.0, 1.0], [1.0, 0.0]])
    next_value = np.array([2.0, 4.0])
    # env 0: d1 = 0 + 0.5 * 2 - 1 = 0; d0 = 1 + 0.5 * 1 - 0 = 1.5; A0 = 1.5 + 0.25 * 0 = 1.5
    # env 1: d1 = 1 + 0.5 * 4 - 0 = 3; d0 = 0 + 0.5 * 0 - 1 = -1; A0 = -1 + 0.25 * 3 = -0.25
    np.testing.assert_array_equal(
        calc_gae(rewards, values, next_value, 0.5, 0.5), [[1.5, -0.25], [0.0, 3.0]]
    )


def test_bad_input_names_the_argument() -> None:
    with pytest.raises(ValueError, match=r"gamma must be a float in \[0.0, 1.0\], got 1.5"):
        calc_discount_sum_rewards([1.0], 1.5)
    with pytest.raises(TypeError, match="lam must be a float"):
        calc_gae([1.0], [0.0], 0.0, 0.9, "0.95")
    with pytest.raises(
        ValueError, match=r"values must have the shape of rewards \(2,\), got \(3,\)"
    ):
        calc_gae([1.0, 1.0], [0.0, 0.0, 0.0], 0.0, 0.9, 0.95)
    with pytest.raises(ValueError, match=r"next_value must be a number or have shape \(2,\)"):
        calc_gae(np.zeros((3, 2)), np.zeros((3, 2)), np.zeros(3), 0.9, 0.95)
    with pytest.raises(ValueError, match=r"dones must have the shape of rewards"):
        calc_discount_sum_rewards([1.0, 2.0], 0.9, dones=[True])
    with pytest.raises(TypeError, match="rewards must be an array of numbers"):
        calc_discount_sum_rewards(["a"], 0.9)
