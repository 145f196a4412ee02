"""MAML: one inner step and its meta-gradient against the formulas written out by hand for a
linear model, first against second order, MAML++'s loss weights and schedule, determinism,
checkpoints and the errors on bad input."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import parl
from parl.algorithms import MAML
from parl.algorithms.maml import cosine_annealing_lr, multi_step_loss_weights


class FunctionalMLP(parl.Model):
    """A ReLU MLP that can run with given weights, as MAML needs."""

    def __init__(self, dims: Sequence[int] = (1, 1)) -> None:
        super().__init__()
        self.params = nn.ParameterList()
        for fan_in, fan_out in zip(dims[:-1], dims[1:], strict=True):
            self.params.append(nn.Parameter(torch.randn(fan_out, fan_in) * 0.5))
            self.params.append(nn.Parameter(torch.randn(fan_out) * 0.1))

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


ALPHA = 0.1
XS, YS = [0.5, -1.0, 2.0], [1.0, 0.0, 3.0]
XQ, YQ = [1.5, -0.5], [2.0, -1.0]
W0, B0 = 0.3, -0.2


def linear_maml(**kwargs: object) -> MAML:
    model = FunctionalMLP((1, 1))
    with torch.no_grad():
        model.params[0].fill_(W0)
        model.params[1].fill_(B0)
    options: dict[str, object] = {
        "num_updates_per_iter": 1,
        "task_learning_rate": ALPHA,
        "use_multi_step_loss_optimization": False,
        "learning_rate_scheduler": False,
    }
    options.update(kwargs)
    return MAML(model, "cpu", **options)  # type: ignore[arg-type]


def one_task() -> list[torch.Tensor]:
    def column(values: list[float]) -> torch.Tensor:
        return torch.tensor(values).reshape(1, -1, 1)

    return [column(XS), column(YS), column(XQ), column(YQ)]


def by_hand(second_order: bool) -> tuple[float, float, float, float, float, float]:
    """``w', b'``, the query loss and its gradients w.r.t. ``w``, ``b`` and ``alpha``."""
    xs, ys, xq, yq = map(np.array, (XS, YS, XQ, YQ))
    rs = W0 * xs + B0 - ys
    gw, gb = np.mean(2 * rs * xs), np.mean(2 * rs)
    w1, b1 = W0 - ALPHA * gw, B0 - ALPHA * gb
    rq = w1 * xq + b1 - yq
    loss = np.mean(rq**2)
    dw1, db1 = np.mean(2 * rq * xq), np.mean(2 * rq)
    if second_order:  # chain rule through w' = w - alpha * g_w(w, b), b' = b - alpha * g_b(w, b)
        dw = dw1 * (1 - ALPHA * np.mean(2 * xs * xs)) + db1 * (-ALPHA * np.mean(2 * xs))
        db = dw1 * (-ALPHA * np.mean(2 * xs)) + db1 * (1 - ALPHA * 2)
    else:  # the inner gradients are constants
        dw, db = dw1, db1
    dalpha = -(dw1 * gw + db1 * gb)
    return w1, b1, loss, dw, db, dalpha


def test_one_inner_step_matches_sgd_by_hand() -> None:
    alg = linear_maml()
    x_support, y_support, _, _ = one_task()
    w1, b1 = (t.item() for t in alg.adapt(x_support[0], y_support[0]))
    expected = by_hand(second_order=True)
    assert w1 == pytest.approx(expected[0], abs=1e-6)
    assert b1 == pytest.approx(expected[1], abs=1e-6)


@pytest.mark.parametrize("second_order", [True, False])
def test_meta_gradient_matches_the_chain_rule_by_hand(second_order: bool) -> None:
    alg = linear_maml(second_order=second_order)
    loss = alg.meta_loss(one_task(), current_epoch=0)
    loss.backward()
    _, _, expected_loss, dw, db, dalpha = by_hand(second_order)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-6)
    weight, bias = alg.model.get_weights()
    assert weight.grad is not None and bias.grad is not None
    assert alg.learning_rates.grad is not None
    assert weight.grad.item() == pytest.approx(dw, abs=1e-5)
    assert bias.grad.item() == pytest.approx(db, abs=1e-5)
    assert alg.learning_rates.grad.item() == pytest.approx(dalpha, abs=1e-5)


def test_first_and_second_order_differ_by_the_hessian_terms_only() -> None:
    first, second = by_hand(False), by_hand(True)
    assert abs(first[3] - second[3]) > 1e-3 and abs(first[4] - second[4]) > 1e-3
    assert first[5] == pytest.approx(second[5])  # d/d alpha needs no second derivative here
    runs = {}
    for order in (False, True):
        alg = linear_maml(second_order=order)
        alg.train_one_iter(one_task(), 0)
        runs[order] = [w.item() for w in alg.model.get_weights()]
    assert runs[False] != runs[True]


def test_derivative_order_annealing_is_first_order_until_the_given_epoch() -> None:
    alg = linear_maml(first_order_to_second_order_epoch=2)
    assert [alg.uses_second_order(e) for e in range(5)] == [False, False, False, True, True]
    for epoch, second_order in ((2, False), (3, True)):
        alg.optimizer.zero_grad()
        alg.meta_loss(one_task(), epoch).backward()
        assert alg.model.get_weights()[0].grad.item() == pytest.approx(
            by_hand(second_order)[3], abs=1e-5
        )


def test_fixed_learning_rates_are_not_learned() -> None:
    alg = linear_maml(learnable_learning_rates=False)
    alg.train_one_iter(one_task(), 0)
    assert alg.learning_rates.grad is None
    assert alg.learning_rates.item() == pytest.approx(ALPHA)


def test_learning_rate_gradient_is_clipped_to_20() -> None:
    alg = linear_maml(meta_learning_rate=1.0)
    big = [t * 100 for t in one_task()]
    alg.train_one_iter(big, 0)
    assert alg.learning_rates.grad is not None
    assert alg.learning_rates.grad.abs().item() == pytest.approx(20.0)


@pytest.mark.parametrize("clip", [None, 1e-3, 1e6])
def test_max_grad_norm_clips_the_weights_meta_gradient_only(clip: float | None) -> None:
    """The weights' gradient at Adam's step is the meta-gradient scaled down to norm ``clip``
    when longer (the same direction), untouched when shorter or without a clip; the inner
    rates keep their own elementwise clamp."""
    reference = linear_maml()
    reference.meta_loss(one_task(), 0).backward()
    full = torch.cat([w.grad.flatten() for w in reference.model.get_weights()])
    alg = linear_maml(max_grad_norm=clip)
    seen: list[torch.Tensor] = []
    step = alg.optimizer.step

    def record(*args: object, **kwargs: object) -> object:
        seen.append(torch.cat([w.grad.flatten().clone() for w in alg.model.get_weights()]))
        return step(*args, **kwargs)

    alg.optimizer.step = record  # type: ignore[method-assign]
    alg.train_one_iter(one_task(), 0)
    (clipped,) = seen
    expected = full if clip is None or full.norm() <= clip else full * (clip / full.norm())
    torch.testing.assert_close(clipped, expected, rtol=1e-5, atol=1e-9)
    if clip == 1e-3:
        assert full.norm() > 1e-2  # the clip did something
    assert alg.learning_rates.grad is not None
    assert alg.learning_rates.grad.item() == pytest.approx(reference.learning_rates.grad.item())


def test_a_meta_gradient_spike_clipped_leaves_adam_able_to_learn() -> None:
    """One batch of huge targets makes a meta-gradient spike; unclipped, Adam's second moment
    takes it in and, once the spike's momentum has decayed, ordinary steps barely move the
    weights; clipped, they move as usual."""
    moves = {}
    for clip in (None, 10.0):
        alg = linear_maml(meta_learning_rate=1e-3, max_grad_norm=clip)
        spike = one_task()
        spike[3] = spike[3] * 1e8  # the query targets of a wildly overshooting task
        alg.train_one_iter(spike, 0)
        for _ in range(100):  # Adam's first moment forgets the spike (0.9 per step)
            alg.train_one_iter(one_task(), 0)
        before = torch.cat([w.detach().flatten().clone() for w in alg.model.get_weights()])
        for _ in range(20):
            alg.train_one_iter(one_task(), 0)
        after = torch.cat([w.detach().flatten() for w in alg.model.get_weights()])
        moves[clip] = float((after - before).norm())
    assert moves[10.0] > 100 * moves[None], moves


def test_multi_step_loss_weights_by_hand() -> None:
    np.testing.assert_allclose(multi_step_loss_weights(3, 0, 10), [1 / 3, 1 / 3, 1 / 3], 1e-6)
    np.testing.assert_allclose(multi_step_loss_weights(3, 5, 10), [1 / 6, 1 / 6, 2 / 3], 1e-6)
    # the floor, 0.03 / 3, once the decay has passed it
    np.testing.assert_allclose(multi_step_loss_weights(3, 10, 10), [0.01, 0.01, 0.98], 1e-6)
    np.testing.assert_allclose(multi_step_loss_weights(1, 4, 10), [1.0])


def test_multi_step_loss_weighs_every_step_then_only_the_last() -> None:
    torch.manual_seed(0)
    model = FunctionalMLP((1, 8, 1))
    alg = MAML(model, "cpu", num_updates_per_iter=3, multi_step_loss_num_epochs=2)
    batch = [torch.randn(2, 5, 1), torch.randn(2, 5, 1), torch.randn(2, 6, 1), torch.randn(2, 6, 1)]
    x_s, y_s, x_q, y_q = batch
    per_step = []
    for k in range(1, 4):
        alg.num_updates_per_iter = k  # the first k steps (the rates of step j do not depend on k)
        per_step.append(
            torch.stack(
                [F.mse_loss(model(x_q[t], alg.adapt(x_s[t], y_s[t])), y_q[t]) for t in range(2)]
            ).mean()
        )
    alg.num_updates_per_iter = 3
    weights = multi_step_loss_weights(3, 1, 2)
    expected = sum(float(w) * loss.item() for w, loss in zip(weights, per_step, strict=True))
    assert alg.meta_loss(batch, 1).item() == pytest.approx(expected, rel=1e-5)
    assert alg.meta_loss(batch, 2).item() == pytest.approx(per_step[-1].item(), rel=1e-5)


def test_cosine_schedule_sets_the_outer_learning_rate() -> None:
    assert cosine_annealing_lr(0, 10, 1e-3, 1e-5) == pytest.approx(1e-3)
    assert cosine_annealing_lr(5, 10, 1e-3, 1e-5) == pytest.approx((1e-3 + 1e-5) / 2)
    assert cosine_annealing_lr(10, 10, 1e-3, 1e-5) == pytest.approx(1e-5)
    alg = linear_maml(learning_rate_scheduler=True, total_epochs=4, meta_learning_rate=0.01)
    alg.train_one_iter(one_task(), 2)
    expected = cosine_annealing_lr(2, 4, 0.01, 1e-5)
    assert alg.optimizer.param_groups[0]["lr"] == pytest.approx(expected)
    fixed = linear_maml(learning_rate_scheduler=False, meta_learning_rate=0.01)
    fixed.train_one_iter(one_task(), 2)
    assert fixed.optimizer.param_groups[0]["lr"] == pytest.approx(0.01)


def sine_batch(gen: torch.Generator, tasks: int = 4) -> list[torch.Tensor]:
    amplitude = torch.rand(tasks, 1, 1, generator=gen) * 4.9 + 0.1
    phase = torch.rand(tasks, 1, 1, generator=gen) * math.pi
    x = torch.rand(tasks, 15, 1, generator=gen) * 10 - 5
    y = amplitude * torch.sin(x + phase)
    return [x[:, :5], y[:, :5], x[:, 5:], y[:, 5:]]


def run(seed: int, updates: int = 6) -> tuple[list[float], list[np.ndarray]]:
    torch.manual_seed(seed)
    alg = MAML(FunctionalMLP((1, 16, 16, 1)), "cpu", total_epochs=3, multi_step_loss_num_epochs=2)
    gen = torch.Generator().manual_seed(seed)
    losses = [alg.train_one_iter(sine_batch(gen), i // 2) for i in range(updates)]
    return losses, [w.detach().numpy().copy() for w in alg.model.get_weights()]


def test_same_seed_same_result_other_seed_other_result() -> None:
    losses_a, weights_a = run(3)
    losses_b, weights_b = run(3)
    assert losses_a == losses_b
    for a, b in zip(weights_a, weights_b, strict=True):
        np.testing.assert_array_equal(a, b)
    assert run(4)[0] != losses_a


def test_checkpoint_restore_continues_the_same_run(tmp_path: Path) -> None:
    torch.manual_seed(0)
    alg = MAML(FunctionalMLP((1, 8, 1)), "cpu", total_epochs=4)
    agent = parl.Agent(alg)
    gen = torch.Generator().manual_seed(0)
    batches = [sine_batch(gen) for _ in range(6)]
    for i in range(3):
        alg.train_one_iter(batches[i], i)
    agent.save_checkpoint(tmp_path / "ckpt.pt", counters={"updates": 3})
    agent.save(tmp_path / "model.pt")
    straight = [alg.train_one_iter(batches[i], i) for i in range(3, 6)]

    torch.manual_seed(1)
    other = MAML(FunctionalMLP((1, 8, 1)), "cpu", total_epochs=4)
    other_agent = parl.Agent(other)
    state = other_agent.restore_checkpoint(tmp_path / "ckpt.pt")
    assert state.counters == {"updates": 3}
    resumed = [other.train_one_iter(batches[i], i) for i in range(3, 6)]
    assert resumed == straight
    torch.testing.assert_close(other.learning_rates, alg.learning_rates)

    torch.manual_seed(2)
    fresh = parl.Agent(MAML(FunctionalMLP((1, 8, 1)), "cpu"))
    fresh.restore(tmp_path / "model.pt")
    assert "inner_lr_model.rates" in agent.get_all_weights()
    assert set(fresh.get_weights()) == {"params.0", "params.1", "params.2", "params.3"}


def test_evaluation_does_not_learn() -> None:
    alg = MAML(FunctionalMLP((1, 8, 1)), "cpu")
    before = [w.detach().clone() for w in alg.model.get_weights()]
    loss = alg.evaluate_one_iter(sine_batch(torch.Generator().manual_seed(0)))
    assert loss > 0
    for b, w in zip(before, alg.model.get_weights(), strict=True):
        torch.testing.assert_close(b, w)
    x_s, y_s, x_q, _ = sine_batch(torch.Generator().manual_seed(1))
    assert alg.predict(x_s[0], y_s[0], x_q[0]).shape == (10, 1)


class ListWeights(parl.Model):
    """PARL's benchmark model keeps its weights in a plain list: not registered in the module."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = [torch.randn(1, 1, requires_grad=True), torch.zeros(1, requires_grad=True)]

    def forward(self, x: torch.Tensor, params: Sequence[torch.Tensor] | None = None):  # type: ignore[no-untyped-def]
        w, b = self.weights if params is None else params
        return F.linear(x, w, b)

    def get_weights(self) -> list[torch.Tensor]:  # type: ignore[override]
        return self.weights


