"""Small models and training loops shared by the off-policy algorithm tests."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import parl
from parl.utils import ReplayMemory


class QNet(parl.Model):
    """``obs (B, obs_dim) -> Q (B, act_dim)``; ``dueling=True`` adds V and A heads."""

    def __init__(
        self, obs_dim: int = 4, act_dim: int = 2, hidden: int = 64, dueling: bool = False
    ) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.dueling = dueling
        self.head = nn.Linear(hidden, act_dim)
        self.value_head = nn.Linear(hidden, 1) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        hidden = self.body(obs)
        advantage = self.head(hidden)
        if self.value_head is None:
            return advantage
        return self.value_head(hidden) + advantage - advantage.mean(dim=1, keepdim=True)


def evaluate(
    act, env_id: str, episodes: int = 10, seed: int = 10_000, max_steps: int | None = None
) -> float:
    """Mean return of ``episodes`` episodes of ``act(obs) -> action``, episode i seeded seed + i."""
    env = gym.make(env_id, max_episode_steps=max_steps) if max_steps else gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def train_dqn_cartpole(alg: parl.Algorithm, seed: int, total_steps: int) -> float:
    """rl-zoo-like DQN schedule on CartPole-v1; returns the greedy 10-episode mean return.

    epsilon 1 -> 0.04 over the first 16% of steps, 128 updates of batch 64 every 256 steps after
    1,000 warm-up steps, target copied every 10 env steps.
    """
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    env.action_space.seed(seed)
    rpm = ReplayMemory(total_steps, 4, 0, rng=rng)
    obs, _ = env.reset(seed=seed)
    explore_steps = int(0.16 * total_steps)
    for step in range(total_steps):
        eps = max(0.04, 1.0 - (1.0 - 0.04) * step / explore_steps)
        if rng.random() < eps:
            action = int(rng.integers(2))
        else:
            action = int(alg.predict(torch.as_tensor(obs)[None]).argmax())
        next_obs, reward, terminated, truncated, _ = env.step(action)
        rpm.append(obs, action, float(reward), next_obs, terminated)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
        if step >= 1000 and (step + 1) % 256 == 0:
            for _ in range(128):
                batch = rpm.sample_batch(64)
                alg.learn(*(torch.as_tensor(x) for x in batch))
        if step % 10 == 0:  # as rl-zoo: every 10 env steps, so once per block of updates
            alg.sync_target()
    env.close()
    return evaluate(lambda o: int(alg.predict(torch.as_tensor(o)[None]).argmax()), "CartPole-v1")


class ActorCriticNet(parl.Model):
    """PARL's continuous-control model shape, small: ``policy``, ``value``, ``Q1`` and the
    actor / critic parameters. ``kind``: ``"gaussian"`` (SAC: mean and log-std),
    ``"deterministic"`` (DDPG, TD3: tanh actions); ``twin``: two critics (stacked) or one."""

    def __init__(
        self, obs_dim: int, act_dim: int, kind: str, twin: bool = True, hidden: int = 64
    ) -> None:
        super().__init__()
        from parl.algorithms.ensemble import EnsembleMLP

        self.kind, self.twin = kind, twin
        out = 2 * act_dim if kind == "gaussian" else act_dim
        self.actor_model = nn.Sequential(
            nn.Linear(obs_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, out),
        )
        self.critic_model = EnsembleMLP(2 if twin else 1, obs_dim + act_dim, 1, (hidden, hidden))

    def policy(self, obs: torch.Tensor):  # type: ignore[no-untyped-def]
        out = self.actor_model(obs)
        if self.kind == "gaussian":
            mean, log_std = out.chunk(2, dim=-1)
            return mean, log_std.clamp(-20.0, 2.0)
        return torch.tanh(out)

    def value(self, obs: torch.Tensor, action: torch.Tensor):  # type: ignore[no-untyped-def]
        q = self.critic_model(torch.cat([obs, action], dim=-1))
        return (q[0], q[1]) if self.twin else q[0]

    def Q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.critic_model.member_forward(torch.cat([obs, action], dim=-1), 0)

    def get_actor_params(self):  # type: ignore[no-untyped-def]
        return self.actor_model.parameters()

    def get_critic_params(self):  # type: ignore[no-untyped-def]
        return self.critic_model.parameters()


def train_pendulum(alg: parl.Algorithm, seed: int, total_steps: int, warmup: int = 1000) -> float:
    """Off-policy training on Pendulum-v1 (actions scaled to [-1, 1]); one update of batch 128
    per step after ``warmup`` random steps. Returns the mean return of 5 greedy episodes."""
    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(seed)
    rpm = ReplayMemory(total_steps, 3, 1, rng=rng)
    obs, _ = env.reset(seed=seed)
    sac = hasattr(alg, "auto_alpha")
    for step in range(total_steps):
        if step < warmup:
            action = rng.uniform(-1, 1, size=1).astype(np.float32)
        elif sac:
            action = alg.sample(torch.as_tensor(obs)[None])[0][0].numpy()
        else:
            action = alg.predict(torch.as_tensor(obs)[None])[0].numpy()
            action = np.clip(action + rng.normal(0, 0.1, size=1), -1, 1).astype(np.float32)
        next_obs, reward, terminated, truncated, _ = env.step(2.0 * action)
        rpm.append(obs, action, float(reward), next_obs, terminated)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
        if step >= warmup:
            alg.learn(*(torch.as_tensor(x) for x in rpm.sample_batch(128)))
    env.close()
    return evaluate(
        lambda o: 2.0 * alg.predict(torch.as_tensor(o)[None])[0].numpy(), "Pendulum-v1", 5
    )
