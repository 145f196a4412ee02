"""CQL and IQL learn from a fixed dataset: a contextual bandit whose behaviour policy is noisy
and half wrong, so that cloning it does poorly and only an offline RL method that weighs actions
by their return picks the good ones. Also: same seed, same result; save and restore, same actions.

The bandit: a context ``s ~ U(-1, 1)``, one step, reward ``-(a - 0.6 s)^2``. The behaviour
takes ``0.6 s + N(0, 0.1)`` half of the time and ``-0.6 s + N(0, 0.1)`` the other half: its
mean reward is about ``-0.25``, and its mean action (what behaviour cloning finds) ``0``, worth
``-0.12``. A learner that recovers the good mode gets close to 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import parl
from parl.algorithms import CQL, IQL
from parl.utils import ReplayMemory, set_seed

ROWS = 2000
BATCH = 64
SLOPE = 0.6


def bandit_dataset(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1.0, 1.0, size=(ROWS, 1)).astype(np.float32)
    good = rng.random(ROWS) < 0.5
    mode = np.where(good, SLOPE, -SLOPE)[:, None] * obs
    actions = np.clip(mode + 0.1 * rng.normal(size=(ROWS, 1)), -0.99, 0.99).astype(np.float32)
    return {
        "observations": obs,
        "actions": actions,
        "rewards": bandit_reward(obs, actions),
        "next_observations": obs,
        "terminals": np.ones(ROWS, dtype=bool),
    }


def bandit_reward(obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    return -np.square(actions[:, 0] - SLOPE * obs[:, 0]).astype(np.float32)


def mlp(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, outputs)
    )


class CQLModel(parl.Model):
    """SAC's shape: ``policy -> (mean, log_std)``, ``value -> (q1, q2)``."""

    def __init__(self) -> None:
        super().__init__()
        self.actor = mlp(1, 2)
        self.q1, self.q2 = mlp(2, 1), mlp(2, 1)

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(-5.0, 2.0)

    def value(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        return self.q1(x), self.q2(x)

    def get_actor_params(self) -> list[nn.Parameter]:
        return list(self.actor.parameters())

    def get_critic_params(self) -> list[nn.Parameter]:
        return [*self.q1.parameters(), *self.q2.parameters()]


class IQLModel(parl.Model):
    """IQL's shape: ``value``, twin ``qvalue``, a Gaussian ``policy`` distribution."""

    def __init__(self) -> None:
        super().__init__()
        self.actor = mlp(1, 1)
        self.log_std = nn.Parameter(torch.zeros(1))
        self.q1, self.q2, self.v = mlp(2, 1), mlp(2, 1), mlp(1, 1)

    def policy(self, obs: torch.Tensor) -> torch.distributions.Distribution:
        std = torch.exp(-6.0 + 6.0 * torch.sigmoid(self.log_std))
        return torch.distributions.Normal(torch.tanh(self.actor(obs)), std.expand(obs.shape[0], 1))

    def qvalue(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        return self.q1(x), self.q2(x)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(obs)

    def get_actor_params(self) -> list[nn.Parameter]:
        return [*self.actor.parameters(), self.log_std]

    def get_critic_params(self) -> list[nn.Parameter]:
        return [*self.q1.parameters(), *self.q2.parameters()]

    def get_value_params(self) -> list[nn.Parameter]:
        return list(self.v.parameters())


class OfflineAgent(parl.Agent):
    """Numpy in, numpy out, for either algorithm."""

    def predict(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.predict(self.to_tensor(obs)))

    def learn(self, *batch: np.ndarray) -> Any:
        return self.alg.learn(*(self.to_tensor(array) for array in batch))


def make_agent(name: str) -> OfflineAgent:
    if name == "CQL":
        # the learned temperature starts at 0.05: from PARL's 1, it needs thousands of updates
        # to come down to where rewards of this size can steer the policy
        alg: Any = CQL(
            CQLModel(),
            actor_lr=1e-3,
            critic_lr=1e-3,
            policy_eval_start=50,
            alpha=0.05,
            device="cpu",
        )
    else:
        alg = IQL(IQLModel(), max_steps=STEPS[name], lr=1e-3, beta=3.0, device="cpu")
    agent = OfflineAgent(alg)
    agent.alg.sync_target(decay=0.0)
    return agent


STEPS = {"CQL": 250, "IQL": 600}


def train(name: str, seed: int) -> tuple[OfflineAgent, float]:
    """``STEPS[name]`` updates on the bandit's dataset; the greedy policy's mean reward."""
    set_seed(seed)
    agent = make_agent(name)
    rpm = ReplayMemory(max_size=ROWS, obs_dim=1, act_dim=1)
    rpm.load_from_d4rl(bandit_dataset())
    for _ in range(STEPS[name]):
        obs, action, reward, next_obs, terminal = rpm.sample_batch(BATCH)
        agent.learn(obs, action, reward, next_obs, terminal.astype(np.float32))
    test_obs = np.linspace(-1.0, 1.0, 41, dtype=np.float32)[:, None]
    return agent, float(bandit_reward(test_obs, agent.predict(test_obs)).mean())


ALGORITHMS = pytest.mark.parametrize("name", ["CQL", "IQL"])


@ALGORITHMS
def test_beats_the_behaviour_policy_and_its_clone(name: str, single_thread: None) -> None:
    data = bandit_dataset()
    behaviour = float(data["rewards"].mean())
    cloned = float(bandit_reward(data["observations"], np.zeros_like(data["actions"])).mean())
    assert behaviour < cloned < -0.1  # the dataset is as described above
    _, score = train(name, seed=0)
    assert score > -0.02, f"{name}: greedy reward {score:.4f}, behaviour {behaviour:.4f}"


@ALGORITHMS
def test_same_seed_same_result_and_save_restore_same_actions(
    name: str, single_thread: None, tmp_path: Path
) -> None:
    results = []
    for _ in range(2):
        set_seed(3)
        agent = make_agent(name)
        rpm = ReplayMemory(max_size=ROWS, obs_dim=1, act_dim=1)
        rpm.load_from_d4rl(bandit_dataset())
        losses = [[float(x) for x in agent.learn(*rpm.sample_batch(BATCH))] for _ in range(30)]
        results.append((agent, losses))
    (first, first_losses), (second, second_losses) = results
    assert first_losses == second_losses
    obs = np.linspace(-1.0, 1.0, 7, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(first.predict(obs), second.predict(obs))

    first.save(tmp_path / "model.ckpt")
    fresh = make_agent(name)
    assert not np.array_equal(fresh.predict(obs), first.predict(obs))
    fresh.restore(tmp_path / "model.ckpt")
    np.testing.assert_array_equal(fresh.predict(obs), first.predict(obs))


def test_iql_with_beta_zero_is_behaviour_cloning(single_thread: None) -> None:
    """``beta=0`` weighs every sample by ``exp(0) = 1``: the policy takes exactly the Adam step
    of maximum likelihood on the dataset's actions, whatever the critics say."""
    torch.manual_seed(0)
    model = IQLModel()
    clone = IQLModel()
    clone.load_state_dict(model.state_dict())
    alg = IQL(model, max_steps=10, lr=1e-3, beta=0.0, device="cpu")
    data = bandit_dataset()
    batch = [torch.as_tensor(data[key][:BATCH]) for key in
             ("observations", "actions", "rewards", "next_observations")]  # fmt: skip
    obs, actions = batch[0], batch[1]
    expected_loss = -clone.policy(obs).log_prob(actions).sum(dim=-1).mean()
    optimizer = torch.optim.Adam(clone.get_actor_params(), lr=1e-3)
    optimizer.zero_grad()
    expected_loss.backward()
    optimizer.step()
    _, _, policy_loss = alg.learn(*batch, torch.ones(BATCH))
    torch.testing.assert_close(policy_loss, expected_loss.detach())
    for got, want in zip(model.get_actor_params(), clone.get_actor_params(), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", ["CQL", "IQL"])
def test_a_batch_of_the_wrong_kind_or_shape_is_named_before_any_update(name: str) -> None:
    """A numpy batch failed with "'numpy.ndarray' object has no attribute 'to'", and one reward
    for a whole batch was broadcast to every transition: both are refused, the weights kept."""
    torch.manual_seed(0)
    alg = CQL(CQLModel(), device="cpu") if name == "CQL" else IQL(IQLModel(), 10, device="cpu")
    owner = "CQL.learn" if name == "CQL" else "IQL.update"
    data = bandit_dataset()
    keys = ("observations", "actions", "rewards", "next_observations", "terminals")
    arrays = [data[key][:8].astype(np.float32) for key in keys]
    tensors = [torch.as_tensor(array) for array in arrays]
    before = [p.clone() for p in alg.model.parameters()]
    with pytest.raises(TypeError, match=rf"{owner}: obs must be a torch.Tensor, got ndarray"):
        alg.learn(*arrays)
    with pytest.raises(ValueError, match=rf"{owner}: reward must be \(8,\) or \(8, 1\).*\(1,\)"):
        alg.learn(tensors[0], tensors[1], tensors[2][:1], tensors[3], tensors[4])
    with pytest.raises(ValueError, match=rf"{owner}: terminal must be .* got \(8, 2\)"):
        alg.learn(*tensors[:4], tensors[4].reshape(8, 1).repeat(1, 2))
    with pytest.raises(ValueError, match=rf"{owner}: action must be \(8, act_dim\).*\(4, "):
        alg.learn(tensors[0], tensors[1][:4], *tensors[2:])
    for got, want in zip(alg.model.parameters(), before, strict=True):
        assert torch.equal(got, want)
    alg.learn(tensors[0], tensors[1], tensors[2][:, None], tensors[3], tensors[4][:, None] > 0)


def test_iql_predict_takes_parls_keyword_observations() -> None:
    alg = IQL(IQLModel(), 10, device="cpu")
    obs = torch.randn(4, 1)
    assert torch.equal(alg.predict(observations=obs), alg.predict(obs))
    with pytest.raises(TypeError, match=r"'obs' and its other name 'observations'"):
        alg.predict(obs, observations=obs)
