"""MADDPG: a two-agent team learns a small cooperative task, the same seed gives the same team,
a saved agent restores to the same actions, and malformed teams or batches are refused by name.

The task: every agent sees its own one-hot context (3 and 4 values) and is rewarded, together
with the other, when it names it (discrete), or sees a target point and is rewarded by its
closeness (continuous). Each round is one step, so the critic's target is the reward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

import parl
from parl.algorithms import MADDPG

OBS_DIMS = (3, 4)
ACT_DIMS = (3, 4)
CRITIC_IN = sum(OBS_DIMS) + sum(ACT_DIMS)
BATCH = 64


class TeamModel(parl.Model):
    """A small actor (logits, or ``(mean, log_std)``) and a critic of the whole team."""

    def __init__(self, obs_dim: int, act_dim: int, continuous: bool = False) -> None:
        super().__init__()
        self.continuous = continuous
        self.actor = nn.Sequential(
            nn.Linear(obs_dim, 32), nn.ReLU(), nn.Linear(32, 2 * act_dim if continuous else act_dim)
        )
        self.critic = nn.Sequential(nn.Linear(CRITIC_IN, 64), nn.ReLU(), nn.Linear(64, 1))

    def policy(self, obs: torch.Tensor) -> Any:
        out = self.actor(obs)
        return out.chunk(2, dim=-1) if self.continuous else out

    def value(self, obs_n: list[torch.Tensor], act_n: list[torch.Tensor]) -> torch.Tensor:
        return self.critic(torch.cat(obs_n + act_n, dim=1)).squeeze(1)

    def get_actor_params(self) -> Any:
        return self.actor.parameters()

    def get_critic_params(self) -> Any:
        return self.critic.parameters()


class TeamAgent(parl.Agent):
    def predict(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.predict(self.to_tensor(obs)))

    def sample(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.to_numpy(self.alg.sample(self.to_tensor(obs)))


def team_spaces(continuous: bool) -> list[Any]:
    if continuous:
        return [spaces.Box(-1.0, 1.0, (n,)) for n in ACT_DIMS]
    return [spaces.Discrete(n) for n in ACT_DIMS]


def make_team(continuous: bool = False, seed: int = 0, **kwargs: Any) -> list[MADDPG]:
    torch.manual_seed(seed)
    act_space = team_spaces(continuous)
    hyper: dict[str, Any] = {"tau": 0.05, "actor_lr": 3e-3, "critic_lr": 3e-3, **kwargs}
    return [
        MADDPG(
            TeamModel(OBS_DIMS[i], ACT_DIMS[i], continuous),
            agent_index=i,
            act_space=act_space,
            device="cpu",
            **hyper,
        )
        for i in range(len(OBS_DIMS))
    ]


def observe(gen: torch.Generator, rows: int, continuous: bool) -> list[torch.Tensor]:
    if continuous:
        return [torch.rand(rows, dim, generator=gen) * 1.6 - 0.8 for dim in OBS_DIMS]
    return [F.one_hot(torch.randint(dim, (rows,), generator=gen), dim).float() for dim in OBS_DIMS]


def team_reward(obs_n: list[torch.Tensor], act_n: list[torch.Tensor], continuous: bool) -> Any:
    if continuous:  # minus the squared distance to each agent's target point
        return sum(-(act - obs).square().mean(1) for obs, act in zip(obs_n, act_n, strict=True))
    return sum(
        (act.argmax(1) == obs.argmax(1)).float() for obs, act in zip(obs_n, act_n, strict=True)
    )


def train(team: list[MADDPG], updates: int, continuous: bool, seed: int = 0) -> float:
    """``updates`` rounds of exploring and learning; returns the greedy team's mean reward."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(updates):
        obs_n = observe(gen, BATCH, continuous)
        with torch.no_grad():
            act_n = [alg.sample(obs) for alg, obs in zip(team, obs_n, strict=True)]
        reward = team_reward(obs_n, act_n, continuous)
        for alg in team:
            alg.learn(obs_n, act_n, reward)
    obs_n = observe(gen, 1000, continuous)
    act_n = [alg.predict(obs) for alg, obs in zip(team, obs_n, strict=True)]
    return float(team_reward(obs_n, act_n, continuous).mean())


@pytest.mark.parametrize(
    ("continuous", "solved"),
    [(False, 1.9), (True, -0.1)],  # discrete: out of 2; continuous: guessing 0 scores -0.43
    ids=["discrete", "continuous"],
)
def test_team_learns_the_cooperative_task(
    single_thread: None, continuous: bool, solved: float
) -> None:
    assert train(make_team(continuous), 0, continuous) < solved
    assert train(make_team(continuous), 400, continuous) >= solved


