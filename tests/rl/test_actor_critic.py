"""DDPG, TD3 and SAC: target updates, loss pieces, save/restore, determinism, learning on a fixed
batch (the critic fits the rewards, the actor picks the better action) and SAC learning
Pendulum-v1 to a score (DDPG's and TD3's Pendulum-v1 runs are records of scripts/quality.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import parl
from parl.algorithms import DDPG, SAC, TD3
from parl.algorithms.ensemble import EnsembleLinear, TwinQNetwork
from parl.algorithms.sac import squashed_gaussian_sample

from .offpolicy_nets import ActorCriticNet, train_pendulum


def make(name: str, seed: int = 0, **kwargs: object) -> parl.Algorithm:
    torch.manual_seed(seed)
    if name == "SAC":
        return SAC(ActorCriticNet(3, 1, "gaussian"), device="cpu", **kwargs)  # type: ignore[arg-type]
    if name == "TD3":
        return TD3(ActorCriticNet(3, 1, "deterministic"), device="cpu", **kwargs)  # type: ignore[arg-type]
    return DDPG(ActorCriticNet(3, 1, "deterministic", twin=False), device="cpu", **kwargs)  # type: ignore[arg-type]


def random_batch(seed: int, size: int = 32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(size, 3, generator=g),
        torch.rand(size, 1, generator=g) * 2 - 1,
        torch.randn(size, 1, generator=g),
        torch.randn(size, 3, generator=g),
        (torch.rand(size, 1, generator=g) < 0.1).float(),
    ]


class PendulumAgent(parl.Agent):
    def predict(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.predict(self.to_tensor(obs)))


@pytest.mark.parametrize("name", ["DDPG", "TD3", "SAC"])
def test_sync_target_decay_exact(name: str) -> None:
    alg = make(name, tau=0.25)
    with torch.no_grad():
        for i, (p, t) in enumerate(
            zip(alg.model.parameters(), alg.target_model.parameters(), strict=False)
        ):
            p.fill_(float(i + 1))
            t.fill_(2.0)
    alg.sync_target()  # decay None -> 1 - tau = 0.75: 0.75 * 2 + 0.25 * (i + 1), exact
    for i, t in enumerate(alg.target_model.parameters()):
        assert torch.equal(t, torch.full_like(t, 1.5 + 0.25 * (i + 1)))
    alg.sync_target(decay=0.5)
    for i, t in enumerate(alg.target_model.parameters()):
        assert torch.equal(t, torch.full_like(t, 0.5 * (1.5 + 0.25 * (i + 1)) + 0.5 * (i + 1)))
    alg.sync_target(decay=0)  # what PARL's agents call once at start: a copy
    for p, t in zip(alg.model.parameters(), alg.target_model.parameters(), strict=False):
        assert torch.equal(p, t)
    # random values: the fused lerp against the formula, to float32 rounding
    with torch.no_grad():
        for p in alg.model.parameters():
            p.normal_()
    before = [t.clone().double() for t in alg.target_model.parameters()]
    alg.sync_target(decay=0.995)
    for b, p, t in zip(before, alg.model.parameters(), alg.target_model.parameters(), strict=False):
        torch.testing.assert_close(t.double(), 0.995 * b + 0.005 * p.double(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["DDPG", "TD3", "SAC"])
def test_save_restore_gives_identical_actions(name: str, tmp_path: Path) -> None:
    agent = PendulumAgent(make(name, seed=1))
    for i in range(3):
        agent.alg.learn(*random_batch(i))
    path = agent.save(tmp_path / "model.ckpt")
    fresh = PendulumAgent(make(name, seed=2))
    obs = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    assert not np.array_equal(fresh.predict(obs), agent.predict(obs))
    fresh.restore(path)
    np.testing.assert_array_equal(fresh.predict(obs), agent.predict(obs))


@pytest.mark.parametrize("name", ["DDPG", "TD3", "SAC"])
def test_same_seed_same_updates(name: str, single_thread: None) -> None:
    def run(seed: int) -> dict[str, np.ndarray]:
        alg = make(name, seed=seed)
        torch.manual_seed(seed)
        for i in range(6):
            alg.learn(*random_batch(i))
        return alg.get_all_weights()

    first, second, other = run(0), run(0), run(1)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
    assert any(not np.array_equal(first[k], other[k]) for k in first)


def test_td3_delays_the_actor_and_the_target() -> None:
    alg = make("TD3", policy_freq=2)
    actor = [p.clone() for p in alg.model.get_actor_params()]
    target = [p.clone() for p in alg.target_model.parameters()]
    critic_loss, actor_loss = alg.learn(*random_batch(0))
    assert actor_loss is None and math.isfinite(float(critic_loss))
    assert all(torch.equal(a, b) for a, b in zip(actor, alg.model.get_actor_params(), strict=False))
    assert all(
        torch.equal(a, b) for a, b in zip(target, alg.target_model.parameters(), strict=False)
    )
    _, actor_loss = alg.learn(*random_batch(1))
    assert actor_loss is not None
    assert not all(
        torch.equal(a, b) for a, b in zip(actor, alg.model.get_actor_params(), strict=False)
    )
    assert not all(
        torch.equal(a, b) for a, b in zip(target, alg.target_model.parameters(), strict=False)
    )


def test_actor_step_leaves_critic_gradients_alone() -> None:
    import copy

    import torch.nn.functional as F

    alg = make("DDPG", gamma=0.9)
    twin = copy.deepcopy(alg)
    batch = random_batch(0)
    alg.learn(*batch)
    # the critic's .grad after learn is the critic loss's gradient alone: the actor step took
    # only the actor's gradients (torch.autograd.grad), and did not add to the critic's
    obs, action, reward, next_obs, terminal = batch
    with torch.no_grad():
        next_q = twin.target_model.value(next_obs, twin.target_model.policy(next_obs))
        target = reward + 0.9 * (1 - terminal) * next_q
    F.mse_loss(twin.model.value(obs, action), target).backward()
    for mine, expected in zip(
        alg.model.get_critic_params(), twin.model.get_critic_params(), strict=False
    ):
        torch.testing.assert_close(mine.grad, expected.grad)


def test_squashed_gaussian_log_prob_matches_torch_distributions() -> None:
    torch.manual_seed(0)
    mean, log_std = torch.randn(64, 3), torch.randn(64, 3).clamp(-2, 1)
    torch.manual_seed(1)
    action, log_prob = squashed_gaussian_sample(mean, log_std)
    torch.manual_seed(1)
    normal = torch.distributions.Normal(mean, log_std.exp())
    x = normal.rsample()
    expected = (normal.log_prob(x) - torch.log(1 - torch.tanh(x) ** 2 + 1e-6)).sum(-1)
    torch.testing.assert_close(action, torch.tanh(x))
    torch.testing.assert_close(log_prob, expected, rtol=1e-5, atol=1e-5)


def test_sac_alpha_fixed_or_learned_towards_the_target_entropy() -> None:
    fixed = make("SAC", alpha=0.05)
    fixed.learn(*random_batch(0))
    assert fixed.alpha == 0.05 and not fixed.auto_alpha
    fixed.alpha = 0.1  # PARL code may set it directly
    assert fixed.alpha == 0.1
    up = make("SAC", alpha="auto_0.1", target_entropy=100.0, alpha_lr=0.01)
    down = make("SAC", alpha="auto_0.1", target_entropy=-100.0, alpha_lr=0.01)
    assert up.alpha == pytest.approx(0.1)
    up.learn(*random_batch(0))
    down.learn(*random_batch(0))
    # Adam's first step moves log(alpha) by lr: entropy below target raises alpha, above lowers
    assert math.log(up.alpha) == pytest.approx(math.log(0.1) + 0.01, abs=1e-6)
    assert math.log(down.alpha) == pytest.approx(math.log(0.1) - 0.01, abs=1e-6)
    assert "alpha_model.log_alpha" in up.get_all_weights()
    with pytest.raises(ValueError, match=r"alpha must be a float > 0, 'auto' or 'auto_<initial"):
        make("SAC", alpha="automatic")


def test_model_methods_are_checked_at_construction() -> None:
    class NoQ1(ActorCriticNet):
        Q1 = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match="TD3 needs model to define Q1"):
        TD3(NoQ1(3, 1, "deterministic"), device="cpu")
    with pytest.raises(ValueError, match="SAC: tau must be a float in"):
        make("SAC", tau=2.0)


def test_ensemble_equals_separate_linear_layers() -> None:
    torch.manual_seed(0)
    layer = EnsembleLinear(3, 5, 4)
    bound = 1 / math.sqrt(5)
    assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound
    x = torch.randn(7, 5)
    out = layer(x)
    for m in range(3):
        linear = nn.Linear(5, 4)
        with torch.no_grad():
            linear.weight.copy_(layer.weight[m].T)
            linear.bias.copy_(layer.bias[m, 0])
        torch.testing.assert_close(out[m], linear(x))
        torch.testing.assert_close(layer.member_forward(x, m), linear(x))
    twin = TwinQNetwork(3, 2, (8, 8))
    obs, act = torch.randn(4, 3), torch.randn(4, 2)
    q1, q2 = twin.value(obs, act)
    assert q1.shape == (4, 1)
    torch.testing.assert_close(twin.Q1(obs, act), q1)


@pytest.mark.parametrize("name", ["DDPG", "TD3", "SAC"])
def test_critic_fits_a_fixed_batch_and_the_actor_picks_the_better_action(
    name: str, single_thread: None
) -> None:
    # one-step episodes (terminal): the critic's target is the reward, action * sign(obs[0]);
    # the best action is then sign(obs[0]), which the actor can only find through the critic
    alg = make(name, actor_lr=1e-3, critic_lr=1e-2, **({"alpha": 0.01} if name == "SAC" else {}))
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(64, 3, generator=g)
    action = torch.rand(64, 1, generator=g) * 2 - 1
    best = torch.sign(obs[:, :1])
    reward, terminal = action * best, torch.ones(64, 1)

    def critic_error() -> float:
        with torch.no_grad():
            q = alg.model.value(obs, action)
        q = q[0] if isinstance(q, tuple) else q
        return float(((q - reward) ** 2).mean())

    def agreement() -> float:
        with torch.no_grad():
            return float((torch.sign(alg.predict(obs)) == best).float().mean())

    error, agreed = critic_error(), agreement()
    assert error > 0.1 and agreed < 0.7
    for _ in range(200):
        alg.learn(obs, action, reward, obs, terminal)
    assert critic_error() < 0.01 * error
    assert agreement() >= 0.95


@pytest.mark.slow
@pytest.mark.threshold
def test_threshold_sac_learns_pendulum(single_thread: None) -> None:
    alg = make("SAC", seed=1, actor_lr=1e-3, critic_lr=1e-3, alpha="auto")
    # a random policy scores about -1,200 on Pendulum-v1; -1,000 to -1,500 without learning
    assert train_pendulum(alg, 1, 4000) >= -400.0
