"""DeepMind-style Atari preprocessing with PARL's names: ``wrap_deepmind``, ``MonitorEnv``,
``get_wrapper_by_cls``.

Built on gymnasium's ``AtariPreprocessing`` (no-op starts, frame skip with max-pooling, resize,
grayscale), ``TransformReward`` (reward sign) and ``FrameStackObservation``. Written here only
what gymnasium lacks: ``MonitorEnv`` (raw episode statistics across life losses, PARL's
accessors), ``EpisodicLifeEnv`` (a life loss ends the training episode, but only a game over
resets the emulator) and ``FireResetEnv`` (press FIRE after a reset).

Importing this module registers ale-py's environments with gymnasium, so
``gymnasium.make("PongNoFrameskip-v4")`` works after ``import parl.env.atari_wrappers``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TransformReward

from parl.env.compat_wrapper import CompatWrapper
from parl.validation import check_int

__all__ = [
    "EpisodicLifeEnv",
    "EvaluationGames",
    "FireResetEnv",
    "MonitorEnv",
    "get_wrapper_by_cls",
    "wrap_deepmind",
]


def _register_ale() -> None:
    """ale-py ships the ROMs; registering makes the Atari ids known to ``gymnasium.make``."""
    try:
        import ale_py
    except ImportError:  # pragma: no cover - only without the [atari] extra
        return
    gymnasium.register_envs(ale_py)


_register_ale()


def get_wrapper_by_cls(env: Any, cls: type) -> Any:
    """The outermost wrapper of ``env`` that is an instance of ``cls`` (``env`` itself
    included), or ``None``."""
    current = env
    while True:
        if isinstance(current, cls):
            return current
        if not isinstance(current, gymnasium.Wrapper):
            return None
        current = current.env


class MonitorEnv(gymnasium.Wrapper):
    """Raw episode return and length (game over to game over, across life losses).

    At the end of a game ``info["episode"] = {"r": return, "l": length, "t": seconds}``;
    ``get_episode_rewards()``, ``get_episode_lengths()``, ``get_total_steps()`` and
    ``next_episode_results()`` (the episodes not yet returned) are PARL's accessors.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self._episode_rewards: list[float] = []
        self._episode_lengths: list[int] = []
        self._current_reward = 0.0
        self._num_steps = 0
        self._total_steps = 0
        self._num_returned = 0
        self._tstart = time.time()

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Start counting a new episode and reset the env below."""
        self._current_reward = 0.0
        self._num_steps = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Step the env below, counting the reward and the step.

        Returns:
            The gymnasium step tuple; at the end of a game ``info`` (a copy) also holds
            ``"episode": {"r": return, "l": length, "t": seconds since the wrapper was made}``.
        """
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._current_reward += float(reward)
        self._num_steps += 1
        self._total_steps += 1
        if terminated or truncated:
            self._episode_rewards.append(self._current_reward)
            self._episode_lengths.append(self._num_steps)
            info = dict(info)
            info["episode"] = {
                "r": self._current_reward,
                "l": self._num_steps,
                "t": round(time.time() - self._tstart, 6),
            }
        return obs, reward, terminated, truncated, info

    def get_episode_rewards(self) -> list[float]:
        """The raw return of every finished game, oldest first."""
        return self._episode_rewards

    def get_episode_lengths(self) -> list[int]:
        """The length in steps of every finished game, oldest first."""
        return self._episode_lengths

    def get_total_steps(self) -> int:
        """Steps taken through this wrapper since it was made."""
        return self._total_steps

    def next_episode_results(self) -> Iterator[tuple[float, int]]:
        """Yield ``(return, length)`` of the games finished since the last call."""
        for i in range(self._num_returned, len(self._episode_rewards)):
            yield self._episode_rewards[i], self._episode_lengths[i]
        self._num_returned = len(self._episode_rewards)