def test_same_seed_same_team(single_thread: None) -> None:
    first, second = make_team(seed=3), make_team(seed=3)
    for team in (first, second):
        torch.manual_seed(5)
        train(team, 10, continuous=False)
    for ours, again in zip(first, second, strict=True):
        for name, models in (
            ("model", (ours.model, again.model)),
            ("target", (ours.target_model, again.target_model)),
        ):
            a, b = models[0].state_dict(), models[1].state_dict()
            assert all(torch.equal(a[k], b[k]) for k in a), name
    assert not torch.equal(
        first[0].model.actor[0].weight, make_team(seed=3)[0].model.actor[0].weight
    )


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_save_restore_gives_the_same_actions(tmp_path: Path, continuous: bool) -> None:
    trained = make_team(continuous, seed=1)
    train(trained, 5, continuous)
    agent = TeamAgent(trained[1])
    agent.save(tmp_path / "agent_1.ckpt")
    fresh = TeamAgent(make_team(continuous, seed=2)[1])
    obs = np.random.default_rng(0).standard_normal((8, OBS_DIMS[1])).astype(np.float32)
    assert not np.allclose(fresh.predict(obs), agent.predict(obs))
    fresh.restore(tmp_path / "agent_1.ckpt")
    np.testing.assert_array_equal(fresh.predict(obs), agent.predict(obs))
    torch.manual_seed(9)
    drawn = agent.sample(obs)
    torch.manual_seed(9)
    np.testing.assert_array_equal(fresh.sample(obs), drawn)


def test_sample_is_a_gumbel_softmax_draw_and_predict_the_softmax() -> None:
    alg = make_team()[0]
    obs = torch.eye(3)
    logits = alg.model.policy(obs).detach()
    torch.testing.assert_close(alg.predict(obs), F.softmax(logits, dim=-1))
    torch.manual_seed(4)
    uniform = torch.rand_like(logits)
    torch.manual_seed(4)
    drawn = alg.sample(obs)
    torch.testing.assert_close(drawn, F.softmax(logits - torch.log(-torch.log(uniform)), dim=-1))
    assert drawn.requires_grad  # the actor's loss differentiates through it


def test_continuous_sample_is_a_squashed_gaussian_draw() -> None:
    alg = make_team(continuous=True)[0]
    obs = torch.randn(5, OBS_DIMS[0])
    mean, log_std = (t.detach() for t in alg.model.policy(obs))
    torch.testing.assert_close(alg.predict(obs), torch.tanh(mean))
    torch.manual_seed(4)
    eps = torch.randn_like(mean)
    torch.manual_seed(4)
    torch.testing.assert_close(alg.sample(obs), torch.tanh(mean + log_std.exp() * eps))


def test_sync_target_copies_with_decay_zero_and_moves_by_tau_by_default() -> None:
    alg = make_team(tau=0.25)[0]
    with torch.no_grad():
        alg.model.critic[0].weight.add_(1.0)
    before = alg.target_model.critic[0].weight.clone()
    alg.sync_target()
    torch.testing.assert_close(
        alg.target_model.critic[0].weight, 0.75 * before + 0.25 * alg.model.critic[0].weight
    )
    alg.sync_target(decay=0)
    torch.testing.assert_close(alg.target_model.critic[0].weight, alg.model.critic[0].weight)


# -- refusals ----------------------------------------------------------------------------------
def batch(rows: int = 4) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    obs_n = [torch.zeros(rows, dim) for dim in OBS_DIMS]
    act_n = [torch.zeros(rows, dim) for dim in ACT_DIMS]
    return obs_n, act_n, torch.zeros(rows)