def test_weights_the_state_dict_cannot_hold_are_warned_of() -> None:
    """Such a model trains, but save() would write nothing of it: MAML says so when it is
    made; a model with an nn.ParameterList makes no warning."""
    with pytest.warns(UserWarning, match=r"2 of the 2 tensors ListWeights.get_weights\(\) .* "
                      r"nn.ParameterList"):  # fmt: skip
        MAML(ListWeights(), "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MAML(FunctionalMLP(), "cpu")


class NumpyWeights(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(1, 1)

    def forward(self, x: torch.Tensor, params: object = None) -> torch.Tensor:
        return self.fc(x)


def test_bad_input_raises_clear_errors() -> None:
    with pytest.raises(TypeError, match=r"get_weights\(\) to return its live parameters"):
        MAML(NumpyWeights(), "cpu")
    frozen = FunctionalMLP()
    frozen.params[0].requires_grad_(False)
    with pytest.raises(ValueError, match="tensors that do not require grad"):
        MAML(frozen, "cpu")
    with pytest.raises(ValueError, match="num_layers=3 needs .* 6 tensors .* num_layers=2"):
        MAML(FunctionalMLP((1, 4, 1)), "cpu", num_layers=3)
    with pytest.raises(ValueError, match="num_updates_per_iter must be an int >= 1, got 0"):
        MAML(FunctionalMLP(), "cpu", num_updates_per_iter=0)
    with pytest.raises(ValueError, match="meta_learning_rate must be a float > 0"):
        MAML(FunctionalMLP(), "cpu", meta_learning_rate=0.0)
    with pytest.raises(ValueError, match="max_grad_norm must be a float > 0, got 0"):
        MAML(FunctionalMLP(), "cpu", max_grad_norm=0)
    with pytest.raises(TypeError, match="max_grad_norm must be a float > 0"):
        MAML(FunctionalMLP(), "cpu", max_grad_norm="10")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="second_order must be True or False"):
        MAML(FunctionalMLP(), "cpu", second_order="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="MAML needs model to define forward"):
        MAML(nn.Module(), "cpu")
    alg = linear_maml()
    with pytest.raises(TypeError, match=r"data_batch must be \(x_support, y_support, x_query"):
        alg.train_one_iter(one_task()[:3], 0)
    with pytest.raises(ValueError, match=r"x_query must be a tensor of shape \(tasks, points"):
        alg.train_one_iter([*one_task()[:2], torch.zeros(2, 1), one_task()[3]], 0)
    with pytest.raises(ValueError, match="disagree on the number of tasks"):
        alg.train_one_iter([*one_task()[:3], torch.zeros(2, 2, 1)], 0)
    with pytest.raises(ValueError, match="current_epoch must be an int >= 0, got -1"):
        alg.train_one_iter(one_task(), -1)
