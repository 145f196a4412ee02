"""CQL against PARL 2.2.1's published ``parl/algorithms/torch/cql.py``.

The wheel's file is loaded against this package (as in ``test_parl_parity.py``, whose download
and CPU fixtures this module shares). PARL's CQL and ours start from the same weights, learn from
the same batches with torch's generator reseeded before every call on both sides (the uniform
and policy proposals, the sampled actions), and must end with the same parameters, the same
losses, the same temperatures and the same ``predict``/``sample`` outputs: with and without the
Lagrange weight and the learned entropy temperature, in the behaviour-cloning phase and after it,
for both conservative terms PARL has (``min_q_version`` 3 and 2).

The deliberate deviation has its own test at the end: with a learned temperature, ``alpha`` is
its initial value here, where PARL always starts it at 1.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import parl
from parl.algorithms import CQL

from . import test_parl_parity as parity
from .marl_nets import load_published

# the shared fixtures: PARL's wheel (downloaded once per run) and CPU-only, one-thread torch
parl_wheel = parity.parl_wheel
cpu_only = parity.cpu_only

ATOL = parity.ATOL
UPDATES = parity.UPDATES
BATCH = 16
OBS_DIM, ACT_DIM = 4, 2
# a large tau, so that a wrong target update shows in the target weights within 5 updates
HYPER = {"gamma": 0.9, "tau": 0.1, "actor_lr": 1e-3, "critic_lr": 2e-3}


@pytest.fixture(scope="module")
def published_cql(parl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> type:
    """PARL's CQL class, loaded from the wheel's file against this package."""
    return load_published(parl_wheel, tmp_path_factory.mktemp("parl-cql-src"), "cql", "CQL")


class CQLModel(parl.Model):
    """PARL's CQL benchmark model, smaller: ``policy -> (mean, log_std)`` with ``log_std``
    clamped to ``[-5, 2]``, twin critics ``value -> (q1, q2)`` as ``(B, 1)`` columns."""

    def __init__(self) -> None:
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(OBS_DIM, 16), nn.ReLU(), nn.Linear(16, 2 * ACT_DIM))
        self.q1 = nn.Sequential(nn.Linear(OBS_DIM + ACT_DIM, 16), nn.ReLU(), nn.Linear(16, 1))
        self.q2 = nn.Sequential(nn.Linear(OBS_DIM + ACT_DIM, 16), nn.ReLU(), nn.Linear(16, 1))

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(-5.0, 2.0)

    def value(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=1)
        return self.q1(x), self.q2(x)

    def get_actor_params(self) -> list[nn.Parameter]:
        return list(self.actor.parameters())

    def get_critic_params(self) -> list[nn.Parameter]:
        return list(self.q1.parameters()) + list(self.q2.parameters())


def make_pair(published: type, **options: Any) -> tuple[Any, CQL]:
    torch.manual_seed(0)
    model = CQLModel()
    theirs = published(copy.deepcopy(model), **HYPER, **options)
    ours = CQL(model, **HYPER, **options, device="cpu")
    theirs.sync_target(decay=0)  # as PARL's agent does when it is built
    ours.sync_target(decay=0)
    return theirs, ours


def batch(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """What PARL's CQL agent passes to ``learn``: dataset actions in ``(-1, 1)`` (one on the
    bound), rewards and terminals as ``(B, 1)`` columns."""
    action = torch.rand(BATCH, ACT_DIM, generator=gen) * 2.0 - 1.0
    action[0, 0] = 1.0
    obs, next_obs = (
        torch.randn(BATCH, OBS_DIM, generator=gen),
        torch.randn(BATCH, OBS_DIM, generator=gen),
    )
    reward = torch.randn(BATCH, 1, generator=gen)
    terminal = (torch.rand(BATCH, 1, generator=gen) < 0.2).float()
    return obs, action, reward, next_obs, terminal


def call(alg: Any, method: str, seed: int, *args: torch.Tensor) -> Any:
    """``alg.method(*args)`` on clones of the inputs, torch's generator at ``seed``."""
    torch.manual_seed(seed)
    return getattr(alg, method)(*(arg.clone() for arg in args))


