"""examples/MAML: a stopped-and-resumed run equals a run straight through, and the run writes
TensorBoard events, a checkpoint and the model."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest
import torch

import parl

from .conftest import RunPython
from .example_mains import imported_example, run_ok

pytestmark = pytest.mark.slow  # the example script, run for real

SMALL = [
    "--train_total_steps", "12", "--test_every_steps", "4", "--total_iter_per_epoch", "4",
    "--network_dims", "1,16,16,1", "--num_training_tasks", "40", "--training_batch_size", "4",
    "--num_test_tasks", "20", "--test_batch_size", "10", "--multi_step_loss_num_epochs", "2",
    "--first_order_to_second_order_epoch", "0",
]  # fmt: skip


def test_maml_and_maml_plus_plus_resume_equals_straight_run(
    run_python: RunPython, tmp_path: Path
) -> None:
    """For MAML and MAML++: a run stopped at step 8 and resumed in another interpreter than the
    one that stopped ends with the straight run's weights, having trained on; the straight run
    writes TensorBoard events, a checkpoint and the model. The straight runs and first parts
    run in one interpreter, the resumes in a second."""
    algos = ("maml++", "maml")
    args = {
        algo: [*SMALL, "--algo", algo, "--no_progress", "--torch_threads", "1"] for algo in algos
    }
    straight = {algo: tmp_path / algo / "straight" for algo in algos}
    resumed = {algo: tmp_path / algo / "resumed" for algo in algos}
    logs = run_ok(
        run_python,
        [
            call
            for algo in algos
            for call in (
                ("MAML", [*args[algo], "--logdir", str(straight[algo])]),
                ("MAML", [*args[algo], "--logdir", str(resumed[algo]), "--stop_after_steps", "8"]),
            )
        ],
    )
    for k, algo in enumerate(algos):
        assert "done: 12 steps; test MSE on 20 held-out tasks" in logs[2 * k], (algo, logs[2 * k])
        assert "done: 8 steps" in logs[2 * k + 1], (algo, logs[2 * k + 1][-2000:])
    stopped = {algo: torch.load(resumed[algo] / "model.pt", weights_only=True) for algo in algos}
    logs = run_ok(
        run_python,
        [("MAML", [*args[algo], "--logdir", str(resumed[algo]), "--resume"]) for algo in algos],
    )
    for algo, log in zip(algos, logs, strict=True):
        assert "resumed from" in log and "done: 12 steps" in log, (algo, log[-2000:])
        ours = torch.load(straight[algo] / "model.pt", weights_only=True)
        again = torch.load(resumed[algo] / "model.pt", weights_only=True)
        assert ours.keys() == again.keys(), algo
        for key in ours:
            torch.testing.assert_close(ours[key], again[key], rtol=0, atol=0, msg=f"{algo} {key}")
        assert any(not torch.equal(stopped[algo][k], again[k]) for k in again), algo  # trained on
        assert glob.glob(str(straight[algo] / "events.out.tfevents.*")), algo
        assert (straight[algo] / "checkpoint.pt").is_file(), algo


def test_counts_below_one_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """These used to fail mid-run with a ZeroDivisionError or "range() arg 3 must not be zero",
    or (a negative --stop_after_steps) to write an untrained model over the run's."""
    refused = {
        "--total_iter_per_epoch 0": "--total_iter_per_epoch must be 1 or more, got 0",
        "--training_batch_size 0": "--training_batch_size must be 1 or more, got 0",
        "--test_batch_size 0": "--test_batch_size must be 1 or more, got 0",
        "--stop_after_steps -2": "--stop_after_steps must be 0 (never) or more, got -2",
    }
    with imported_example("examples/MAML") as train:
        for flags, message in refused.items():
            with pytest.raises(SystemExit) as exit_:
                train.parse_args(flags.split())
            assert exit_.value.code == 2, flags
            assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"error: {message}")
        train.parse_args(["--stop_after_steps", "0", "--test_batch_size", "1"])  # accepted


class MeanOfTargets(parl.Algorithm):
    """A stand-in for MAML: a batch's "loss" is the mean of its query targets."""

    def __init__(self) -> None:
        super().__init__(torch.nn.Linear(1, 1))

    def evaluate_one_iter(self, batch: tuple) -> float:
        return float(batch[3].mean())


def test_the_test_mse_counts_every_task_once_when_the_last_batch_is_smaller() -> None:
    """15 held-out tasks in batches of 10 and 5: the mean is over the 15 tasks (7.0 here),
    not the mean of the two batch means (8.25), which would count each of the last 5 twice."""
    with imported_example("examples/MAML", "agent") as agent_module:
        agent = agent_module.MAMLAgent(MeanOfTargets())
        tasks = np.arange(15, dtype=np.float32).reshape(15, 1, 1)
        mean, half_width = agent.evaluate(
            [(part, part, part, part) for part in (tasks[:10], tasks[10:])]
        )
    assert mean == 7.0 and half_width > 0, (mean, half_width)
