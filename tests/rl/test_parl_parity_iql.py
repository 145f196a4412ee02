"""IQL against PARL 2.2.1's published ``parl/algorithms/torch/iql.py``.

The wheel's file is loaded against this package (as in ``test_parl_parity.py``, whose download
and CPU fixtures this module shares). PARL's IQL and ours start from the same weights, learn from
the same batches and must end with the same parameters (model and target), the same three
losses and the same ``predict`` outputs.

The deliberate deviations have their own tests at the end: ``sync_target``'s convention (the
``decay`` of every other algorithm here; PARL's own ``alpha`` keyword still means what it means
in PARL), and a policy with independent per-dimension log-densities.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import parl
from parl.algorithms import IQL

from . import test_parl_parity as parity
from .marl_nets import load_published

# the shared fixtures: PARL's wheel (downloaded once per run) and CPU-only, one-thread torch
parl_wheel = parity.parl_wheel
cpu_only = parity.cpu_only

ATOL = parity.ATOL
UPDATES = parity.UPDATES
BATCH = 16
OBS_DIM, ACT_DIM = 4, 2
# a large target rate, so that a wrong target update shows within 5 updates
HYPER = {"lr": 1e-3, "tau": 0.7, "beta": 3.0, "discount": 0.9, "alpha": 0.1}


@pytest.fixture(scope="module")
def published_iql(parl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> type:
    """PARL's IQL class, loaded from the wheel's file against this package."""
    return load_published(parl_wheel, tmp_path_factory.mktemp("parl-iql-src"), "iql", "IQL")


class Actor(nn.Module):
    """PARL's IQL benchmark actor, smaller: a tanh mean and a state-independent std squashed
    into ``[exp(-6), 1]``, as a ``MultivariateNormal``; ``act`` as PARL's ``predict`` calls it."""

    def __init__(self, independent: bool = False) -> None:
        super().__init__()
        self.independent = independent
        self.net = nn.Sequential(nn.Linear(OBS_DIM, 16), nn.ReLU(), nn.Linear(16, ACT_DIM))
        self.log_std = nn.Parameter(torch.zeros(ACT_DIM))

    def forward(self, obs: torch.Tensor) -> torch.distributions.Distribution:
        mean = torch.tanh(self.net(obs))
        std = torch.exp(-6.0 + 6.0 * torch.sigmoid(self.log_std))
        if self.independent:
            return torch.distributions.Normal(mean, std.expand_as(mean))
        return torch.distributions.MultivariateNormal(mean, scale_tril=torch.diag(std))

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        with torch.no_grad():
            dist = self(obs)
            return dist.mean if deterministic else dist.sample()


class IQLModel(parl.Model):
    """PARL's IQL benchmark model, smaller: ``value -> (B, 1)``, twin ``qvalue -> (q1, q2)``
    columns and the actor above."""

    def __init__(self, independent: bool = False) -> None:
        super().__init__()
        self.actor_model = Actor(independent)
        self.q1 = nn.Sequential(nn.Linear(OBS_DIM + ACT_DIM, 16), nn.ReLU(), nn.Linear(16, 1))
        self.q2 = nn.Sequential(nn.Linear(OBS_DIM + ACT_DIM, 16), nn.ReLU(), nn.Linear(16, 1))
        self.v = nn.Sequential(nn.Linear(OBS_DIM, 16), nn.ReLU(), nn.Linear(16, 1))

    def policy(self, obs: torch.Tensor) -> torch.distributions.Distribution:
        return self.actor_model(obs)

    def qvalue(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=1)
        return self.q1(x), self.q2(x)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(obs)

    def get_actor_params(self) -> list[nn.Parameter]:
        return list(self.actor_model.parameters())

    def get_critic_params(self) -> list[nn.Parameter]:
        return list(self.q1.parameters()) + list(self.q2.parameters())

    def get_value_params(self) -> list[nn.Parameter]:
        return list(self.v.parameters())


def make_pair(published: type, independent: bool = False) -> tuple[Any, IQL]:
    torch.manual_seed(0)
    model = IQLModel(independent)
    theirs = published(copy.deepcopy(model), max_steps=100, **HYPER)
    ours = IQL(model, max_steps=100, **HYPER, device="cpu")
    return theirs, ours


