"""Decision Transformer's parity with PARL 2.2.1's published ``parl/algorithms/torch/dt.py``.

The wheel's file is loaded against this package (as in ``test_parl_parity.py``, whose download
and CPU fixtures this module shares). PARL's training step and ours run on identical copies of
one :class:`~parl.algorithms.trajectory_model.TrajectoryModel` (dropout on) and the same
batches of windows, torch's generator reseeded before every call on both sides: the losses,
the learning rates of the warmup schedule, the parameters after every update and the predicted
actions must agree.
"""

from __future__ import annotations

import copy
import importlib.util
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from parl.algorithms import DecisionTransformer
from parl.algorithms.trajectory_model import TrajectoryModel
from parl.utils import TrajectorySampler

from . import test_parl_parity as parity

# the shared fixtures: PARL's wheel (downloaded once per run) and CPU-only, one-thread torch
parl_wheel = parity.parl_wheel
cpu_only = parity.cpu_only

ATOL = parity.ATOL
STATE_DIM, ACT_DIM, CONTEXT = 3, 2, 5
# a short warmup: the rate grows over the first updates and then stays
HYPER: dict[str, Any] = {"learning_rate": 1e-3, "warmup_steps": 3, "weight_decay": 1e-2}


@pytest.fixture(scope="module")
def published_dt(parl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> type:
    """PARL's DecisionTransformer class, loaded from the wheel's file against this package."""
    source = tmp_path_factory.mktemp("parl-dt-src")
    with zipfile.ZipFile(parl_wheel) as archive:
        path = Path(archive.extract("parl/algorithms/torch/dt.py", source))
    name = f"published_parl_{parity.PARL_VERSION.replace('.', '_')}_dt"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DecisionTransformer  # type: ignore[no-any-return]


def episodes(seed: int, count: int = 6) -> list[dict[str, np.ndarray]]:
    """Episodes of 3 to 11 steps, some shorter than the context."""
    rng = np.random.default_rng(seed)
    result = []
    for _ in range(count):
        length = int(rng.integers(3, 12))
        result.append(
            {
                "observations": rng.normal(size=(length, STATE_DIM)).astype(np.float32),
                "actions": rng.uniform(-1, 1, size=(length, ACT_DIM)).astype(np.float32),
                "rewards": rng.normal(size=length).astype(np.float32),
                "terminals": np.eye(length)[-1].astype(bool),
            }
        )
    return result


def make_pair(published: type) -> parity.Pair:
    torch.manual_seed(0)
    model = TrajectoryModel(
        STATE_DIM, ACT_DIM, hidden_size=16, max_length=CONTEXT, max_ep_len=32, n_layer=2, n_head=2
    )
    theirs = published(copy.deepcopy(model), *HYPER.values())
    return parity.Pair(theirs, DecisionTransformer(model, **HYPER, device="cpu"))


def test_training_steps_and_warmup_match_published_parl(published_dt: type, cpu_only: None) -> None:
    pair = make_pair(published_dt)
    sampler = TrajectorySampler(episodes(0), context=CONTEXT, max_ep_len=32, scale=10.0, seed=1)
    rates = []
    for step in range(6):
        batch = sampler.sample(8).to_tensors()
        theirs = parity._call(pair.theirs, "learn", 100 + step, *batch)
        ours = parity._call(pair.ours, "learn", 100 + step, *batch)
        torch.testing.assert_close(ours, theirs.detach(), rtol=parity.LOSS_RTOL, atol=ATOL)
        theirs_lr = pair.theirs.optimizer.param_groups[0]["lr"]
        assert pair.ours.optimizer.param_groups[0]["lr"] == theirs_lr
        rates.append(theirs_lr)
        diff = parity._max_diff(pair.theirs.model, pair.ours.model)
        assert diff <= ATOL, f"update {step}: max |PARL - ours| = {diff}"
    np.testing.assert_allclose(rates, [2e-3 / 3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3])
    torch.manual_seed(0)
    untrained = TrajectoryModel(
        STATE_DIM, ACT_DIM, hidden_size=16, max_length=CONTEXT, max_ep_len=32, n_layer=2, n_head=2
    )
    assert parity._max_diff(untrained, pair.ours.model) > 1e-4


def test_predicted_actions_match_published_parl(published_dt: type, cpu_only: None) -> None:
    pair = make_pair(published_dt)
    pair.theirs.model.eval()
    pair.ours.model.eval()
    gen = torch.Generator().manual_seed(4)
    for steps in (1, 3, CONTEXT + 2):  # shorter than the context, and cut to it
        states = torch.randn(steps, STATE_DIM, generator=gen)
        actions = torch.cat([torch.randn(steps - 1, ACT_DIM, generator=gen), torch.zeros(1, 2)])
        rewards = torch.randn(steps, generator=gen)
        rtg = torch.randn(1, steps, generator=gen)
        timesteps = torch.arange(steps).reshape(1, -1)
        args = (states, actions, rewards, rtg, timesteps)
        with torch.no_grad():
            theirs = parity._call(pair.theirs, "predict", 0, *args)
        ours = parity._call(pair.ours, "predict", 0, *args)
        assert ours.shape == (ACT_DIM,)
        torch.testing.assert_close(ours, theirs, rtol=0.0, atol=ATOL)
