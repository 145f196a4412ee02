"""examples/MADDPG: a stopped-and-resumed run equals a run straight through, with discrete and
continuous actions, and it writes TensorBoard events and one model file per agent."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch

from . import test_offpolicy_examples as offpolicy
from .conftest import REPO_ROOT, RunPython

pytestmark = pytest.mark.slow  # the example script, run for real

SMALL = [
    "--max_episodes", "10", "--test_every_episodes", "4", "--batch_size", "32",
    "--learn_every", "5", "--warmup_size", "60", "--memory_size", "1000", "--save_rpm",
]  # fmt: skip
AGENTS = 2  # simple_speaker_listener's speaker and listener


def run_example(run_python: RunPython, *args: str) -> str:
    script = REPO_ROOT / "examples" / "MADDPG" / "train.py"
    proc = run_python(args=[str(script), "--no_progress", *args], timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_maddpg_resume_equals_straight_run(
    run_python: RunPython, tmp_path: Path, continuous: bool
) -> None:
    args = SMALL + (["--continuous_actions"] if continuous else [])
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    log = run_example(run_python, *args, "--logdir", str(straight))
    assert "done: 10 episodes, 250 steps" in log
    log = run_example(run_python, *args, "--logdir", str(resumed), "--stop_after_episodes", "6")
    assert "done: 6 episodes" in log and (resumed / "rpm_agent1.npz").is_file()
    stopped = torch.load(resumed / "agent_0.ckpt", weights_only=True)
    log = run_example(run_python, *args, "--logdir", str(resumed), "--resume")
    assert "resumed from" in log and "done: 10 episodes, 250 steps" in log
    for i in range(AGENTS):
        offpolicy.assert_same_weights(straight / f"agent_{i}.ckpt", resumed / f"agent_{i}.ckpt")
    final = torch.load(resumed / "agent_0.ckpt", weights_only=True)
    assert any(not torch.equal(stopped[k], final[k]) for k in final)  # it did train on
    assert glob.glob(str(straight / "events.out.tfevents.*"))
