"""``parl.algorithms.AlphaZero``: the loss against numbers worked by hand, one optimizer step,
prediction in evaluation mode, argument errors, and (given PARL's source) the same updates as
PARL's AlphaZero benchmark."""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import parl
from parl.algorithms import AlphaZero
from parl.algorithms.alphazero import alphazero_loss


class TinyNet(parl.Model):
    """Boards ``(B, 2, 3)`` -> ``(log_pi (B, 3), v (B, 1))``, with dropout to show the modes."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.drop = nn.Dropout(0.5)
        self.pi = nn.Linear(8, 3)
        self.v = nn.Linear(8, 1)

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.drop(torch.relu(self.fc(boards.flatten(1))))
        return F.log_softmax(self.pi(h), dim=1), torch.tanh(self.v(h))


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    boards = torch.randint(-1, 2, (5, 2, 3), generator=g).float()
    pis = torch.softmax(torch.randn(5, 3, generator=g), dim=1)
    vs = torch.tensor([1.0, -1.0, 0.0, 1.0, -1.0])
    return boards, pis, vs


def test_loss_is_cross_entropy_plus_squared_error_worked_by_hand() -> None:
    log_pi = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]))
    v = torch.tensor([[0.5], [-0.2]])
    target_pis = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]])
    target_vs = torch.tensor([1.0, -1.0])
    loss = alphazero_loss(log_pi, v, target_pis, target_vs)
    # pi: -(log 0.5 + 0.5 log 0.8 + 0.5 log 0.1) / 2; v: ((1 - 0.5)^2 + (-1 + 0.2)^2) / 2
    pi_loss = -(math.log(0.5) + 0.5 * math.log(0.8) + 0.5 * math.log(0.1)) / 2
    v_loss = (0.25 + 0.64) / 2
    assert loss.pi_loss.item() == pytest.approx(pi_loss, rel=1e-6)
    assert loss.v_loss.item() == pytest.approx(v_loss, rel=1e-6)
    assert loss.total_loss.item() == pytest.approx(pi_loss + v_loss, rel=1e-6)


def test_learn_takes_one_optimizer_step_and_returns_detached_losses(batch) -> None:
    torch.manual_seed(0)
    alg = AlphaZero(TinyNet(), device="cpu")
    optimizer = torch.optim.SGD(alg.model.parameters(), lr=0.1)
    before = copy.deepcopy(alg.model.state_dict())
    total, pi_loss, v_loss = alg.learn(*batch, optimizer)
    assert alg.model.training
    assert not total.requires_grad and total.dim() == 0
    assert total.item() == pytest.approx(pi_loss.item() + v_loss.item(), rel=1e-6)
    assert any(not torch.equal(before[k], v) for k, v in alg.model.state_dict().items())
    alg.model.drop.p = 0.0  # without dropout the loss falls step by step
    losses = [alg.learn(*batch, optimizer).total_loss.item() for _ in range(30)]
    assert losses[-1] < losses[0]


def test_predict_gives_probabilities_and_values_in_eval_mode_without_grad(batch) -> None:
    torch.manual_seed(0)
    alg = AlphaZero(TinyNet(), device="cpu")
    pi, v = alg.predict(batch[0])
    assert not alg.model.training
    assert pi.shape == (5, 3) and v.shape == (5, 1)
    assert not pi.requires_grad
    torch.testing.assert_close(pi.sum(dim=1), torch.ones(5))
    again, _ = alg.predict(batch[0])
    torch.testing.assert_close(pi, again, rtol=0, atol=0)  # no dropout: deterministic


def test_learn_names_a_batch_of_mismatched_shapes_and_a_missing_optimizer(batch) -> None:
    alg = AlphaZero(TinyNet(), device="cpu")
    optimizer = torch.optim.SGD(alg.model.parameters(), lr=0.1)
    boards, pis, vs = batch
    with pytest.raises(ValueError, match=r"target_vs \(B,\).*target_vs \(5, 1\)"):
        alg.learn(boards, pis, vs[:, None], optimizer)
    with pytest.raises(ValueError, match="target_pis"):
        alg.learn(boards, pis[:4], vs, optimizer)
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
        alg.learn(boards, pis, vs, 0.1)  # type: ignore[arg-type]


# -- parity with PARL's AlphaZero benchmark -------------------------------------------------
# PARL ships AlphaZero in its source tree's benchmark folder, not in the wheel; given a checkout
# of PARL's source (PARL_SOURCE_DIR), its algorithm runs here against this package's parl.
PARL_ALPHAZERO = Path(os.environ.get("PARL_SOURCE_DIR", "/nonexistent"), "benchmark", "torch",
                      "AlphaZero")  # fmt: skip


@pytest.fixture
def parl_alphazero() -> Iterator[ModuleType]:
    if not (PARL_ALPHAZERO / "alphazero_agent.py").is_file():
        pytest.skip("set PARL_SOURCE_DIR to a checkout of PARL's source to compare with it")
    names = ("utils", "connect4_model", "connect4_game", "parl_alphazero_agent")
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path.insert(0, str(PARL_ALPHAZERO))
    try:
        spec = importlib.util.spec_from_file_location(
            "parl_alphazero_agent", PARL_ALPHAZERO / "alphazero_agent.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(PARL_ALPHAZERO))
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def test_updates_match_parls_alphazero(parl_alphazero: ModuleType) -> None:
    """PARL's ``Connect4Model`` (dropout off, so both sides draw nothing) learns the same five
    batches with PARL's ``AlphaZero`` and with ours: the same losses and the same weights."""
    from connect4_model import Connect4Model  # PARL's, from the benchmark folder

    game = SimpleNamespace(getBoardSize=lambda: (6, 7), getActionSize=lambda: 7)
    args = parl_alphazero.dotdict({"dropout": 0.0, "num_channels": 8})
    torch.manual_seed(0)
    theirs_model = Connect4Model(game, args)
    ours_model = copy.deepcopy(theirs_model)
    theirs = parl_alphazero.AlphaZero(theirs_model)
    ours = AlphaZero(ours_model, device="cpu")
    theirs_opt = torch.optim.Adam(theirs_model.parameters(), lr=1e-3)
    ours_opt = torch.optim.Adam(ours_model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        boards = torch.randint(-1, 2, (16, 6, 7), generator=g).float()
        pis = torch.softmax(torch.randn(16, 7, generator=g), dim=1)
        vs = torch.randint(-1, 2, (16,), generator=g).float()
        expected = theirs.learn(boards, pis, vs, theirs_opt)
        got = ours.learn(boards, pis, vs, ours_opt)
        for e, o in zip(expected, got, strict=True):
            assert o.item() == pytest.approx(e.item(), rel=1e-6, abs=1e-7)
    for key, value in theirs_model.state_dict().items():
        torch.testing.assert_close(ours_model.state_dict()[key], value, rtol=1e-6, atol=1e-6)
    board = torch.randint(-1, 2, (3, 6, 7), generator=g).float()
    for e, o in zip(theirs.predict(board), ours.predict(board), strict=True):
        torch.testing.assert_close(o, e)
