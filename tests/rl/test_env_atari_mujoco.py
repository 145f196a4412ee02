"""Atari (ale-py ships the ROMs) and MuJoCo envs through parl.env's wrappers."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest

from parl.env.atari_wrappers import (
    EpisodicLifeEnv,
    EvaluationGames,
    MonitorEnv,
    get_wrapper_by_cls,
    wrap_deepmind,
)
from parl.env.mujoco_wrappers import get_ob_rms, wrap_rms


@pytest.mark.parametrize(("obs_format", "shape"), [("NCHW", (4, 84, 84)), ("NHWC", (84, 84, 4))])
def test_wrap_deepmind_runs_pong_with_the_old_api(obs_format: str, shape: tuple) -> None:
    env = wrap_deepmind(gymnasium.make("PongNoFrameskip-v4"), obs_format=obs_format)
    env.seed(0)
    obs = env.reset()
    assert obs.shape == shape and obs.dtype == np.uint8
    assert env.observation_space.shape == shape
    for _ in range(20):
        obs, reward, done, info = env.step(env.action_space.sample())
        assert obs.shape == shape and reward in (-1.0, 0.0, 1.0) and not done
    assert get_wrapper_by_cls(env, MonitorEnv).get_total_steps() > 20  # frame skip 4 below
    env.close()


def test_episodic_life_ends_the_episode_but_not_the_game() -> None:
    env = wrap_deepmind(gymnasium.make("BreakoutNoFrameskip-v4"), compat=False)
    life = get_wrapper_by_cls(env, EpisodicLifeEnv)
    env.reset(seed=1)
    lives = life.lives
    for _ in range(2000):
        _, _, terminated, truncated, info = env.step(0)  # never moves: loses lives
        if terminated:
            break
    assert terminated and not life.was_real_done and "episode" not in info
    env.reset()
    assert life.lives == lives - 1  # the same game continues
    env.close()


class CountingEnv(gymnasium.Env):
    """Reward 1 per step; terminates after 3 steps."""

    observation_space = gymnasium.spaces.Box(0, 10, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, self.t >= 3, False, {}


def test_monitor_env_records_games_like_parl() -> None:
    env = MonitorEnv(CountingEnv())
    for _ in range(2):
        env.reset()
        info: dict = {}
        for _ in range(3):
            *_, info = env.step(0)
    assert info["episode"]["r"] == 3.0 and info["episode"]["l"] == 3
    assert list(env.next_episode_results()) == [(3.0, 3), (3.0, 3)]
    assert list(env.next_episode_results()) == []
    assert env.get_total_steps() == 6


def test_wrap_rms_runs_halfcheetah_and_reports_raw_returns() -> None:
    env = wrap_rms(gymnasium.make("HalfCheetah-v5"), gamma=0.99)
    raw = gymnasium.make("HalfCheetah-v5")
    assert env._max_episode_steps == 1000
    env.seed(3)
    obs = env.reset()
    raw.reset(seed=3)
    rng = np.random.default_rng(0)
    raw_return, steps, done, info = 0.0, 0, False, {}
    while not done:
        action = rng.uniform(-1, 1, 6).astype(np.float32)
        obs, reward, done, info = env.step(action)
        raw_return += raw.step(action)[1]
        steps += 1
        assert obs.dtype == np.float32 and np.abs(obs).max() <= 10.0 and abs(reward) <= 10.0
    assert steps == 1000 and info["TimeLimit.truncated"]
    assert info["episode"]["r"] == pytest.approx(raw_return)
    rms = env.get_ob_rms()
    assert rms is get_ob_rms(env) and rms.count > 1000


def test_rms_state_saved_and_restored_gives_the_same_normalisation() -> None:
    train = wrap_rms(gymnasium.make("HalfCheetah-v5"), gamma=0.99, compat=False)
    train.reset(seed=0)
    for _ in range(50):
        train.step(train.action_space.sample())
    state = train.get_rms_state()
    test_env = wrap_rms(gymnasium.make("HalfCheetah-v5"), None, test=True, compat=False)
    test_env.set_rms_state(state)
    raw = gymnasium.make("HalfCheetah-v5")
    obs, _ = test_env.reset(seed=5)
    raw_obs, _ = raw.reset(seed=5)
    mean, var = state["ob_rms"]["mean"], state["ob_rms"]["var"]
    expected = np.clip((raw_obs - mean) / np.sqrt(var + 1e-8), -10, 10)
    np.testing.assert_allclose(obs, expected, rtol=1e-5, atol=1e-5)
    test_env.step(test_env.action_space.sample())
    assert test_env.get_rms_state()["ob_rms"]["count"] == state["ob_rms"]["count"]  # frozen


@pytest.mark.parametrize("obs_format", ["NCHW", "NHWC"])
def test_frames_without_framestack_are_two_dimensional(obs_format: str) -> None:
    # PARL's DQN stacks single frames itself: np.stack(context) needs (84, 84) frames.
    env = wrap_deepmind(
        gymnasium.make("PongNoFrameskip-v4"), framestack=False, obs_format=obs_format
    )
    env.seed(0)
    frames = [env.reset()] + [env.step(env.action_space.sample())[0] for _ in range(3)]
    assert np.stack(frames).shape == (4, 84, 84) and env.observation_space.shape == (84, 84)
    env.close()


def test_test_env_reports_a_round_of_whole_games_as_parl_evaluation_reads_it() -> None:
    env = wrap_deepmind(gymnasium.make("PongNoFrameskip-v4"), test=True, test_episodes=2)
    assert isinstance(get_wrapper_by_cls(env, EvaluationGames), EvaluationGames)
    monitor = get_wrapper_by_cls(env, MonitorEnv)
    env.seed(0)
    env.reset()
    assert not env.get_real_done() and env.get_eval_rewards() is None
    games = 0
    while not env.get_real_done():  # PARL's evaluation loop
        _, _, done, _ = env.step(env.action_space.sample())
        if done:
            games += 1
            env.reset()
    assert games == 2  # test=True: a done is a whole game, not a lost life
    assert env.get_eval_rewards() == monitor.get_episode_rewards()[-2:]
    assert all(-21.0 <= score <= 21.0 and score != 0.0 for score in env.get_eval_rewards())
    env.close()


def test_evaluation_games_counts_games_from_its_monitor() -> None:
    env = EvaluationGames(MonitorEnv(CountingEnv()), test_episodes=2)
    results = []
    for _ in range(5):
        env.reset()
        results.append((env.get_real_done(), env.get_eval_rewards()))
        for _ in range(3):
            env.step(0)
    assert results == [(False, None), (False, None), (True, [3.0, 3.0]), (False, None),
                       (True, [3.0, 3.0])]  # fmt: skip
    with pytest.raises(ValueError, match="needs a MonitorEnv inside env"):
        EvaluationGames(CountingEnv())
    with pytest.raises(ValueError, match="test_episodes must be an int >= 1, got 0"):
        EvaluationGames(MonitorEnv(CountingEnv()), test_episodes=0)


def test_test_env_serves_again_after_a_lost_life() -> None:
    # Breakout waits for FIRE after each lost life; an agent trained with life-loss episodes
    # never learnt to press it, so the evaluation env presses it (else the game never ends).
    env = wrap_deepmind(gymnasium.make("BreakoutNoFrameskip-v4"), test=True, test_episodes=1)
    env.seed(0)
    env.reset()
    rng = np.random.default_rng(0)
    steps = 0
    while not env.get_real_done() and steps < 10_000:
        _, _, done, _ = env.step(int(rng.choice([0, 2, 3])))  # NOOP, RIGHT, LEFT: never FIRE
        steps += 1
        if done:
            env.reset()
    assert env.get_real_done(), f"no game over after {steps} steps without FIRE"
    assert env.get_eval_rewards()[0] >= 0.0
    env.close()


@pytest.mark.parametrize("kwargs", [{}, {"framestack": False}, {"obs_format": "NCHW"}])
def test_wrapped_atari_envs_pickle(kwargs: dict) -> None:
    import pickle

    env = wrap_deepmind(gymnasium.make("PongNoFrameskip-v4"), **kwargs)
    copy_of = pickle.loads(pickle.dumps(env))
    assert copy_of.reset().shape == env.observation_space.shape
    assert copy_of.step(0)[1] in (-1.0, 0.0, 1.0)
    env.close()
    copy_of.close()