def scalar(value: Any) -> float:
    return float(torch.as_tensor(value).detach().reshape(()))


CONFIGS = {
    "H-auto-alpha": {},
    "H-lagrange": {"with_lagrange": True, "lagrange_thresh": 1.0},
    "H-fixed-alpha": {"with_automatic_entropy_tuning": False, "alpha": 0.2},
    "rho-auto-alpha": {"min_q_version": 2},
    "rho-lagrange-fixed-alpha": {
        "min_q_version": 2,
        "with_lagrange": True,
        "with_automatic_entropy_tuning": False,
        "alpha": 0.5,
    },
}
# policy_eval_start=3: updates 1 and 2 clone the behaviour, 3 to 5 follow Q; 0: Q throughout
PHASES = {"bc-then-q": 3, "q-only": 0}


@pytest.mark.parametrize("phase", PHASES.values(), ids=PHASES.keys())
@pytest.mark.parametrize("options", CONFIGS.values(), ids=CONFIGS.keys())
def test_parameters_losses_and_temperatures_match_published_parl(
    published_cql: type, cpu_only: None, options: dict[str, Any], phase: int
) -> None:
    theirs, ours = make_pair(published_cql, policy_eval_start=phase, **options)
    assert parity._max_diff(theirs.model, ours.model) == 0.0
    start = copy.deepcopy(ours.model)
    gen = torch.Generator().manual_seed(7)
    for step in range(UPDATES):
        args = batch(gen)
        theirs_losses = call(theirs, "learn", 1000 + step, *args)
        ours_losses = call(ours, "learn", 1000 + step, *args)
        for theirs_loss, ours_loss in zip(theirs_losses, ours_losses, strict=True):
            assert scalar(ours_loss) == pytest.approx(scalar(theirs_loss), rel=1e-5, abs=1e-5)
        assert ours.alpha == pytest.approx(scalar(theirs.alpha), rel=1e-6)
        if options.get("with_lagrange"):
            assert ours.alpha_prime == pytest.approx(scalar(theirs.log_alpha_prime.exp()), rel=1e-6)
    for name in ("model", "target_model"):
        diff = parity._max_diff(getattr(theirs, name), getattr(ours, name))
        assert diff <= ATOL, f"max |PARL - ours| of {name}: {diff}"
    assert parity._max_diff(start, ours.model) > 1e-4  # the updates did move the weights
    obs = torch.randn(8, OBS_DIM, generator=gen)
    with torch.no_grad():
        torch.testing.assert_close(
            call(ours, "predict", 5, obs), call(theirs, "predict", 5, obs), rtol=0.0, atol=ATOL
        )
        for theirs_out, ours_out in zip(
            call(theirs, "sample", 5, obs), call(ours, "sample", 5, obs), strict=True
        ):
            torch.testing.assert_close(ours_out, theirs_out, rtol=0.0, atol=1e-5)


def test_learned_temperature_starts_at_alpha_where_published_parl_starts_at_one(
    published_cql: type, cpu_only: None
) -> None:
    """A deliberate deviation: with ``with_automatic_entropy_tuning`` PARL ignores ``alpha`` and
    starts ``log alpha`` at 0; here ``alpha`` is the starting temperature (its default, 1, gives
    PARL's start), so that a script that passes it gets what it asked for."""
    theirs, ours = make_pair(published_cql, alpha=0.1, policy_eval_start=0)
    assert ours.alpha == pytest.approx(0.1)
    assert float(theirs.log_alpha.detach().exp()) == 1.0
    assert float(ours.alpha_model.log_alpha.detach()) == pytest.approx(math.log(0.1))


def test_bad_hyperparameters_name_the_argument() -> None:
    with pytest.raises(ValueError, match="min_q_version must be 3 .* or 2"):
        CQL(CQLModel(), min_q_version=1, device="cpu")
    with pytest.raises(TypeError, match="with_lagrange"):
        CQL(CQLModel(), with_lagrange=1, device="cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="initial temperature"):
        CQL(CQLModel(), alpha=0.0, device="cpu")
    with pytest.raises(TypeError, match=r"needs model to define policy\(\), value\(\)"):
        CQL(nn.Linear(2, 2), device="cpu")
