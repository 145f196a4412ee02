"""examples/MAML: a stopped-and-resumed run equals a run straight through, and the run writes
TensorBoard events, a checkpoint and the model."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch

from .conftest import REPO_ROOT, RunPython

pytestmark = pytest.mark.slow  # the example script, run for real

SMALL = [
    "--train_total_steps", "12", "--test_every_steps", "4", "--total_iter_per_epoch", "4",
    "--network_dims", "1,16,16,1", "--num_training_tasks", "40", "--training_batch_size", "4",
    "--num_test_tasks", "20", "--test_batch_size", "10", "--multi_step_loss_num_epochs", "2",
    "--first_order_to_second_order_epoch", "0",
]  # fmt: skip


def run_example(run_python: RunPython, *args: str) -> str:
    script = REPO_ROOT / "examples" / "MAML" / "train.py"
    proc = run_python(args=[str(script), "--no_progress", *args], timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


@pytest.mark.parametrize("algo", ["maml++", "maml"])
def test_maml_resume_equals_straight_run(run_python: RunPython, tmp_path: Path, algo: str) -> None:
    args = [*SMALL, "--algo", algo]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    log = run_example(run_python, *args, "--logdir", str(straight))
    assert "done: 12 steps; test MSE on 20 held-out tasks" in log
    log = run_example(run_python, *args, "--logdir", str(resumed), "--stop_after_steps", "8")
    assert "done: 8 steps" in log
    stopped = torch.load(resumed / "model.pt", weights_only=True)
    log = run_example(run_python, *args, "--logdir", str(resumed), "--resume")
    assert "resumed from" in log and "done: 12 steps" in log
    ours = torch.load(straight / "model.pt", weights_only=True)
    again = torch.load(resumed / "model.pt", weights_only=True)
    assert ours.keys() == again.keys()
    for key in ours:
        torch.testing.assert_close(ours[key], again[key], rtol=0, atol=0)
    assert any(not torch.equal(stopped[k], again[k]) for k in again)  # it did train on
    assert glob.glob(str(straight / "events.out.tfevents.*"))
    assert (straight / "checkpoint.pt").is_file()
