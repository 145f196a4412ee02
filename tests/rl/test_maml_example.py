"""examples/MAML: a stopped-and-resumed run equals a run straight through, and the run writes
TensorBoard events, a checkpoint and the model."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch

from .conftest import REPO_ROOT, RunPython, flag_cases_script

pytestmark = pytest.mark.slow  # the example script, run for real

EXAMPLE = REPO_ROOT / "examples" / "MAML"

SMALL = [
    "--train_total_steps", "12", "--test_every_steps", "4", "--total_iter_per_epoch", "4",
    "--network_dims", "1,16,16,1", "--num_training_tasks", "40", "--training_batch_size", "4",
    "--num_test_tasks", "20", "--test_batch_size", "10", "--multi_step_loss_num_epochs", "2",
    "--first_order_to_second_order_epoch", "0",
]  # fmt: skip


# The straight run and the first part of the stopped run need no fresh interpreter: they run
# in one; the resume runs in another.
FIRST_RUNS = """
import sys
sys.path.insert(0, {folder!r})
import train
train.main([*{args!r}, "--logdir", {straight!r}])
train.main([*{args!r}, "--logdir", {resumed!r}, "--stop_after_steps", "8"])
"""


@pytest.mark.parametrize("algo", ["maml++", "maml"])
def test_maml_resume_equals_straight_run(run_python: RunPython, tmp_path: Path, algo: str) -> None:
    args = [*SMALL, "--algo", algo, "--no_progress", "--torch_threads", "1"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    code = FIRST_RUNS.format(
        folder=str(EXAMPLE), args=args, straight=str(straight), resumed=str(resumed)
    )
    proc = run_python(code, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done: 12 steps; test MSE on 20 held-out tasks" in proc.stderr
    assert "done: 8 steps" in proc.stderr
    stopped = torch.load(resumed / "model.pt", weights_only=True)
    proc = run_python(
        args=[str(EXAMPLE / "train.py"), *args, "--logdir", str(resumed), "--resume"], timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stderr and "done: 12 steps" in proc.stderr
    ours = torch.load(straight / "model.pt", weights_only=True)
    again = torch.load(resumed / "model.pt", weights_only=True)
    assert ours.keys() == again.keys()
    for key in ours:
        torch.testing.assert_close(ours[key], again[key], rtol=0, atol=0)
    assert any(not torch.equal(stopped[k], again[k]) for k in again)  # it did train on
    assert glob.glob(str(straight / "events.out.tfevents.*"))
    assert (straight / "checkpoint.pt").is_file()


def test_counts_below_one_are_usage_errors(run_python: RunPython) -> None:
    """These used to fail mid-run with a ZeroDivisionError or "range() arg 3 must not be zero",
    or (a negative --stop_after_steps) to write an untrained model over the run's."""
    cases = [["--total_iter_per_epoch", "0"], ["--training_batch_size", "0"],
             ["--test_batch_size", "0"], ["--stop_after_steps", "-2"],
             ["--stop_after_steps", "0", "--test_batch_size", "1"]]  # fmt: skip
    folder = str(REPO_ROOT / "examples" / "MAML")
    proc = run_python(flag_cases_script(folder, cases), timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "REFUSED -c: error: --total_iter_per_epoch must be 1 or more, got 0",
        "REFUSED -c: error: --training_batch_size must be 1 or more, got 0",
        "REFUSED -c: error: --test_batch_size must be 1 or more, got 0",
        "REFUSED -c: error: --stop_after_steps must be 0 (never) or more, got -2",
        "ACCEPTED ['--stop_after_steps', '0', '--test_batch_size', '1']",
    ], proc.stdout + proc.stderr[-3000:]


EVALUATE_SCRIPT = """
import sys
import numpy as np
import torch
sys.path.insert(0, {folder!r})
import parl
from agent import MAMLAgent

class MeanOfTargets(parl.Algorithm):
    # a stand-in for MAML: a batch's "loss" is the mean of its query targets
    def __init__(self):
        super().__init__(torch.nn.Linear(1, 1))
    def evaluate_one_iter(self, batch):
        return float(batch[3].mean())

agent = MAMLAgent(MeanOfTargets())
tasks = np.arange(15, dtype=np.float32).reshape(15, 1, 1)
batch = lambda part: (part, part, part, part)
mean, half_width = agent.evaluate([batch(tasks[:10]), batch(tasks[10:])])
print("MEAN", mean, half_width > 0)
"""


def test_the_test_mse_counts_every_task_once_when_the_last_batch_is_smaller(
    run_python: RunPython,
) -> None:
    """15 held-out tasks in batches of 10 and 5: the mean is over the 15 tasks (7.0 here),
    not the mean of the two batch means (8.25), which would count each of the last 5 twice."""
    folder = str(REPO_ROOT / "examples" / "MAML")
    proc = run_python(EVALUATE_SCRIPT.format(folder=folder), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MEAN 7.0 True" in proc.stdout, proc.stdout
