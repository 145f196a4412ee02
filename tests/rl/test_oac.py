"""OAC: optimistic exploration, learning, determinism, save/restore and argument checks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import parl
from parl.algorithms import OAC

from .offpolicy_nets import ActorCriticNet

OBS_DIM = 2


def make(seed: int = 0, hidden: int = 32, **kwargs: object) -> OAC:
    torch.manual_seed(seed)
    return OAC(ActorCriticNet(OBS_DIM, 1, "gaussian", hidden=hidden), device="cpu", **kwargs)  # type: ignore[arg-type]


class BanditAgent(parl.Agent):
    """PARL's OAC agent shape: ``sample`` explores optimistically, ``predict`` is greedy."""

    def predict(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.predict(self.to_tensor(obs)))

    def sample(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.get_optimistic_exploration_action(self.to_tensor(obs)))


def best_action(obs: np.ndarray) -> np.ndarray:
    return 0.6 * np.clip(obs[:, :1], -1.0, 1.0)


def train_bandit(seed: int, updates: int = 300) -> BanditAgent:
    """A one-step task: the reward is ``-(a - 0.6 clip(obs_0, -1, 1))^2`` and every episode
    ends at once, so the critic learns a quadratic and the actor its peak."""
    agent = BanditAgent(make(seed, alpha=0.01, actor_lr=3e-3, critic_lr=3e-3))
    rng = np.random.default_rng(seed)
    obs_memory, act_memory, rew_memory = [], [], []
    for _ in range(updates):
        obs = rng.normal(size=(8, OBS_DIM)).astype(np.float32)
        action = agent.sample(obs)
        obs_memory.append(obs)
        act_memory.append(action)
        rew_memory.append(-np.square(action - best_action(obs)).sum(axis=1))
        rows = rng.integers(len(obs_memory) * 8, size=64)
        batch_obs = np.concatenate(obs_memory)[rows]
        batch = [
            batch_obs,
            np.concatenate(act_memory)[rows],
            np.concatenate(rew_memory)[rows],
            batch_obs,
            np.ones(64, dtype=np.float32),
        ]
        agent.alg.learn(*(agent.to_tensor(part) for part in batch))
    return agent


def test_learns_a_one_step_continuous_task(single_thread: None) -> None:
    agent = train_bandit(seed=0)
    obs = np.random.default_rng(9).normal(size=(256, OBS_DIM)).astype(np.float32)
    error = np.abs(agent.predict(obs) - best_action(obs)).mean()
    # a policy that ignores the observation is off by about 0.38 on average; 0.07 here
    assert error < 0.12, error


def test_same_seed_same_result(single_thread: None) -> None:
    first, second, other = (train_bandit(seed, updates=20) for seed in (0, 0, 1))
    weights = first.get_all_weights()
    for name, value in second.get_all_weights().items():
        np.testing.assert_array_equal(value, weights[name])
    assert any(
        not np.array_equal(value, weights[name]) for name, value in other.get_all_weights().items()
    )


def test_save_restore_gives_identical_actions(tmp_path: Path) -> None:
    agent = train_bandit(seed=1, updates=5)
    path = agent.save(tmp_path / "oac.ckpt")
    fresh = BanditAgent(make(seed=2))
    obs = np.random.default_rng(0).normal(size=(16, OBS_DIM)).astype(np.float32)
    assert not np.array_equal(fresh.predict(obs), agent.predict(obs))
    fresh.restore(path)
    np.testing.assert_array_equal(fresh.predict(obs), agent.predict(obs))
    torch.manual_seed(3)
    explored = agent.sample(obs)
    torch.manual_seed(3)
    np.testing.assert_array_equal(fresh.sample(obs), explored)


def test_centre_mean_shifts_the_policy_mean_as_the_paper_does() -> None:
    """``centre="mean"``: ``tanh(mu + sqrt(2 delta) Sigma g / ||g||_Sigma + sigma eps)`` with
    ``g`` the gradient of the upper bound at ``mu``, computed here by hand in float64."""
    alg = make(seed=4, centre="mean", beta=2.0, delta=0.5)
    obs = torch.randn(5, OBS_DIM, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(8)
    action = alg.get_optimistic_exploration_action(obs)
    model = alg.model.double()
    mean, log_std = model.policy(obs.double())
    mean = mean.detach().requires_grad_(True)
    q1, q2 = model.value(obs.double(), torch.tanh(mean))
    upper = (q1 + q2) / 2 + 2.0 * (q1 - q2).abs() / 2
    (grad,) = torch.autograd.grad(upper.sum(), mean)
    variance = (2 * log_std).exp().detach()
    norm = (grad * grad * variance).sum(-1, keepdim=True).sqrt() + 1e-5
    shifted = mean.detach() + math.sqrt(1.0) * variance * grad / norm
    torch.manual_seed(8)
    eps = torch.randn(5, 1).double()
    expected = torch.tanh(shifted + variance.sqrt() * eps)
    torch.testing.assert_close(action.double(), expected, rtol=0, atol=1e-5)


def test_exploration_leaves_the_gradients_of_the_model_alone() -> None:
    alg = make()
    alg.get_optimistic_exploration_action(torch.randn(3, OBS_DIM))
    assert all(p.grad is None for p in alg.model.parameters())
    with torch.no_grad():  # an agent may call it under no_grad: the gradient is still taken
        assert alg.get_optimistic_exploration_action(torch.randn(3, OBS_DIM)).shape == (3, 1)


def test_learned_alpha_is_available_as_in_sac() -> None:
    alg = make(alpha="auto")
    g = torch.Generator().manual_seed(0)
    batch = [torch.randn(16, OBS_DIM, generator=g), torch.rand(16, 1, generator=g) * 2 - 1]
    batch += [torch.randn(16, generator=g), torch.randn(16, OBS_DIM, generator=g)]
    alg.learn(*batch, torch.zeros(16))
    assert alg.auto_alpha and alg.alpha != 1.0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"beta": -1.0}, ValueError, "beta must be a float >= 0"),
        ({"delta": "big"}, TypeError, "delta must be a float"),
        ({"centre": "median"}, ValueError, "centre must be 'sample'"),
        ({"alpha": "often"}, ValueError, "alpha must be a float > 0, 'auto'"),
        ({"gamma": 2.0}, ValueError, r"gamma must be a float in \[0.0, 1.0\]"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make(**kwargs)


def test_model_without_value_is_refused_and_one_observation_must_be_a_batch() -> None:
    with pytest.raises(TypeError, match=r"OAC needs model to define policy\(\), value\(\)"):
        OAC(torch.nn.Linear(2, 2), device="cpu")
    with pytest.raises(ValueError, match=r"obs.reshape\(1, -1\)"):
        make().get_optimistic_exploration_action(torch.randn(OBS_DIM))
