"""MAML's parity with PARL 2.2.1's MAML++ benchmark (``benchmark/torch/maml++/``).

PARL ships its MAML only in the benchmark folder of its source tree, not in the published wheel
(whose ``parl/algorithms/torch/`` has no MAML), so the download that the other parity tests use
cannot provide it, and neither can a CI run. This file is therefore not collected with the
suite (its name does not start with ``test_``); run it by hand against a checkout of PARL 2.2.1's
source: ``PARL_SOURCE_DIR=/path/to/PARL python -m pytest tests/rl/parl_source_maml.py``. PARL's ``maml_algorithm.py`` and ``maml_model.py`` are loaded
against this package; both sides start from the same weights, take the same twelve meta-updates
over six epochs (cosine schedule, learnable per-step rates, multi-step loss, first and second
order) and must end with the same weights, inner learning rates and losses.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import parl
from parl.algorithms import MAML

from . import test_parl_parity as parity

cpu_only = parity.cpu_only
BENCHMARK = Path("benchmark", "torch", "maml++")
DIMS = (1, 8, 8, 1)
HYPER = {
    "num_updates_per_iter": 3,
    "num_layers": len(DIMS) - 1,
    "task_learning_rate": 0.01,
    "learnable_learning_rates": True,
    "meta_learning_rate": 0.01,
    "total_epochs": 6,
    "min_learning_rate": 1e-4,
    "learning_rate_scheduler": True,
    "multi_step_loss_num_epochs": 3,
}


class ListModel(parl.Model):
    """PARL's benchmark network, with its parameters registered (an ``nn.ParameterList``)."""

    def __init__(self, weights: Sequence[torch.Tensor]) -> None:
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(w.detach().clone()) for w in weights])

    def forward(
        self, x: torch.Tensor, params: Sequence[torch.Tensor] | None = None
    ) -> torch.Tensor:
        weights = list(self.params) if params is None else list(params)
        layers = len(weights) // 2
        for i in range(layers):
            x = F.linear(x, weights[2 * i], weights[2 * i + 1])
            if i < layers - 1:
                x = F.relu(x)
        return x

    def get_weights(self) -> list[nn.Parameter]:  # type: ignore[override]
        return list(self.params)


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def benchmark() -> tuple[ModuleType, ModuleType]:
    """PARL's MAML algorithm and model modules, loaded against this package."""
    root = os.environ.get("PARL_SOURCE_DIR")
    if not root:
        pytest.fail("PARL's MAML is not in its wheel: set PARL_SOURCE_DIR to PARL's source tree")
    folder = Path(root) / BENCHMARK
    if not (folder / "maml_algorithm.py").is_file():
        pytest.fail(f"PARL_SOURCE_DIR={root!r} has no {BENCHMARK / 'maml_algorithm.py'}")
    return _load(folder / "maml_algorithm.py", "parl_maml_algorithm"), _load(
        folder / "maml_model.py", "parl_maml_model"
    )


@pytest.mark.usefixtures("cpu_only")
@pytest.mark.filterwarnings("ignore")  # PARL's scheduler.step(epoch) is deprecated in torch
@pytest.mark.parametrize(
    ("second_order", "multi_step"), [(True, True), (False, True), (True, False)]
)
def test_same_weights_and_learning_rates_after_twelve_meta_updates(
    benchmark: tuple[ModuleType, ModuleType], second_order: bool, multi_step: bool
) -> None:
    algorithm_module, model_module = benchmark
    torch.manual_seed(0)
    their_model = model_module.MAMLModel(list(DIMS), torch.device("cpu"))
    our_model = ListModel(their_model.get_weights())
    hyper = {
        **HYPER,
        "second_order": second_order,
        "use_multi_step_loss_optimization": multi_step,
    }
    theirs = algorithm_module.MAML(their_model, torch.device("cpu"), **hyper)
    ours = MAML(our_model, "cpu", **hyper)
    gen = torch.Generator().manual_seed(1)
    for update in range(12):
        batch = [torch.randn(4, points, 1, generator=gen) for points in (5, 5, 7, 7)]
        epoch = update // 2
        assert ours.train_one_iter(batch, epoch) == pytest.approx(
            theirs.train_one_iter(batch, epoch), abs=1e-5
        )
    for their_weight, our_weight in zip(
        their_model.get_weights(), our_model.get_weights(), strict=True
    ):
        torch.testing.assert_close(our_weight.detach(), their_weight.detach(), atol=1e-6, rtol=0)
    torch.testing.assert_close(
        ours.learning_rates.detach(), theirs.learning_rates.detach(), atol=1e-6, rtol=0
    )
    assert ours.evaluate_one_iter(batch) == pytest.approx(theirs.evaluate_one_iter(batch), abs=1e-5)
