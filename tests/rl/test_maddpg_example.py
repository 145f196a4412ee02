"""examples/MADDPG: a stopped-and-resumed run equals a run straight through, with discrete and
continuous actions, and it writes TensorBoard events and one model file per agent."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest
import torch

from . import test_offpolicy_examples as offpolicy
from .conftest import REPO_ROOT, RunPython
from .multiagent_support import assert_flags_refused

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


def test_maddpg_resume_refuses_checkpoint_files_from_different_points(
    run_python: RunPython, tmp_path: Path
) -> None:
    """A run killed between two agents' checkpoint files leaves them at different episodes:
    ``--resume`` says so instead of going on with a team mixed from two points of the run."""
    small = ["--max_episodes", "4", "--test_every_episodes", "2", "--warmup_size", "1000"]
    run_example(run_python, *small, "--logdir", str(tmp_path), "--stop_after_episodes", "2")
    path = tmp_path / "checkpoint_agent1.pt"
    payload = torch.load(path, weights_only=False)
    payload["counters"]["episodes"] = 0  # as if the run had died before rewriting this one
    torch.save(payload, path)
    script = REPO_ROOT / "examples" / "MADDPG" / "train.py"
    argv = [str(script), "--no_progress", *small, "--logdir", str(tmp_path), "--resume"]
    proc = run_python(args=argv, timeout=180)
    assert proc.returncode != 0
    assert "checkpoint files in" in proc.stderr and "are from different points" in proc.stderr


def test_maddpg_resume_refuses_replay_memories_from_different_points(
    run_python: RunPython, tmp_path: Path
) -> None:
    """A run killed between a checkpoint file and its memory file leaves a memory of an
    earlier point (or none): every update draws the same rows of every agent's memory, so
    ``--resume`` refuses it instead of giving that agent empty rows or other transitions."""
    small = ["--max_episodes", "6", "--test_every_episodes", "2", "--warmup_size", "1000"]
    small += ["--save_rpm", "--logdir", str(tmp_path)]
    run_example(run_python, *small, "--stop_after_episodes", "2")
    stale = (tmp_path / "rpm_agent1.npz").read_bytes()  # 50 transitions
    run_example(run_python, *small, "--stop_after_episodes", "4", "--resume")
    script = REPO_ROOT / "examples" / "MADDPG" / "train.py"
    argv = [str(script), "--no_progress", *small, "--resume"]
    (tmp_path / "rpm_agent1.npz").write_bytes(stale)  # as if the run had died before it
    proc = run_python(args=argv, timeout=180)
    assert proc.returncode != 0
    assert (
        f"rpm_agent1.npz (size and next row [50, 50]) is not the memory written with "
        f"{tmp_path}/checkpoint_agent1.pt ([100, 100])" in proc.stderr
    ), proc.stderr[-2000:]
    (tmp_path / "rpm_agent1.npz").unlink()
    proc = run_python(args=argv, timeout=180)
    assert proc.returncode != 0 and "agent 1: none)" in proc.stderr, proc.stderr[-2000:]
    (tmp_path / "rpm_agent0.npz").unlink()  # no memory at all: resumes with empty ones
    assert "done: 6 episodes" in run_example(run_python, *small, "--resume")


def test_maddpg_resume_leaves_memories_older_than_the_checkpoint(
    run_python: RunPython, tmp_path: Path
) -> None:
    """A part run without ``--save_rpm`` leaves the memory files of an earlier checkpoint on
    disk: the next resume starts with empty memories, saying so, instead of taking them for
    the checkpoint's."""
    small = ["--max_episodes", "6", "--test_every_episodes", "2", "--warmup_size", "1000"]
    small += ["--logdir", str(tmp_path)]
    run_example(run_python, *small, "--save_rpm", "--stop_after_episodes", "2")
    log = run_example(run_python, *small, "--stop_after_episodes", "4", "--resume")
    assert "no replay memory" not in log and "from an earlier checkpoint" not in log  # loaded
    log = run_example(run_python, *small, "--save_rpm", "--resume")
    assert "rpm_agent1.npz is from an earlier checkpoint (the last one was written without " in log
    assert "done: 6 episodes" in log
    saved = np.load(tmp_path / "rpm_agent0.npz")
    assert int(saved["size"]) == 50  # the last 2 episodes only, not 50 stale transitions more


def test_ctrl_c_while_checkpoint_files_are_written_comes_after_the_last(
    run_python: RunPython,
) -> None:
    """The example holds Ctrl-C back while it writes its checkpoint files, then raises it."""
    code = (
        "import os, signal, sys, time\n"
        f"sys.path.insert(0, {str(REPO_ROOT / 'examples' / 'MADDPG')!r})\n"
        "import threading, train\n"
        "# Ctrl-C as in a terminal, whatever the test runner left (a background job ignores it)\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "# another thread, as torch and tqdm start: the signal may be delivered to it\n"
        "threading.Thread(target=threading.Event().wait, daemon=True).start()\n"
        "done = []\n"
        "try:\n"
        "    with train.ctrl_c_deferred():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        done.append('all files written')\n"
        "    time.sleep(10)  # a Ctrl-C whose handler ran after the block (on a busy machine)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after:', done)\n"
    )
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "interrupted after: ['all files written']" in proc.stdout


def test_maddpg_example_runs_on_foraging(run_python: RunPython, tmp_path: Path) -> None:
    """Foraging forbids some actions and MADDPG's policies do not mask: a forbidden argmax does
    nothing, as in lbforaging itself, instead of stopping the run."""
    small = ["--max_episodes", "2", "--test_every_episodes", "1", "--eval_episodes", "1"]
    args = [*small, "--batch_size", "16", "--warmup_size", "32", "--learn_every", "5"]
    log = run_example(
        run_python, *args, "--env", "Foraging-5x5-2p-1f-coop-v3", "--logdir", str(tmp_path)
    )
    assert "done: 2 episodes, 100 steps" in log


