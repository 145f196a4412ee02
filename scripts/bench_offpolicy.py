"""Off-policy speed: ours against Stable-Baselines3, measured in the same run.

    .venv/bin/pip install stable-baselines3==2.9.2     # only for this script
    nice -n 10 .venv/bin/python scripts/bench_offpolicy.py --threads 1   # all rows, ~10 min
    nice -n 10 .venv/bin/python scripts/bench_offpolicy.py --only updates

Rows:
- SAC and TD3 gradient updates per second on HalfCheetah-v5 data, 256x256 networks, batch 256,
  the same hyperparameters on both sides (SAC: fixed alpha 0.2 and learned alpha; TD3: an actor
  update every second critic update, as in both libraries). Both sides sample their batches
  from a replay buffer of 20,000 random-action transitions, so sampling is included.
- DQN on CartPole-v1 with rl-zoo's hyperparameters: training wall time (evaluation excluded)
  until the deterministic 10-episode mean reaches 475, median over seeds.

The two sides are timed alternately in short rounds, so a change of load on the (shared) machine
hits both; the ratio is the figure to read.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchrecord import Report, Table, add_record_flag

import parl
from parl.algorithms import SAC, TD3
from parl.algorithms.ensemble import TwinQNetwork
from parl.utils import ReplayMemory

HIDDEN = 256
BATCH = 256
ENV = "HalfCheetah-v5"


class GaussianActor(parl.Model):
    """SB3's SAC actor: two 256 ReLU layers, mean and log-std heads (one fused linear)."""

    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(obs_dim, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU()
        )
        self.heads = nn.Linear(HIDDEN, 2 * act_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.heads(self.body(obs)).chunk(2, dim=-1)
        return mean, log_std.clamp(-20.0, 2.0)


class DeterministicActor(parl.Model):
    """SB3's TD3 actor: two 256 ReLU layers and a tanh output."""

    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, act_dim),
            nn.Tanh(),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class ActorCritic(parl.Model):
    """PARL's model shape: ``policy``, ``value``, ``Q1``, actor and critic parameters."""

    def __init__(self, actor: nn.Module, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.actor_model = actor
        self.critic_model = TwinQNetwork(obs_dim, act_dim, (HIDDEN, HIDDEN))

    def policy(self, obs: torch.Tensor):  # type: ignore[no-untyped-def]
        return self.actor_model(obs)

    def value(self, obs: torch.Tensor, action: torch.Tensor):  # type: ignore[no-untyped-def]
        return self.critic_model.value(obs, action)

    def Q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.critic_model.Q1(obs, action)

    def get_actor_params(self):  # type: ignore[no-untyped-def]
        return self.actor_model.parameters()

    def get_critic_params(self):  # type: ignore[no-untyped-def]
        return self.critic_model.parameters()


def random_transitions(env: gym.Env, steps: int, seed: int) -> tuple[np.ndarray, ...]:
    """``steps`` transitions of random actions (the data both sides learn from)."""
    obs_l, act_l, rew_l, next_l, done_l = [], [], [], [], []
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        obs_l.append(obs)
        act_l.append(action)
        rew_l.append(reward)
        next_l.append(next_obs)
        done_l.append(terminated)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
    return tuple(np.asarray(x, dtype=np.float32) for x in (obs_l, act_l, rew_l, next_l, done_l))


def ours_updater(algo: str, data: tuple[np.ndarray, ...], alpha: str | float) -> Callable[[], None]:
    obs_dim, act_dim = data[0].shape[1], data[1].shape[1]
    rpm = ReplayMemory(len(data[0]), obs_dim, act_dim)
    rpm.append_batch(*data)
    if algo == "SAC":
        model = ActorCritic(GaussianActor(obs_dim, act_dim), obs_dim, act_dim)
        alg: parl.Algorithm = SAC(model, 0.99, 0.005, alpha, 3e-4, 3e-4, device="cpu")
    else:
        model = ActorCritic(DeterministicActor(obs_dim, act_dim), obs_dim, act_dim)
        alg = TD3(model, 0.99, 0.005, 1e-3, 1e-3, 0.2, 0.5, 2, device="cpu")

    def update() -> None:
        batch = rpm.sample_batch(BATCH)
        alg.learn(*(torch.from_numpy(x) for x in batch))

    return update


def sb3_updater(algo: str, data: tuple[np.ndarray, ...], alpha: str | float) -> Callable[[], None]:
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3 import TD3 as SB3TD3

    env = gym.make(ENV)
    common = dict(
        buffer_size=len(data[0]),
        batch_size=BATCH,
        learning_starts=0,
        device="cpu",
        seed=0,
        policy_kwargs=dict(net_arch=[HIDDEN, HIDDEN]),
        gamma=0.99,
        tau=0.005,
    )
    if algo == "SAC":
        model = SB3SAC("MlpPolicy", env, ent_coef=alpha, learning_rate=3e-4, **common)
    else:
        model = SB3TD3("MlpPolicy", env, learning_rate=1e-3, policy_delay=2, **common)
    buffer = model.replay_buffer
    n = len(data[0])
    buffer.observations[:n, 0] = data[0]
    buffer.actions[:n, 0] = data[1]
    buffer.rewards[:n, 0] = data[2]
    buffer.next_observations[:n, 0] = data[3]
    buffer.dones[:n, 0] = data[4]
    buffer.pos, buffer.full = 0, True
    model._setup_learn(total_timesteps=1)

    def update() -> None:
        model.train(gradient_steps=1, batch_size=BATCH)

    return update


def rate(update: Callable[[], None], seconds: float) -> float:
    """Updates per second of ``update`` over about ``seconds``."""
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(10):
            update()
        count += 10
    return count / elapsed


def bench_updates(table: Table, rounds: int, seconds: float) -> list[tuple[str, float, float]]:
    env = gym.make(ENV)
    data = random_transitions(env, 20_000, seed=0)
    rows = []
    for algo, alpha in (("SAC", 0.2), ("SAC", "auto"), ("TD3", 0.0)):
        torch.manual_seed(0)
        ours, theirs = ours_updater(algo, data, alpha), sb3_updater(algo, data, alpha)
        for update in (ours, theirs):  # warm-up: allocator, caches, first-call paths
            for _ in range(20):
                update()
        ours_rates, sb3_rates = [], []
        for _ in range(rounds):
            ours_rates.append(rate(ours, seconds))
            sb3_rates.append(rate(theirs, seconds))
        name = "TD3 updates/s" if algo == "TD3" else f"SAC updates/s, alpha {alpha}"
        rows.append((name, statistics.median(ours_rates), statistics.median(sb3_rates)))
        ratio = rows[-1][1] / rows[-1][2]
        table.row(name, f"{rows[-1][1]:.1f}", f"{rows[-1][2]:.1f}", f"{ratio:.2f}x", ">= 3x")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["updates", "dqn"], default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one timed round")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--dqn-seeds", type=int, default=3)
    add_record_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    report = Report("bench_offpolicy")
    report.note(f"torch {torch.__version__}, {args.threads} torch thread(s) on both sides.")
    if args.only in (None, "updates"):
        table = report.table(
            f"Updates against SB3 on {ENV} data, {HIDDEN}x{HIDDEN}, batch {BATCH}, "
            f"medians of {args.rounds} rounds of {args.seconds:g} s",
            ["", "ours", "SB3, same run", "ratio", "aim"],
            [30, 8, 14, 8, 8],
        )
        bench_updates(table, args.rounds, args.seconds)
    if args.only in (None, "dqn"):
        from bench_offpolicy_dqn import bench_dqn  # an optional row

        table = report.table(
            f"DQN against SB3: CartPole-v1, rl-zoo settings, seeds 0-{args.dqn_seeds - 1}",
            ["", "ours", "SB3, same run", "ratio", "aim"],
            [30, 8, 14, 8, 8],
        )
        bench_dqn(args.dqn_seeds, table)
    report.write(args.record)


if __name__ == "__main__":
    main()