def test_construction_refuses_a_missing_team_or_index_or_model_method() -> None:
    model = TeamModel(3, 3)
    with pytest.raises(TypeError, match="act_space must list every agent's action space"):
        MADDPG(model, agent_index=0)
    with pytest.raises(TypeError, match="agent_index is required"):
        MADDPG(model, act_space=team_spaces(False))
    with pytest.raises(ValueError, match=r"agent_index must be an int in \[0, 1\], got 2"):
        MADDPG(model, agent_index=2, act_space=team_spaces(False))
    with pytest.raises(ValueError, match="gamma must be a float"):
        MADDPG(model, agent_index=0, act_space=team_spaces(False), gamma=1.5)
    # PettingZoo's {agent: space} would list its names, and sizes are not spaces: both would
    # get the discrete maths whatever the spaces are
    by_name = dict(zip(("speaker", "listener"), team_spaces(True), strict=True))
    with pytest.raises(TypeError, match=r"got a mapping of \['speaker', 'listener'\]"):
        MADDPG(model, agent_index=0, act_space=by_name)
    with pytest.raises(TypeError, match=r"act_space\[1\] is 4, not an action space"):
        MADDPG(model, agent_index=0, act_space=[spaces.Discrete(3), 4])

    class NoCritic(parl.Model):
        def policy(self, obs: torch.Tensor) -> torch.Tensor:
            return obs

    with pytest.raises(TypeError, match=r"value\(\), get_actor_params\(\), get_critic_params\(\)"):
        MADDPG(NoCritic(), agent_index=0, act_space=team_spaces(False))


def test_learn_and_q_refuse_a_batch_for_another_team_by_name() -> None:
    alg = make_team()[0]
    obs_n, act_n, target = batch()
    with pytest.raises(ValueError, match="obs_n has 1 entries but act_space lists 2 agents"):
        alg.learn(obs_n[:1], act_n, target)
    with pytest.raises(ValueError, match="act_n has 3 entries but act_space lists 2 agents"):
        alg.Q(obs_n, [*act_n, act_n[0]])
    with pytest.raises(TypeError, match="obs_n must be a list with one tensor per agent"):
        alg.Q(torch.zeros(4, 3), act_n)
    with pytest.raises(ValueError, match=r"act_n\[1\] has 3 action columns, but agent 1's"):
        alg.learn(obs_n, [act_n[0], torch.zeros(4, 3)], target)
    with pytest.raises(ValueError, match=r"obs_n\[1\] has 5 rows but obs_n\[0\] has 4"):
        alg.learn([obs_n[0], torch.zeros(5, 4)], act_n, target)
    with pytest.raises(ValueError, match=r"act_n\[0\] must be a tensor \(B, \.\.\.\)"):
        alg.Q(obs_n, [torch.zeros(3), act_n[1]])
    with pytest.raises(
        ValueError, match=r"target_q must hold one value per row of the batch \(4\)"
    ):
        alg.learn(obs_n, act_n, torch.zeros(4, 2))


def test_learn_refuses_nan_or_infinite_inputs_and_overflowing_losses_without_a_step() -> None:
    alg = make_team()[1]
    before = {name: t.clone() for name, t in alg.model.state_dict().items()}
    obs_n, act_n, target = batch()
    target[2] = float("nan")
    with pytest.raises(ValueError, match=r"MADDPG.learn: target_q\[2\] is nan; the model was"):
        alg.learn(obs_n, act_n, target)
    obs_n, act_n, target = batch()
    obs_n[1][3, 0] = float("inf")
    with pytest.raises(ValueError, match=r"MADDPG.learn: obs_n\[1\]\[3, 0\] is inf"):
        alg.learn(obs_n, act_n, target)
    obs_n, act_n, target = batch()
    act_n[0][0, 2] = float("-inf")
    with pytest.raises(ValueError, match=r"MADDPG.learn: act_n\[0\]\[0, 2\] is -inf"):
        alg.learn(obs_n, act_n, target)
    for name, tensor in alg.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    # a target that overflows only the critic's loss: the actor does not step either
    obs_n, act_n, target = batch()
    target.fill_(3e38)
    with pytest.raises(FloatingPointError, match="MADDPG.learn: the critic's loss is inf"):
        alg.learn(obs_n, act_n, target)
    for name, tensor in alg.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    with torch.no_grad():
        for param in alg.model.critic.parameters():
            param.fill_(1e30)
    before = {name: t.clone() for name, t in alg.model.state_dict().items()}
    with pytest.raises(FloatingPointError, match="MADDPG.learn: the actor's loss is (-?inf|nan)"):
        alg.learn(*batch())
    for name, tensor in alg.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def test_a_continuous_agent_refuses_a_policy_without_log_std() -> None:
    model = TeamModel(OBS_DIMS[0], ACT_DIMS[0], continuous=False)  # logits only
    alg = MADDPG(model, agent_index=0, act_space=team_spaces(True), device="cpu")
    with pytest.raises(TypeError, match=r"must return \(mean, log_std\); it returned Tensor"):
        alg.predict(torch.zeros(2, OBS_DIMS[0]))
