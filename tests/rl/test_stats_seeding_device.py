"""WindowStat, TimeStat, the seeding helpers and get_device."""

from __future__ import annotations

import random

import gymnasium as gym
import numpy as np
import pytest
import torch

from parl.utils import TimeStat, WindowStat, get_device, seed_env, set_seed, worker_seed


def test_window_stat_keeps_the_last_values() -> None:
    stat = WindowStat(3)
    assert stat.mean is None and stat.min is None and stat.count == 0
    for value in (1, 2, 3, np.float32(10)):
        stat.add(value)
    assert stat.count == 3
    assert stat.mean == 5.0 and stat.min == 2.0 and stat.max == 10.0
    with pytest.raises(TypeError, match="WindowStat.add expects a number"):
        stat.add("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="WindowStat: window_size must be an int >= 1"):
        WindowStat(0)


def test_time_stat_measures_sections() -> None:
    timer = TimeStat(window_size=2)
    for _ in range(3):
        with timer:
            sum(range(10_000))
    assert timer.time_samples.count == 2
    assert 0.0 < timer.min <= timer.mean <= timer.max  # type: ignore[operator]
    assert timer.total >= 2 * timer.min  # type: ignore[operator]
    with pytest.raises(RuntimeError, match="without start"):
        TimeStat().stop()


def test_set_seed_makes_every_generator_repeat() -> None:
    def draw() -> tuple[float, float, float, int]:
        return (
            random.random(),
            float(np.random.rand()),
            float(torch.rand(1)),
            int(env.action_space.sample()),
        )

    env = gym.make("CartPole-v1")
    set_seed(3, env)
    first, first_obs = draw(), env.reset()[0]
    set_seed(3, env)
    assert draw() == first
    np.testing.assert_array_equal(env.reset()[0], first_obs)
    set_seed(4, env)
    assert draw() != first


def test_seed_env_returns_the_first_observation() -> None:
    env = gym.make("CartPole-v1")
    obs, _ = seed_env(env, 11)
    np.testing.assert_array_equal(obs, env.reset(seed=11)[0])
    with pytest.raises(TypeError, match="env must be a gymnasium.Env"):
        seed_env(object(), 1)


def test_seed_arguments() -> None:
    assert worker_seed(100, 3) == 103
    with pytest.raises(ValueError, match="seed must be an int in"):
        set_seed(-1)
    with pytest.raises(TypeError, match=r"seed must be an int .*got '1' \(str\)"):
        set_seed("1")  # type: ignore[arg-type]


def test_get_device() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert get_device("auto") == torch.device(expected)
    assert get_device() == torch.device(expected)
    assert get_device("cpu") == torch.device("cpu")
    assert get_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu', 'cuda'"):
        get_device("gpu")
    with pytest.raises(TypeError, match="device must be 'auto'"):
        get_device(0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cuda:99"):
        get_device("cuda:99")
