"""``wrap_rms``: running mean/std normalisation of MuJoCo observations and rewards (PARL's name).

Built on gymnasium's ``RecordEpisodeStatistics`` (raw returns in ``info["episode"]``),
``NormalizeObservation`` and ``NormalizeReward``, with PARL's clipping at +-10. What this module
adds is access to the statistics: ``get_ob_rms``/``set_ob_rms`` (PARL's, to give the evaluation
env the training statistics) and ``get_rms_state``/``set_rms_state`` (plain arrays, saved with a
training checkpoint so that a resumed run normalises as before).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium.wrappers import (
    ClipReward,
    NormalizeObservation,
    NormalizeReward,
    RecordEpisodeStatistics,
    TransformObservation,
)
from gymnasium.wrappers.utils import RunningMeanStd

from parl.env.atari_wrappers import get_wrapper_by_cls
from parl.env.compat_wrapper import CompatWrapper

__all__ = ["RmsEnv", "get_ob_rms", "wrap_rms"]


class SampleRunningMeanStd(RunningMeanStd):
    """gymnasium's ``RunningMeanStd`` with the update from one sample done without
    ``np.mean``/``np.var`` (the wrappers update from a batch of one on every step, and those
    generic reductions were a third of a normalised MuJoCo step). The mean of one sample is the
    sample and its variance ``(x - x)^2`` (0, or NaN for an infinite value), exactly what the
    reductions return, so the statistics are bit for bit gymnasium's."""

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x)
        if x.ndim == 0 or x.shape[0] != 1:
            super().update(x)
            return
        sample = x[0]
        self.update_from_moments(sample, np.square(sample - sample), 1)

    @classmethod
    def like(cls, rms: RunningMeanStd) -> SampleRunningMeanStd:
        new = cls(shape=np.shape(rms.mean), dtype=np.asarray(rms.mean).dtype)
        new.mean, new.var, new.count = rms.mean, rms.var, rms.count
        return new


def _rms_to_dict(rms: RunningMeanStd) -> dict[str, Any]:
    return {"mean": np.array(rms.mean), "var": np.array(rms.var), "count": float(rms.count)}


def _rms_from_dict(rms: RunningMeanStd, state: dict[str, Any]) -> None:
    mean = np.asarray(state["mean"], dtype=np.float64)
    if mean.shape != np.shape(rms.mean):
        raise ValueError(
            f"running statistics of shape {mean.shape} do not fit this env's {np.shape(rms.mean)}"
        )
    rms.mean = mean.astype(np.asarray(rms.mean).dtype)
    rms.var = np.asarray(state["var"], dtype=np.float64).astype(np.asarray(rms.var).dtype)
    rms.count = float(state["count"])


class _RmsAccess:
    """The statistics of the ``NormalizeObservation``/``NormalizeReward`` wrappers below."""

    def _obs_norm(self) -> NormalizeObservation:
        found = get_wrapper_by_cls(self, NormalizeObservation)
        assert found is not None, "wrap_rms always adds NormalizeObservation"
        return found

    def get_ob_rms(self) -> RunningMeanStd:
        """The observation statistics (an object with ``mean``, ``var`` and ``count``)."""
        return self._obs_norm().obs_rms

    def set_ob_rms(self, ob_rms: Any) -> None:
        """Use ``ob_rms`` (from ``get_ob_rms`` of the training env) for the observations."""
        if ob_rms is not None:
            state = ob_rms if isinstance(ob_rms, dict) else _rms_to_dict(ob_rms)
            _rms_from_dict(self._obs_norm().obs_rms, state)

    def get_rms_state(self) -> dict[str, Any]:
        """Observation and return statistics as plain numpy data, for a checkpoint."""
        state = {"ob_rms": _rms_to_dict(self._obs_norm().obs_rms)}
        reward_norm = get_wrapper_by_cls(self, NormalizeReward)
        if reward_norm is not None:
            state["ret_rms"] = _rms_to_dict(reward_norm.return_rms)
        return state

    def set_rms_state(self, state: dict[str, Any]) -> None:
        """Restore what ``get_rms_state`` returned."""
        _rms_from_dict(self._obs_norm().obs_rms, state["ob_rms"])
        reward_norm = get_wrapper_by_cls(self, NormalizeReward)
        if reward_norm is not None and "ret_rms" in state:
            _rms_from_dict(reward_norm.return_rms, state["ret_rms"])

    def train(self) -> None:
        """Update the statistics while stepping (the default for a training env)."""
        self._obs_norm().update_running_mean = True

    def eval(self) -> None:
        """Freeze the statistics (evaluation)."""
        self._obs_norm().update_running_mean = False


class RmsEnv(_RmsAccess, gymnasium.Wrapper):
    """Outermost wrapper of ``wrap_rms(..., compat=False)``: the gymnasium API plus the
    statistics accessors."""


class _CompatRmsEnv(_RmsAccess, CompatWrapper):
    """Outermost wrapper of ``wrap_rms(...)``: PARL's old API plus the statistics accessors."""


def get_ob_rms(env: Any) -> RunningMeanStd | None:
    """The observation statistics of an env made by ``wrap_rms`` (``None`` for another env)."""
    norm = get_wrapper_by_cls(env, NormalizeObservation)
    return None if norm is None else norm.obs_rms


def wrap_rms(
    env: gymnasium.Env,
    gamma: float | None = 0.99,
    test: bool = False,
    ob_rms: Any = None,
    *,
    compat: bool = True,
    clip: float = 10.0,
) -> Any:
    """Normalise observations (and, when training, rewards) with running statistics.

    ``gamma``: discount of the return whose variance scales the rewards. ``test=True``: the
    statistics are frozen (``ob_rms`` from the training env, if given) and rewards stay raw.
    Observations and scaled rewards are clipped to ``[-clip, clip]``. ``info["episode"]``
    carries the raw return ``"r"`` and length ``"l"`` at the end of each episode.
    ``compat=True`` (PARL) gives the old gym API; ``compat=False`` the gymnasium API.
    """
    env = RecordEpisodeStatistics(env)
    env = NormalizeObservation(env)
    bounds = env.observation_space
    env = TransformObservation(
        env, lambda obs: np.clip(obs, -clip, clip).astype(np.float32), bounds
    )
    if not test:
        env = NormalizeReward(env, gamma=0.99 if gamma is None else gamma)
        env = ClipReward(env, -clip, clip)
    wrapped: Any = _CompatRmsEnv(env) if compat else RmsEnv(env)
    obs_norm = wrapped._obs_norm()
    obs_norm.obs_rms = SampleRunningMeanStd.like(obs_norm.obs_rms)
    reward_norm = get_wrapper_by_cls(wrapped, NormalizeReward)
    if reward_norm is not None:
        reward_norm.return_rms = SampleRunningMeanStd.like(reward_norm.return_rms)
    if test:
        wrapped.eval()
        wrapped.set_ob_rms(ob_rms)
    return wrapped
