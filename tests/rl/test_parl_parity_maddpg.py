"""MADDPG's parity with PARL 2.2.1's published ``parl/algorithms/torch/maddpg.py``.

The wheel's file is loaded against this package (as in ``test_parl_parity.py``, whose download
and CPU fixtures this module shares). Three agents with different observation and action sizes,
discrete and continuous action spaces: PARL's MADDPG and ours start from the same weights, learn
from the same batches with torch's generator reseeded before every call on both sides (the
Gumbel and Gaussian draws), and must end with the same parameters, the same critic losses and
the same ``predict``/``sample``/``Q`` outputs, for every agent of the team.

The deliberate deviations have their own tests at the end: which space decides between the
discrete and the continuous maths, and a critic whose ``Q`` is a ``(B, 1)`` column.
"""

from __future__ import annotations

import copy
import importlib.util
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

import parl
from parl.algorithms import MADDPG

from . import test_parl_parity as parity

# the shared fixtures: PARL's wheel (downloaded once per run) and CPU-only, one-thread torch
parl_wheel = parity.parl_wheel
cpu_only = parity.cpu_only

ATOL = parity.ATOL
UPDATES = parity.UPDATES
BATCH = 32
OBS_DIMS = (4, 6, 3)
ACT_DIMS = (2, 5, 3)
# a large tau, so that a wrong target update shows in the target weights within 5 updates
HYPER = {"gamma": 0.9, "tau": 0.1, "actor_lr": 1e-3, "critic_lr": 2e-3}