def batch(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """What PARL's IQL agent passes to ``update``: rewards and terminals as ``(B, 1)``."""
    action = torch.rand(BATCH, ACT_DIM, generator=gen) * 1.8 - 0.9
    obs, next_obs = (torch.randn(BATCH, OBS_DIM, generator=gen) for _ in range(2))
    reward = torch.randn(BATCH, 1, generator=gen)
    terminal = (torch.rand(BATCH, 1, generator=gen) < 0.2).float()
    return obs, action, reward, next_obs, terminal


def call(alg: Any, method: str, seed: int, *args: torch.Tensor) -> Any:
    torch.manual_seed(seed)
    return getattr(alg, method)(*(arg.clone() for arg in args))


@pytest.mark.parametrize("method", ["update", "learn"])
def test_parameters_and_losses_match_published_parl_after_updates(
    published_iql: type, cpu_only: None, method: str
) -> None:
    theirs, ours = make_pair(published_iql)
    assert parity._max_diff(theirs.model, ours.model) == 0.0
    start = copy.deepcopy(ours.model)
    gen = torch.Generator().manual_seed(7)
    for step in range(UPDATES):
        args = batch(gen)
        theirs_losses = call(theirs, "update", 1000 + step, *args)
        ours_losses = call(ours, method, 1000 + step, *args)
        for theirs_loss, ours_loss in zip(theirs_losses, ours_losses, strict=True):
            torch.testing.assert_close(ours_loss, theirs_loss, rtol=1e-5, atol=1e-6)
    assert parity._max_diff(theirs.model, ours.model) <= ATOL
    assert parity._max_diff(theirs.q_target, ours.target_model) <= ATOL
    assert ours.q_target is ours.target_model
    assert parity._max_diff(start, ours.model) > 1e-4
    assert parity._max_diff(start, ours.target_model) > 1e-5  # the soft update moved it
    obs = torch.randn(8, OBS_DIM, generator=gen)
    torch.testing.assert_close(
        call(ours, "predict", 5, obs), call(theirs, "predict", 5, obs), rtol=0.0, atol=ATOL
    )


def test_sync_target_keeps_this_package_convention_and_accepts_parl_alpha(
    published_iql: type, cpu_only: None
) -> None:
    """A deliberate deviation: ``sync_target(decay)`` means here what it means for DQN, DDPG,
    SAC and CQL (``decay`` is the share of the target kept: ``decay=0`` copies, ``None`` is a
    soft step of ``1 - alpha``). PARL's IQL reads its argument the other way round, as
    ``alpha``, the share of the model taken, so that its bare ``sync_target()`` (``alpha=0``)
    leaves the target as it is. PARL's keyword ``alpha`` keeps PARL's meaning here."""
    theirs, ours = make_pair(published_iql)
    gen = torch.Generator().manual_seed(3)
    args = batch(gen)
    call(theirs, "update", 1, *args)
    call(ours, "update", 1, *args)
    # the model has moved away from the target
    assert parity._max_diff(ours.model, ours.target_model) > 1e-4
    before = copy.deepcopy(theirs.q_target)

    theirs.sync_target()  # PARL: alpha=0, nothing moves
    assert parity._max_diff(before, theirs.q_target) == 0.0
    ours_before = copy.deepcopy(ours.target_model)
    ours.sync_target()  # here: a soft step with decay = 1 - alpha
    expected = {
        name: (1.0 - HYPER["alpha"]) * ours_before.state_dict()[name] + HYPER["alpha"] * value
        for name, value in ours.model.state_dict().items()
    }
    for name, value in ours.target_model.state_dict().items():
        torch.testing.assert_close(value, expected[name])

    theirs.sync_target(alpha=1.0)  # PARL's copy
    ours.sync_target(alpha=1.0)  # the same keyword, the same meaning
    assert parity._max_diff(ours.model, ours.target_model) == 0.0
    assert parity._max_diff(theirs.q_target, ours.target_model) <= ATOL

    call(ours, "update", 2, *batch(gen))
    call(theirs, "update", 2, *batch(torch.Generator().manual_seed(4)))
    # a number without a keyword: PARL's alpha (1.0 copies), this package's decay (1.0 keeps)
    kept = copy.deepcopy(ours.target_model)
    theirs.sync_target(1.0)
    ours.sync_target(1.0)
    assert parity._max_diff(theirs.model, theirs.q_target) == 0.0
    assert parity._max_diff(kept, ours.target_model) == 0.0
    assert parity._max_diff(ours.model, ours.target_model) > 1e-4
    ours.sync_target(decay=0.0)  # this package's copy
    assert parity._max_diff(ours.model, ours.target_model) == 0.0
    with pytest.raises(ValueError, match="not both"):
        ours.sync_target(0.5, alpha=0.5)
    with pytest.raises(ValueError, match="decay must be"):
        ours.sync_target(1.5)


def test_an_independent_normal_policy_is_one_log_density_per_step(cpu_only: None) -> None:
    """A deliberate deviation: a policy that returns ``Normal`` (one log-density per action
    dimension, ``(B, act_dim)``) is summed over the action axis here; PARL multiplies the
    ``(B,)`` weights by that matrix, which fails for ``act_dim != B`` and broadcasts silently for
    ``act_dim == B``. The update equals that of the same policy as a ``MultivariateNormal``."""
    torch.manual_seed(0)
    model = IQLModel(independent=True)
    twin = copy.deepcopy(model)
    twin.actor_model.independent = False
    ours = IQL(model, max_steps=10, **HYPER, device="cpu")
    reference = IQL(twin, max_steps=10, **HYPER, device="cpu")
    args = batch(torch.Generator().manual_seed(1))
    for ours_loss, reference_loss in zip(ours.update(*args), reference.update(*args), strict=True):
        torch.testing.assert_close(ours_loss, reference_loss)
    assert parity._max_diff(ours.model, reference.model) <= ATOL


def test_bad_arguments_name_what_is_wrong() -> None:
    with pytest.raises(TypeError, match="max_steps"):
        IQL(IQLModel(), max_steps=1e6, device="cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tau must be"):
        IQL(IQLModel(), max_steps=10, tau=1.0, device="cpu")
    with pytest.raises(TypeError, match="get_value_params"):
        IQL(nn.Linear(2, 2), max_steps=10, device="cpu")

    class NoDistribution(IQLModel):
        def policy(self, obs: torch.Tensor) -> Any:
            return self.actor_model(obs).mean

    alg = IQL(NoDistribution(), max_steps=10, device="cpu")
    with pytest.raises(TypeError, match="must return a torch.distributions.Distribution"):
        alg.predict(torch.zeros(2, OBS_DIM))
