"""DQN on CartPole-v1, ours and Stable-Baselines3 with rl-zoo's hyperparameters: training wall
time until the deterministic 10-episode mean return reaches 475 (evaluation time excluded).

Used by ``scripts/bench_offpolicy.py`` (``--only dqn``).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import parl
from parl.algorithms import DQN
from parl.utils import ReplayMemory

# rl-zoo's dqn.yml, CartPole-v1
ZOO = dict(
    lr=2.3e-3,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=1000,
    gamma=0.99,
    target_update_interval=10,
    train_freq=256,
    gradient_steps=128,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    n_timesteps=50_000,
)
EVAL_EVERY = 1000
TARGET = 475.0


class QNet(parl.Model):
    """SB3's QNetwork for net_arch [256, 256]."""

    def __init__(self) -> None:
        super().__init__()
        self.q_net = nn.Sequential(
            nn.Linear(4, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2)
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_net(obs)


def evaluate(act, seed: int) -> float:  # type: ignore[no-untyped-def]
    env = gym.make("CartPole-v1")
    total = 0.0
    for i in range(10):
        obs, _ = env.reset(seed=seed + i)
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
    return total / 10


def ours_time_to_target(seed: int) -> tuple[float, int]:
    """(training seconds, steps) until the evaluation reaches 475; inf if it never does."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    alg = DQN(
        QNet(), gamma=ZOO["gamma"], lr=ZOO["lr"], loss="huber", max_grad_norm=10.0, device="cpu"
    )
    env = gym.make("CartPole-v1")
    rpm = ReplayMemory(ZOO["buffer_size"], 4, 0, rng=rng)
    obs, _ = env.reset(seed=seed)
    explore = ZOO["exploration_fraction"] * ZOO["n_timesteps"]
    final_eps = ZOO["exploration_final_eps"]
    trained = 0.0
    start = time.perf_counter()
    for step in range(1, ZOO["n_timesteps"] + 1):
        eps = max(final_eps, 1.0 - (1.0 - final_eps) * step / explore)
        if rng.random() < eps:
            action = int(rng.integers(2))
        else:
            action = int(alg.predict(torch.from_numpy(obs)[None]).argmax())
        next_obs, reward, terminated, truncated, _ = env.step(action)
        rpm.append(obs, action, float(reward), next_obs, terminated)
        obs = env.reset()[0] if terminated or truncated else next_obs
        if step > ZOO["learning_starts"] and step % ZOO["train_freq"] == 0:
            for _ in range(ZOO["gradient_steps"]):
                alg.learn(*(torch.from_numpy(x) for x in rpm.sample_batch(ZOO["batch_size"])))
        if step % ZOO["target_update_interval"] == 0:
            alg.sync_target()
        if step % EVAL_EVERY == 0:
            trained += time.perf_counter() - start
            score = evaluate(lambda o: int(alg.predict(torch.from_numpy(o)[None]).argmax()), 10_000)
            if score >= TARGET:
                return trained, step
            start = time.perf_counter()
    return float("inf"), ZOO["n_timesteps"]


def sb3_time_to_target(seed: int) -> tuple[float, int]:
    from stable_baselines3 import DQN as SB3DQN
    from stable_baselines3.common.callbacks import BaseCallback

    class Timer(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.trained, self.start, self.reached = 0.0, time.perf_counter(), 0

        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY:
                return True
            self.trained += time.perf_counter() - self.start
            act = lambda o: int(self.model.predict(o, deterministic=True)[0])  # noqa: E731
            if evaluate(act, 10_000) >= TARGET:
                self.reached = self.num_timesteps
                return False
            self.start = time.perf_counter()
            return True

    model = SB3DQN(
        "MlpPolicy",
        gym.make("CartPole-v1"),
        learning_rate=ZOO["lr"],
        batch_size=ZOO["batch_size"],
        buffer_size=ZOO["buffer_size"],
        learning_starts=ZOO["learning_starts"],
        gamma=ZOO["gamma"],
        target_update_interval=ZOO["target_update_interval"],
        train_freq=ZOO["train_freq"],
        gradient_steps=ZOO["gradient_steps"],
        exploration_fraction=ZOO["exploration_fraction"],
        exploration_final_eps=ZOO["exploration_final_eps"],
        policy_kwargs=dict(net_arch=[256, 256]),
        seed=seed,
        device="cpu",
    )
    timer = Timer()
    model.learn(ZOO["n_timesteps"], callback=timer)
    return (timer.trained, timer.reached) if timer.reached else (float("inf"), ZOO["n_timesteps"])


def bench_dqn(seeds: int, table: Any = None) -> tuple[float, float]:
    """Median training seconds to 475 over ``seeds`` seeds, ours and SB3's; prints each run, and
    adds the medians to ``table`` (a ``benchrecord.Table``) when one is given."""
    ours, theirs = [], []
    for seed in range(seeds):
        for name, fn, out in (
            ("ours", ours_time_to_target, ours),
            ("SB3", sb3_time_to_target, theirs),
        ):
            seconds, steps = fn(seed)
            out.append(seconds)
            print(
                f"DQN CartPole seed {seed} {name:4s}: {seconds:6.1f} s, {steps} steps", flush=True
            )
    mine, sb3 = statistics.median(ours), statistics.median(theirs)
    print(
        f"DQN CartPole time to {TARGET:.0f} (median of {seeds}): ours {mine:.1f} s, "
        f"SB3 {sb3:.1f} s, ours/SB3 {mine / sb3:.2f}",
        flush=True,
    )
    if table is not None:
        table.row(
            f"time to {TARGET:.0f}, median of {seeds} seeds",
            f"{mine:.1f} s",
            f"{sb3:.1f} s",
            f"{mine / sb3:.2f}x",
            "<= 0.5x",
        )
    return mine, sb3