@pytest.fixture(scope="module")
def published_maddpg(parl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> type:
    """PARL's MADDPG class, loaded from the wheel's file against this package."""
    source = tmp_path_factory.mktemp("parl-maddpg-src")
    member = "parl/algorithms/torch/maddpg.py"
    with zipfile.ZipFile(parl_wheel) as archive:
        path = Path(archive.extract(member, source))
    name = f"published_parl_{parity.PARL_VERSION.replace('.', '_')}_maddpg"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MADDPG  # type: ignore[no-any-return]


class TeamModel(parl.Model):
    """PARL's MADDPG example model, smaller: a policy of this agent's observation (logits, or
    ``(mean, log_std)``) and a critic of every agent's observation and action, ``Q (B,)``."""

    def __init__(self, obs_dim: int, act_dim: int, critic_in: int, continuous: bool) -> None:
        super().__init__()
        self.continuous = continuous
        self.actor = nn.Sequential(nn.Linear(obs_dim, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
        self.mean = nn.Linear(16, act_dim)
        self.log_std = nn.Linear(16, act_dim) if continuous else None
        self.critic = nn.Sequential(
            nn.Linear(critic_in, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1)
        )

    def policy(self, obs: torch.Tensor) -> Any:
        hidden = self.actor(obs)
        if self.log_std is None:
            return self.mean(hidden)
        return self.mean(hidden), self.log_std(hidden)

    def value(self, obs_n: list[torch.Tensor], act_n: list[torch.Tensor]) -> torch.Tensor:
        return self.critic(torch.cat(obs_n + act_n, dim=1)).squeeze(1)

    def get_actor_params(self) -> list[nn.Parameter]:
        heads = [self.mean] + ([self.log_std] if self.log_std is not None else [])
        return [p for module in [self.actor, *heads] for p in module.parameters()]

    def get_critic_params(self) -> list[nn.Parameter]:
        return list(self.critic.parameters())


def team_spaces(continuous: bool) -> list[Any]:
    if continuous:
        return [spaces.Box(-1.0, 1.0, (n,)) for n in ACT_DIMS]
    return [spaces.Discrete(n) for n in ACT_DIMS]


def make_pair(
    published: type, index: int, continuous: bool, act_space: Sequence[Any] | None = None
) -> tuple[Any, MADDPG]:
    torch.manual_seed(index)
    critic_in = sum(OBS_DIMS) + sum(ACT_DIMS)
    model = TeamModel(OBS_DIMS[index], ACT_DIMS[index], critic_in, continuous)
    act_space = list(act_space or team_spaces(continuous))
    theirs = published(copy.deepcopy(model), agent_index=index, act_space=act_space, **HYPER)
    ours = MADDPG(model, agent_index=index, act_space=act_space, **HYPER, device="cpu")
    return theirs, ours


def team_batch(
    gen: torch.Generator, continuous: bool
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """What PARL's MADDPG agent passes to ``learn``: every agent's observations and stored
    actions (probabilities, or actions in [-1, 1]) and the critic's target ``(B,)``."""
    obs_n = [torch.randn(BATCH, dim, generator=gen) for dim in OBS_DIMS]
    if continuous:
        act_n = [torch.rand(BATCH, dim, generator=gen) * 2.0 - 1.0 for dim in ACT_DIMS]
    else:
        act_n = [F.softmax(torch.randn(BATCH, dim, generator=gen), -1) for dim in ACT_DIMS]
    return obs_n, act_n, torch.randn(BATCH, generator=gen)


def call(alg: Any, method: str, seed: int, *args: Any, **kwargs: Any) -> Any:
    """``alg.method(*args)`` on clones of the tensors (lists too), torch's generator at ``seed``."""
    torch.manual_seed(seed)
    cloned = [[t.clone() for t in a] if isinstance(a, list) else a.clone() for a in args]
    return getattr(alg, method)(*cloned, **kwargs)


def learn_both(theirs: Any, ours: MADDPG, gen: torch.Generator, step: int, continuous: bool) -> Any:
    batch = team_batch(gen, continuous)
    return call(theirs, "learn", 1000 + step, *batch), call(ours, "learn", 1000 + step, *batch)


KINDS = pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
AGENTS = pytest.mark.parametrize("index", range(len(OBS_DIMS)))


@KINDS
@AGENTS
def test_parameters_and_losses_match_published_parl_after_updates(
    published_maddpg: type, cpu_only: None, continuous: bool, index: int
) -> None:
    theirs, ours = make_pair(published_maddpg, index, continuous)
    assert ours.continuous_actions is theirs.continuous_actions is continuous
    assert parity._max_diff(theirs.model, ours.model) == 0.0
    start = copy.deepcopy(ours.model)
    gen = torch.Generator().manual_seed(7)
    for step in range(UPDATES):
        theirs_loss, ours_loss = learn_both(theirs, ours, gen, step, continuous)
        torch.testing.assert_close(ours_loss, theirs_loss.detach(), rtol=1e-6, atol=ATOL)
    diffs = {
        name: parity._max_diff(getattr(theirs, name), getattr(ours, name))
        for name in ("model", "target_model")
    }
    assert max(diffs.values()) <= ATOL, f"max |PARL - ours| per model: {diffs}"
    # both the actor and the critic moved: an update that skipped either would not pass
    for part in ("get_actor_params", "get_critic_params"):
        moved = [
            float((a - b).detach().abs().max())
            for a, b in zip(getattr(start, part)(), getattr(ours.model, part)(), strict=True)
        ]
        assert max(moved) > 1e-4, part


@KINDS
@AGENTS
def test_predict_sample_and_q_match_published_parl(
    published_maddpg: type, cpu_only: None, continuous: bool, index: int
) -> None:
    theirs, ours = make_pair(published_maddpg, index, continuous)
    gen = torch.Generator().manual_seed(11)
    for step in range(2):  # outputs of trained weights, and a target that differs from the model
        learn_both(theirs, ours, gen, step, continuous)
    obs_n, act_n, _ = team_batch(gen, continuous)
    probes: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("predict", (obs_n[index],), {}),
        ("sample", (obs_n[index],), {}),
        ("sample", (obs_n[index],), {"use_target_model": True}),
        ("Q", (obs_n, act_n), {}),
        ("Q", (obs_n, act_n), {"use_target_model": True}),
    ]
    for method, args, kwargs in probes:
        with torch.no_grad():
            theirs_out = call(theirs, method, 5, *args, **kwargs)
            ours_out = call(ours, method, 5, *args, **kwargs)
        assert ours_out.shape == theirs_out.shape, (method, kwargs)
        torch.testing.assert_close(
            ours_out, theirs_out, rtol=0.0, atol=ATOL, msg=f"{method}{kwargs}"
        )


def test_a_mixed_team_gets_each_agents_own_maths_where_published_parl_uses_the_first_agents(
    published_maddpg: type, cpu_only: None
) -> None:
    """A deliberate deviation: which maths an agent uses (Gumbel-softmax over logits, or a
    tanh-squashed Gaussian over ``(mean, log_std)``) follows its own action space here. PARL
    looks at ``act_space[0]`` for every agent, so in a team whose first agent has a ``Box`` and
    whose second a ``Discrete``, PARL's second agent takes its logits for ``(mean, log_std)``:
    ``predict`` returns ``tanh`` of the first row of logits instead of a softmax per row."""
    mixed = [spaces.Box(-1.0, 1.0, (ACT_DIMS[0],)), spaces.Discrete(ACT_DIMS[1])]
    mixed.append(spaces.Discrete(ACT_DIMS[2]))
    theirs, ours = make_pair(published_maddpg, 1, continuous=False, act_space=mixed)
    assert theirs.continuous_actions and not ours.continuous_actions
    obs = torch.randn(BATCH, OBS_DIMS[1])
    with torch.no_grad():
        logits = ours.model.policy(obs)
        torch.testing.assert_close(ours.predict(obs), F.softmax(logits, dim=-1))
        torch.testing.assert_close(theirs.predict(obs), torch.tanh(logits[0]))


class ColumnCritic(TeamModel):
    """A critic that returns ``Q`` as a ``(B, 1)`` column, as DDPG-style models do."""

    def value(self, obs_n: list[torch.Tensor], act_n: list[torch.Tensor]) -> torch.Tensor:
        return self.critic(torch.cat(obs_n + act_n, dim=1))


def test_a_q_column_is_one_value_per_row_where_published_parl_broadcasts(
    published_maddpg: type, cpu_only: None
) -> None:
    """A deliberate deviation: with a model whose ``value`` is a ``(B, 1)`` column, the critic
    loss here still compares one ``Q`` with one target per row. PARL passes the two to
    ``F.mse_loss`` as they are, which broadcasts ``(B, 1)`` against ``(B,)`` into a ``(B, B)``
    matrix: a loss over every pair of rows, with only a warning."""
    torch.manual_seed(0)
    critic_in = sum(OBS_DIMS) + sum(ACT_DIMS)
    model = ColumnCritic(OBS_DIMS[0], ACT_DIMS[0], critic_in, continuous=False)
    act_space = team_spaces(False)
    theirs = published_maddpg(copy.deepcopy(model), agent_index=0, act_space=act_space, **HYPER)
    ours = MADDPG(model, agent_index=0, act_space=act_space, **HYPER, device="cpu")
    gen = torch.Generator().manual_seed(5)
    obs_n, act_n, _ = team_batch(gen, continuous=False)
    with torch.no_grad():  # targets close to the critic's own values: a small loss per row
        q = model.value(obs_n, act_n).squeeze(1)
        target = q + 0.01 * torch.randn(BATCH, generator=gen)
        per_row = (q - target).square().mean()
        every_pair = (q[:, None] - target[None, :]).square().mean()
    assert every_pair > 10 * per_row
    with pytest.warns(UserWarning, match="different to the input size"):
        theirs_loss = call(theirs, "learn", 1, obs_n, act_n, target)
    ours_loss = call(ours, "learn", 1, obs_n, act_n, target)
    torch.testing.assert_close(ours_loss, per_row)
    torch.testing.assert_close(theirs_loss.detach(), every_pair)
