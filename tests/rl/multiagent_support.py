"""What the multi-agent env tests share: the ``multiagent`` extra must be there under ``CI=true``
(CI installs it), a serial loop over ``MAenv`` that a vector env must reproduce, and a check
that an example's parser refuses flag values it cannot run with."""

from __future__ import annotations

import importlib
import os
from typing import Any

import numpy as np
import pytest

from parl.env.multiagent_env import MAenv

from .conftest import REPO_ROOT, RunPython


def require_multiagent() -> None:
    """Skip without mpe2 and lbforaging; fail under ``CI=true``, where the extra is installed."""
    for module in ("mpe2", "lbforaging"):
        try:
            importlib.import_module(module)
        except ImportError:
            message = f"{module} is not installed: pip install 'parl-torch[multiagent]'"
            if os.environ.get("CI") == "true":
                pytest.fail(f"{message} (CI=true installs the multiagent extra)", False)
            pytest.skip(message)


class SerialLoop:
    """``MAenv`` copies stepped one after another with the vector env's auto-reset, giving the
    arrays a ``MultiAgentVectorEnv`` returns (observations padded to the longest)."""

    def __init__(self, envs: list[MAenv], same_step: bool) -> None:
        self.envs, self.same_step = envs, same_step
        self.ended = [False] * len(envs)
        self.width = max(int(np.prod(s)) for s in envs[0].obs_shape_n)

    def _pad(self, obs_n: list[np.ndarray]) -> np.ndarray:
        out = np.zeros((len(obs_n), self.width), np.float32)
        for i, o in enumerate(obs_n):
            out[i, : o.size] = o.ravel()
        return out

    def reset(self, seed: int) -> np.ndarray:
        self.ended = [False] * len(self.envs)
        return np.stack([self._pad(e.reset(seed=seed + i)) for i, e in enumerate(self.envs)])

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        obs, rewards, terms, truncs, finals = [], [], [], [], []
        for k, env in enumerate(self.envs):
            final: Any = None
            if self.ended[k]:
                obs_n, reward_n = env.reset(), [0.0] * env.n
                term, trunc, self.ended[k] = [False] * env.n, [False] * env.n, False
            else:
                acts = list(actions[k])
                if env.continuous_actions:
                    acts = [a[:size] for a, size in zip(acts, env.act_shape_n, strict=True)]
                obs_n, reward_n, done_n, _ = env.step(acts)
                term, trunc = env.terminations, env.truncations
                if all(done_n):
                    final = self._pad(obs_n)
                    if self.same_step:
                        obs_n = env.reset()
                    else:
                        self.ended[k] = True
            obs.append(self._pad(obs_n))
            rewards.append(reward_n)
            terms.append(term)
            truncs.append(trunc)
            finals.append(final)
        states = np.stack([e.state() for e in self.envs])
        masks = np.stack([e.get_avail_actions() for e in self.envs])
        return (
            np.stack(obs),
            np.array(rewards),
            np.array(terms),
            np.array(truncs),
            states,
            masks,
            finals,
        )


def assert_flags_refused(run_python: RunPython, example: str, flags: list[str]) -> None:
    """``examples/<example>/train.py``'s parser refuses each of ``flags`` at 0 (and at -1) by
    name, where the run would divide by zero, index an empty list or never learn."""
    code = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT / "examples" / example)!r})
import train
for flag in {flags!r}:
    for value in ("0", "-1"):
        try:
            train.make_parser().parse_args([flag, value])
        except SystemExit:
            continue
        print("ACCEPTED", flag, value)
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ACCEPTED" not in proc.stdout, proc.stdout
    for flag in flags:
        assert f"argument {flag}: must be 1 or more, got 0" in proc.stderr, proc.stderr[-3000:]
