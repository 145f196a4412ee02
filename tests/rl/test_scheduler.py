"""LinearDecayScheduler and PiecewiseScheduler: exact values and bad input."""

from __future__ import annotations

import pytest

from parl.utils import LinearDecayScheduler, PiecewiseScheduler


def test_linear_decay_to_zero_like_parl() -> None:
    scheduler = LinearDecayScheduler(1.0, max_steps=100)
    assert scheduler.value == 1.0
    assert scheduler.step() == 0.99
    assert scheduler.step(24) == 0.75
    assert scheduler.step(75) == 0.0
    assert scheduler.step(10) == 0.0  # stays at the end value
    assert scheduler.cur_step == 100


def test_linear_decay_to_an_end_value_and_state() -> None:
    scheduler = LinearDecayScheduler(0.5, max_steps=4, end_value=0.1)
    assert [scheduler.step() for _ in range(5)] == pytest.approx([0.4, 0.3, 0.2, 0.1, 0.1])
    other = LinearDecayScheduler(0.5, max_steps=4, end_value=0.1)
    other.load_state_dict({"cur_step": 2})
    assert other.value == pytest.approx(0.3)
    assert scheduler.state_dict() == {"cur_step": 4}


def test_piecewise_is_constant_between_boundaries() -> None:
    scheduler = PiecewiseScheduler([(0, 1.0), (10, 0.5), (25, 0.25)])
    assert scheduler.value == 1.0
    assert scheduler.step(9) == 1.0  # step 9
    assert scheduler.step() == 0.5  # step 10
    assert scheduler.step(14) == 0.5  # step 24
    assert scheduler.step() == 0.25  # step 25
    assert scheduler.step(1000) == 0.25
    restored = PiecewiseScheduler([(0, 1.0), (10, 0.5), (25, 0.25)])
    restored.load_state_dict({"cur_step": 12})
    assert restored.value == 0.5


def test_piecewise_first_value_holds_before_its_step() -> None:
    # PARL accepts a first pair at any step and gives its value from step 0 on.
    assert PiecewiseScheduler([(3, 0.1)]).value == 0.1
    scheduler = PiecewiseScheduler([(5, 1.0), (10, 0.5)])
    assert [scheduler.value] + [scheduler.step() for _ in range(10)] == [1.0] * 10 + [0.5]


@pytest.mark.parametrize(
    ("args", "error", "pattern"),
    [
        (("1.0", 10), TypeError, r"LinearDecayScheduler: start_value must be a float, got '1.0'"),
        ((1.0, 0), ValueError, r"max_steps must be an int >= 1, got 0"),
        ((1.0, 2.5), TypeError, r"max_steps must be an int >= 1, got 2.5 \(float\)"),
    ],
)
def test_linear_bad_input(args: tuple, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        LinearDecayScheduler(*args)


def test_step_num_must_be_positive() -> None:
    with pytest.raises(ValueError, match="step_num must be an int >= 1, got 0"):
        LinearDecayScheduler(1.0, 10).step(0)
    with pytest.raises(TypeError, match="step_num must be an int"):
        PiecewiseScheduler([(0, 1.0)]).step(1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("schedule", "error", "pattern"),
    [
        ([], ValueError, "must not be empty"),
        ([(-1, 1.0)], ValueError, r"scheduler_list\[0\]\[0\] must be an int >= 0, got -1"),
        (
            [(0, 1.0), (10, 0.5), (10, 0.1)],
            ValueError,
            r"scheduler_list\[2\] has step 10 after step 10",
        ),
        ([(0, 1.0), 3], TypeError, r"scheduler_list\[1\] must be a \(step, value\) pair, got 3"),
        ([(0, "a")], TypeError, r"scheduler_list\[0\]\[1\] must be a float"),
        ("abc", TypeError, "must be a list of"),
    ],
)
def test_piecewise_bad_input(schedule: object, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        PiecewiseScheduler(schedule)  # type: ignore[arg-type]
