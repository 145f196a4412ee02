"""The QMIX and COMA examples: a stopped-and-resumed run equals a run straight through, on MPE's
simple_spread, and both run on level-based foraging (changing action masks)."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch

from .conftest import REPO_ROOT, RunPython
from .test_offpolicy_examples import assert_same_weights, run_example

pytestmark = pytest.mark.slow  # the example scripts, run for real

SHORT = ["--train_total_steps", "300", "--test_every_steps", "150", "--eval_episodes", "1"]
OWN = {
    "QMIX": ["--batch_size", "4", "--save_rpm", "--update_target_interval", "3"],
    "COMA": ["--episodes_per_iteration", "2", "--target_update_cycle", "3"],
}


@pytest.mark.parametrize("name", list(OWN))
def test_marl_example_resume_equals_straight_run(
    run_python: RunPython, tmp_path: Path, name: str
) -> None:
    args = [*SHORT, *OWN[name]]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_example(run_python, name, *args, "--logdir", str(straight))
    run_example(run_python, name, *args, "--logdir", str(resumed), "--stop_after_steps", "150")
    stopped = torch.load(resumed / "model.ckpt", weights_only=True)
    log = run_example(run_python, name, *args, "--logdir", str(resumed), "--resume")
    assert "resumed from" in log
    assert_same_weights(straight / "model.ckpt", resumed / "model.ckpt")
    final = torch.load(resumed / "model.ckpt", weights_only=True)
    assert any(not torch.equal(stopped[k], final[k]) for k in final)  # it did train on
    assert glob.glob(str(straight / "events.out.tfevents.*"))


@pytest.mark.parametrize("name", list(OWN))
def test_marl_example_runs_on_foraging(run_python: RunPython, tmp_path: Path, name: str) -> None:
    args = [*SHORT, *OWN[name], "--env", "Foraging-8x8-2p-2f-coop-v3"]
    log = run_example(run_python, name, *args, "--logdir", str(tmp_path))
    assert "done: " in log


@pytest.mark.parametrize("name", list(OWN))
def test_marl_example_runs_where_agents_see_different_amounts(
    run_python: RunPython, tmp_path: Path, name: str
) -> None:
    """In simple_world_comm the agents' observations differ in length and its leader has more
    actions than the rest: shorter observations are zero-padded to the longest."""
    short = ["--train_total_steps", "150", "--test_every_steps", "150", "--eval_episodes", "1"]
    args = [*short, *OWN[name], "--env", "simple_world_comm"]
    log = run_example(run_python, name, *args, "--logdir", str(tmp_path))
    assert "done: " in log


def test_qmix_example_holds_ctrl_c_until_the_checkpoint_and_memory_are_written(
    run_python: RunPython,
) -> None:
    code = (
        "import os, signal, sys\n"
        f"sys.path.insert(0, {str(REPO_ROOT / 'examples' / 'QMIX')!r})\n"
        "import threading, train\n"
        "# another thread, as torch and tqdm start: the signal may be delivered to it\n"
        "threading.Thread(target=threading.Event().wait, daemon=True).start()\n"
        "done = []\n"
        "try:\n"
        "    with train.ctrl_c_deferred():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        done.append('both written')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after:', done)\n"
    )
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "interrupted after: ['both written']" in proc.stdout