class EpisodicLifeEnv(gymnasium.Wrapper):
    """A lost life ends the episode for the learner (Mnih et al. 2015); the emulator is reset
    only at game over, otherwise ``reset`` continues the game with a no-op step."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.was_real_done = True

    def _lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Step the env below; a lost life (with lives left) is reported as ``terminated``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.was_real_done = terminated or truncated
        lives = self._lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """A real reset after a game over; after a lost life, one no-op step that goes on with the game
        (its observation and info are returned).
        """
        if self.was_real_done:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = self._lives()
        return obs, info


class FireResetEnv(gymnasium.Wrapper):
    """Press FIRE (and then action 2) after a reset, for games that wait for it.

    ``after_life_loss=True`` also presses FIRE after a lost life that does not end the game:
    without :class:`EpisodicLifeEnv` (whose episode ends there, so that the next reset
    presses it) a game such as Breakout would wait for a serve the agent never learnt to make.
    """

    def __init__(self, env: gymnasium.Env, after_life_loss: bool = False) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
        if len(meanings) < 3 or meanings[1] != "FIRE":
            raise ValueError(f"FireResetEnv needs FIRE as action 1, got actions {meanings}")
        self._after_life_loss = after_life_loss
        self._lives = 0

    def _lives_now(self) -> int:
        return int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset the env below, then press FIRE and action 2 (resetting again if either ends the game)."""
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                self.env.reset(**kwargs)
        self._lives = self._lives_now()
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Step the env below; with ``after_life_loss`` a lost life is followed by a FIRE step whose
        reward is added to this step's.
        """
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._after_life_loss and not (terminated or truncated):
            lives = self._lives_now()
            if lives < self._lives:
                obs, more, terminated, truncated, info = self.env.step(1)
                reward = float(reward) + float(more)
                lives = self._lives_now()
            self._lives = lives
        return obs, reward, terminated, truncated, info


class EvaluationGames(gymnasium.Wrapper):
    """Evaluation in rounds of ``test_episodes`` whole games, with PARL's accessors.

    A script plays on, resetting after each ``done``, until ``get_real_done()`` is true; the
    ``reset`` that follows the last game of a round sets it, and ``get_eval_rewards()`` then gives
    the round's raw game scores (``None`` in the middle of a round).
    """

    def __init__(self, env: gymnasium.Env, test_episodes: int = 3) -> None:
        test_episodes = check_int("test_episodes", test_episodes, low=1)
        super().__init__(env)
        monitor = get_wrapper_by_cls(env, MonitorEnv)
        if monitor is None:
            raise ValueError("EvaluationGames needs a MonitorEnv inside env to count games")
        self._monitor: MonitorEnv = monitor
        self._test_episodes = test_episodes
        self._round_end = len(monitor.get_episode_rewards()) + test_episodes
        self._real_done = False
        self._eval_rewards: list[float] | None = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset the env below and see whether the round is over: when ``test_episodes`` more games
        have finished, :meth:`get_real_done` turns true and :meth:`get_eval_rewards` gives their
        scores.
        """
        result = self.env.reset(**kwargs)
        games = self._monitor.get_episode_rewards()
        # ">=": a reset may finish more than one game (a game over during the no-op starts)
        if len(games) >= self._round_end:
            self._real_done = True
            self._eval_rewards = games[-self._test_episodes :]
            self._round_end = len(games) + self._test_episodes
        else:
            self._real_done = False
            self._eval_rewards = None
        return result

    def get_real_done(self) -> bool:
        """Whether the last ``reset`` closed a round of ``test_episodes`` games."""
        return self._real_done

    def get_eval_rewards(self) -> list[float] | None:
        """The raw scores of the round just closed, else ``None``."""
        return self._eval_rewards


# module-level functions, not lambdas: a wrapped env pickles (to a process started by spawn)
def _reward_sign(reward: Any) -> float:
    return float(np.sign(float(reward)))


def _channels_last(obs: np.ndarray) -> np.ndarray:
    return np.moveaxis(obs, 0, -1)


def wrap_deepmind(
    env: gymnasium.Env,
    dim: int = 84,
    framestack: bool = True,
    obs_format: str = "NHWC",
    test: bool = False,
    test_episodes: int = 3,
    *,
    compat: bool = True,
) -> gymnasium.Env:
    """DeepMind's Atari preprocessing, PARL's arguments.

    ``dim``: side of the square grayscale frame; ``framestack``: stack the last 4 frames;
    ``obs_format``: ``"NHWC"`` gives ``(dim, dim, 4)``, ``"NCHW"`` ``(4, dim, dim)``; without
    ``framestack`` a frame is ``(dim, dim)`` in either format, as in PARL.
    ``test=True`` keeps whole games (no life-loss episodes; FIRE is pressed after a lost life)
    and raw rewards, so evaluation returns are game scores, and adds :class:`EvaluationGames` (``get_real_done()`` and
    ``get_eval_rewards()`` after each round of ``test_episodes`` games).
    ``compat=True`` (PARL) returns the old gym API (:class:`CompatWrapper`); ``compat=False``
    the gymnasium API, e.g. for a vector env.
    """
    if obs_format not in ("NHWC", "NCHW"):
        raise ValueError(f"obs_format must be 'NHWC' or 'NCHW', got {obs_format!r}")
    spec_id = env.spec.id if env.spec is not None else ""
    env = MonitorEnv(env)
    frame_skip = 4 if "NoFrameskip" in spec_id else 1
    env = AtariPreprocessing(
        env, noop_max=30, frame_skip=frame_skip, screen_size=dim, terminal_on_life_loss=False
    )
    if not test:
        env = EpisodicLifeEnv(env)
    if "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireResetEnv(env, after_life_loss=test)
    if not test:
        env = TransformReward(env, _reward_sign)
    if framestack:
        env = FrameStackObservation(env, 4)
        if obs_format == "NHWC":
            env = gymnasium.wrappers.TransformObservation(
                env, _channels_last, gymnasium.spaces.Box(0, 255, (dim, dim, 4), np.uint8)
            )
    if test:
        env = EvaluationGames(env, test_episodes)
    return CompatWrapper(env) if compat else env