def test_maddpg_resume_refuses_another_env(run_python: RunPython, tmp_path: Path) -> None:
    """Foraging with and without ``-coop`` has the same spaces: the checkpoint would load and the
    run go on in another game; the resume is refused by ``--env``."""
    small = ["--max_episodes", "1", "--test_every_episodes", "1", "--eval_episodes", "1"]
    args = [*small, "--warmup_size", "1000", "--logdir", str(tmp_path)]
    run_example(run_python, *args, "--env", "Foraging-5x5-2p-1f-coop-v3")
    script = REPO_ROOT / "examples" / "MADDPG" / "train.py"
    argv = [str(script), "--no_progress", *args, "--env", "Foraging-5x5-2p-1f-v3", "--resume"]
    proc = run_python(args=argv, timeout=180)
    assert proc.returncode != 0
    assert (
        "written with --env Foraging-5x5-2p-1f-coop-v3; this run is with --env "
        "Foraging-5x5-2p-1f-v3" in proc.stderr
    ), proc.stderr[-2000:]


@pytest.mark.parametrize("as_terminal", [False, True], ids=["bootstraps", "terminal"])
def test_the_time_limit_is_stored_as_terminal_only_when_asked(
    run_python: RunPython, tmp_path: Path, as_terminal: bool
) -> None:
    """MPE episodes end only at their length: by default no stored step is terminal, so the
    critic bootstraps through the cut; ``--time_limit_as_terminal`` stores each episode's last
    step as terminal, as PARL's runs did."""
    args = ["--max_episodes", "2", "--test_every_episodes", "2", "--eval_episodes", "1"]
    args += ["--warmup_size", "1000", "--save_rpm", "--logdir", str(tmp_path)]
    run_example(run_python, *args, *(["--time_limit_as_terminal"] if as_terminal else []))
    for i in range(AGENTS):
        with np.load(tmp_path / f"rpm_agent{i}.npz") as memory:
            stored = memory["terminal"][: int(memory["size"])]
        assert stored.shape == (50,)  # two episodes of 25 steps
        expected = [24, 49] if as_terminal else []
        assert np.flatnonzero(stored).tolist() == expected


def test_legacy_dynamics_reach_the_env_and_a_resume_keeps_them(
    run_python: RunPython, tmp_path: Path
) -> None:
    """``--legacy_dynamics``: the stored transitions replay exactly in ``MAenv(...,
    legacy_dynamics=True)`` and not in mpe2's own order; resuming without the flag (or with
    another episode treatment) is refused, naming the flags."""
    from parl.env.multiagent_env import MAenv

    args = ["--max_episodes", "1", "--test_every_episodes", "1", "--eval_episodes", "1"]
    args += ["--warmup_size", "1000", "--save_rpm", "--logdir", str(tmp_path)]
    run_example(run_python, *args, "--legacy_dynamics", "--continuous_actions")
    memories = [np.load(tmp_path / f"rpm_agent{i}.npz") for i in range(AGENTS)]
    replays = {}
    for legacy in (False, True):
        env = MAenv("simple_speaker_listener", True, legacy_dynamics=legacy)
        env.reset(seed=0)  # the example seeds episode k with --seed + k
        replays[legacy] = [
            env.step([memory["action"][t] for memory in memories])[0] for t in range(25)
        ]
    listener = 1
    stored = memories[listener]["next_obs"][:25]
    np.testing.assert_array_equal(np.stack([o[listener] for o in replays[True]]), stored)
    assert not np.array_equal(np.stack([o[listener] for o in replays[False]]), stored)
    script = REPO_ROOT / "examples" / "MADDPG" / "train.py"
    refused = {
        (): "written with --legacy_dynamics; this run is without --legacy_dynamics",
        ("--legacy_dynamics", "--time_limit_as_terminal"): "written without "
        "--time_limit_as_terminal; this run is with --time_limit_as_terminal",
    }
    for other, message in refused.items():
        argv = [str(script), "--no_progress", *args, "--continuous_actions", *other, "--resume"]
        proc = run_python(args=argv, timeout=180)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]


def test_maddpg_example_refuses_counts_it_cannot_run_with(run_python: RunPython) -> None:
    """A count of 0 stopped the run with a ZeroDivisionError or an IndexError, or (a batch of
    0) trained nothing for the whole run."""
    counts = ["--max_episodes", "--test_every_episodes", "--batch_size", "--learn_every"]
    assert_flags_refused(run_python, "MADDPG", [*counts, "--memory_size"])


def test_maddpg_example_refuses_a_warmup_the_memory_cannot_pass(run_python: RunPython) -> None:
    """Learning starts once a memory holds more than the warm-up: a ``--memory_size`` at or
    below it (PARL's warm-up is ``--batch_size * 25``) ran the whole budget without learning."""
    script = str(REPO_ROOT / "examples" / "MADDPG" / "train.py")
    proc = run_python(args=[script, "--memory_size", "1000"], timeout=120)
    assert proc.returncode == 2
    assert (
        "--memory_size 1000 holds no more than the warm-up of 25600 transitions (--batch_size "
        "* 25)" in proc.stderr
    ), proc.stderr[-2000:]
    proc = run_python(args=[script, "--memory_size", "100", "--warmup_size", "100"], timeout=120)
    assert proc.returncode == 2 and "warm-up of 100 transitions, so" in proc.stderr
