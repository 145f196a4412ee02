"""OAC's parity with PARL 2.2.1's published ``parl/algorithms/torch/oac.py``.

The wheel's file is loaded against this package (as in ``test_parl_parity.py``, whose download
and CPU fixtures, model and batches this module shares). PARL's OAC and ours start from the same
weights, learn from the same batches with torch's generator reseeded before every call on both
sides, and must end with the same parameters and target parameters, the same losses, and the
same ``predict``, ``sample`` and optimistic exploration actions.

The deliberate deviation has its own test at the end: a batch of observations explores here,
each row shifted by its own gradient; PARL's takes one observation at a time.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from parl.algorithms import OAC
from parl.algorithms.oac import optimistic_shift

from . import test_parl_parity as parity

# the shared fixtures: PARL's wheel (downloaded once per run) and CPU-only, one-thread torch
parl_wheel = parity.parl_wheel
cpu_only = parity.cpu_only

ATOL = parity.ATOL
# a large tau, so that a wrong target update shows in the target weights within 5 updates
HYPER: dict[str, Any] = {
    "gamma": 0.9,
    "tau": 0.1,
    "alpha": 0.2,
    "beta": 4.66,
    "delta": 23.53,
    "actor_lr": 1e-3,
    "critic_lr": 2e-3,
}


@pytest.fixture(scope="module")
def published_oac(parl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> type:
    """PARL's OAC class, loaded from the wheel's file against this package."""
    source = tmp_path_factory.mktemp("parl-oac-src")
    with zipfile.ZipFile(parl_wheel) as archive:
        path = Path(archive.extract("parl/algorithms/torch/oac.py", source))
    name = f"published_parl_{parity.PARL_VERSION.replace('.', '_')}_oac"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OAC  # type: ignore[no-any-return]


def make_pair(published: type) -> parity.Pair:
    torch.manual_seed(0)
    model = parity.ContinuousModel(gaussian=True, twin=True)
    return parity.Pair(published(copy.deepcopy(model), **HYPER), OAC(model, **HYPER, device="cpu"))


def learn_both(pair: parity.Pair, gen: torch.Generator, step: int) -> tuple[Any, Any]:
    args, _ = parity.continuous_batch(gen, step)
    seed = 1000 + step
    return (
        parity._call(pair.theirs, "learn", seed, *args),
        parity._call(pair.ours, "learn", seed, *args),
    )


def test_parameters_and_losses_match_published_parl_after_updates(
    published_oac: type, cpu_only: None
) -> None:
    pair = make_pair(published_oac)
    assert parity._max_diff(pair.theirs.model, pair.ours.model) == 0.0
    gen = torch.Generator().manual_seed(7)
    for step in range(parity.UPDATES):
        theirs, ours = learn_both(pair, gen, step)
        for theirs_loss, ours_loss in zip(
            parity._tensors(theirs), parity._tensors(ours), strict=True
        ):
            torch.testing.assert_close(ours_loss, theirs_loss, rtol=parity.LOSS_RTOL, atol=ATOL)
    for name in ("model", "target_model"):
        diff = parity._max_diff(getattr(pair.theirs, name), getattr(pair.ours, name))
        assert diff <= ATOL, f"{name}: max |PARL - ours| = {diff}"
    torch.manual_seed(0)
    untrained = parity.ContinuousModel(gaussian=True, twin=True)
    assert parity._max_diff(untrained, pair.ours.model) > 1e-4


def test_actions_and_optimistic_exploration_match_published_parl(
    published_oac: type, cpu_only: None
) -> None:
    pair = make_pair(published_oac)
    gen = torch.Generator().manual_seed(11)
    for step in range(2):  # outputs of trained weights, not only of the initial ones
        learn_both(pair, gen, step)
    obs = parity._obs(gen, rows=8)
    for method in ("predict", "sample"):
        with torch.no_grad():
            theirs = parity._tensors(parity._call(pair.theirs, method, 5, obs))
            ours = parity._tensors(parity._call(pair.ours, method, 5, obs))
        for theirs_out, ours_out in zip(theirs, ours, strict=True):
            torch.testing.assert_close(ours_out, theirs_out, rtol=0.0, atol=ATOL, msg=method)
    # PARL's agent explores one observation at a time; PARL's method needs a single row
    method = "get_optimistic_exploration_action"
    for row in range(obs.shape[0]):
        one = obs[row : row + 1]
        theirs_action = parity._call(pair.theirs, method, 20 + row, one)
        ours_action = parity._call(pair.ours, method, 20 + row, one)
        assert ours_action.shape == theirs_action.shape == (1, parity.ACT_DIM)
        torch.testing.assert_close(ours_action, theirs_action, rtol=0.0, atol=ATOL)
    # the shift is not negligible: exploration differs from a plain sample of the policy
    plain, _ = parity._call(pair.ours, "sample", 3, obs[:1])
    assert float((parity._call(pair.ours, method, 3, obs[:1]) - plain).abs().max()) > 1e-3


def test_a_batch_explores_row_by_row_where_published_parl_takes_one_observation(
    published_oac: type, cpu_only: None
) -> None:
    """A deliberate deviation: PARL's exploration differentiates a ``(B, 1)`` bound, which
    autograd accepts only for ``B = 1``, and normalises the shift by a norm over the whole
    batch. Here each row is shifted by its own gradient and its own norm."""
    pair = make_pair(published_oac)
    obs = parity._obs(torch.Generator().manual_seed(2), rows=4)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        parity._call(pair.theirs, "get_optimistic_exploration_action", 1, obs)
    action = parity._call(pair.ours, "get_optimistic_exploration_action", 1, obs)
    assert action.shape == (4, parity.ACT_DIM) and bool((action.abs() <= 1).all())
    gen = torch.Generator().manual_seed(3)
    grad = torch.randn(4, parity.ACT_DIM, generator=gen, dtype=torch.float64)
    variance = torch.rand(4, parity.ACT_DIM, generator=gen, dtype=torch.float64) + 0.1
    shift = optimistic_shift(grad, variance, 2.0)
    for row in range(4):  # each row as PARL computes a single observation's shift
        g, v = grad[row], variance[row]
        expected = math.sqrt(4.0) * v * g / (float((g * g * v).sum().sqrt()) + 1e-5)
        torch.testing.assert_close(shift[row], expected)
