"""The off-policy examples: a stopped-and-resumed run equals a run straight through, a resume
takes only the replay memory written with its checkpoint, Ctrl-C waits until the checkpoint
and the memory are both written, the MuJoCo and Atari paths run, and a PARL 2.x-style DQN
script runs unchanged but for its gym import."""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from .conftest import REPO_ROOT, RunPython
from .example_mains import run_mains, run_ok

pytestmark = pytest.mark.slow  # the example scripts, run for real

EXAMPLES = REPO_ROOT / "examples"


def run_example(run_python: RunPython, name: str, *args: str, timeout: float = 180) -> str:
    proc = run_python(args=[str(EXAMPLES / name / "train.py"), "--no_tqdm", *args], timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for blemish in ("Traceback", "Exception ignored"):  # what a user would see
        assert blemish not in proc.stderr, proc.stderr[-3000:]
    return proc.stderr


def assert_same_weights(first: Path, second: Path) -> None:
    a, b = torch.load(first, weights_only=True), torch.load(second, weights_only=True)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


PENDULUM = ["--env", "Pendulum-v1", "--warmup_steps", "100", "--hidden", "8",
            "--batch_size", "16"]  # fmt: skip
# a budget of two episodes (Pendulum's are 200 steps), stopped after the first
RESUME_RUNS = {
    "DQN": (["--learning_starts", "100", "--train_total_steps", "600", "--test_every_steps",
             "600", "--eval_episodes", "1", "--torch_threads", "1"], 300),
    "SAC": ([*PENDULUM, "--alpha", "auto"], 200),
    **{name: (PENDULUM, 200) for name in ("DDPG", "TD3", "OAC")},
}  # fmt: skip
for _name in ("SAC", "DDPG", "TD3", "OAC"):
    RESUME_RUNS[_name] = (
        [*RESUME_RUNS[_name][0], "--train_total_steps", "400", "--test_every_steps", "400",
         "--eval_episodes", "1", "--torch_threads", "1"],
        200,
    )  # fmt: skip


def test_resume_equals_straight_run_and_takes_only_the_memory_of_its_checkpoint(
    run_python: RunPython, tmp_path: Path
) -> None:
    """For each off-policy example: a run stopped halfway with ``--save_rpm`` and resumed in
    another interpreter than the one that stopped ends with the weights of a run straight
    through. A memory file of another point of the run (a kill between the two files) is
    refused; one beside a checkpoint written without ``--save_rpm`` (an earlier part's) is set
    aside. The straight runs and the first parts run in one interpreter, the resumes in a
    second, each example's own modules imported afresh."""
    names = sorted(RESUME_RUNS)
    kinds = ("straight", "resumed", "shifted", "older")
    dirs = {name: {kind: tmp_path / name / kind for kind in kinds} for name in names}
    first: list[tuple[str, list[str]]] = []
    for name in names:
        args, half = RESUME_RUNS[name]
        first.append((name, ["--no_tqdm", *args, "--logdir", str(dirs[name]["straight"])]))
        first.append((name, ["--no_tqdm", *args, "--save_rpm", "--logdir",
                             str(dirs[name]["resumed"]), "--stop_after_steps", str(half)]))  # fmt: skip
    run_ok(run_python, first)

    stopped = {}
    for name in names:
        straight, resumed, shifted, older = dirs[name].values()
        assert (resumed / "rpm.npz").is_file() and glob.glob(
            str(straight / "events.out.tfevents.*")
        )
        stopped[name] = torch.load(resumed / "model.ckpt", weights_only=True)
        # the stopped run as a kill between the two files leaves it: the memory one step earlier
        shutil.copytree(resumed, shifted)
        with np.load(shifted / "rpm.npz") as saved:
            arrays = dict(saved)
        arrays["pos"] = arrays["pos"] - 1
        np.savez(shifted / "rpm.npz", **arrays)
        # the straight run wrote its checkpoint without --save_rpm: a memory file beside it is older
        shutil.copytree(straight, older)
        shutil.copy(resumed / "rpm.npz", older / "rpm.npz")

    second: list[tuple[str, list[str]]] = []
    for name in names:  # the resume that trains first, in an interpreter that ran nothing of it
        args, _ = RESUME_RUNS[name]
        straight, resumed, shifted, older = dirs[name].values()
        total = int(args[args.index("--train_total_steps") + 1]) + 1
        second.append(
            (name, ["--no_tqdm", *args, "--save_rpm", "--logdir", str(resumed), "--resume"])
        )
        second.append(
            (name, ["--no_tqdm", *args, "--save_rpm", "--logdir", str(shifted), "--resume"])
        )
        second.append((name, ["--no_tqdm", *args, "--save_rpm", "--logdir", str(older),
                              "--resume", "--train_total_steps", str(total)]))  # fmt: skip
    runs = run_mains(run_python, second)
    for k, name in enumerate(names):
        resume, shifted, older = runs[3 * k : 3 * k + 3]
        assert resume.code == 0 and "resumed from" in resume.log, resume.log[-3000:]
        assert "Traceback" not in resume.log, resume.log[-3000:]
        assert_same_weights(
            dirs[name]["straight"] / "model.ckpt", dirs[name]["resumed"] / "model.ckpt"
        )
        final = torch.load(dirs[name]["resumed"] / "model.ckpt", weights_only=True)
        assert any(not torch.equal(stopped[name][key], final[key]) for key in final), name
        assert shifted.code == 1, shifted.log[-3000:]
        assert "is not the memory written with the checkpoint" in shifted.log, shifted.log[-3000:]
        assert older.code == 0, older.log[-3000:]
        assert "is from an earlier checkpoint" in older.log and "resumed from" in older.log, (
            older.log[-2000:]
        )


def test_ddpg_on_mujoco_v5(run_python: RunPython, tmp_path: Path) -> None:
    log = run_example(
        run_python,
        "DDPG",
        "--env",
        "InvertedPendulum-v5",
        "--train_total_steps",
        "300",
        "--warmup_steps",
        "100",
        "--test_every_steps",
        "200",
        "--hidden",
        "32",
        "--logdir",
        str(tmp_path / "ddpg"),
    )
    assert "evaluation over 5 episodes" in log


def test_dqn_on_atari(run_python: RunPython, tmp_path: Path) -> None:
    log = run_example(
        run_python,
        "DQN",
        "--env",
        "BreakoutNoFrameskip-v4",  # a Pong game lasts 800+ steps, Breakout's lives a few dozen
        "--train_total_steps",
        "200",
        "--test_every_steps",
        "100000",
        "--eval_episodes",
        "1",
        "--algo",
        "DDQN",
        "--dueling",
        "--learning_starts",
        "100",
        "--memory_size",
        "500",
        "--logdir",
        str(tmp_path / "atari"),
        timeout=240,
    )
    assert "evaluation return" in log
    state = torch.load(tmp_path / "atari" / "model.ckpt", weights_only=True)
    assert state["conv.0.weight"].shape == (32, 4, 8, 8) and "head.value.weight" in state
    # updates ran from the 100th step on (--learning_starts; the preset waits 100,000 steps,
    # more than this whole run)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "atari"), size_guidance={"scalars": 0})
    events.Reload()
    steps = [event.step for event in events.Scalars("train/loss")]
    assert steps and min(steps) > 100


def test_parl2_style_dqn_script_runs(run_python: RunPython, tmp_path: Path) -> None:
    script = Path(__file__).parent / "parl2_scripts" / "dqn_cartpole.py"
    proc = run_python(args=[str(script), "--max_episode", "10"], timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Test reward" in proc.stderr and "final test reward" in proc.stdout
    assert (tmp_path / "model.ckpt").is_file()


SAVE_WITH_CTRL_C = """
import os, signal, sys, threading, time, types
import gymnasium as gym
# Ctrl-C as in a terminal, whatever the test runner left (a background job ignores it)
signal.signal(signal.SIGINT, signal.default_int_handler)
# another thread, as torch and tqdm start: the signal may be delivered to it
threading.Thread(target=threading.Event().wait, daemon=True).start()
env = gym.make("Pendulum-v1")
env.reset(seed=0)
for name in {names!r}:
    sys.path.insert(0, os.path.join({examples!r}, name))
    sys.modules.pop("train", None)  # each example's own train.py
    import train
    sys.path.pop(0)
    written = []

    def save_checkpoint(path, counters, extra):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the checkpoint is written
        written.append("checkpoint")

    agent = types.SimpleNamespace(alg=object(), e_greed=0.1, save_checkpoint=save_checkpoint)
    memory = types.SimpleNamespace(save=lambda path: written.append("memory"),
                                   stamp=lambda: [0, 0])
    args = types.SimpleNamespace(logdir=os.path.join({logdir!r}, name), save_rpm=True)
    try:
        train.save_checkpoint(args, agent, memory, env, {{"total_steps": 1}})
        time.sleep(10)  # a Ctrl-C whose handler ran after the block (on a busy machine)
        print(name, "not interrupted")
    except KeyboardInterrupt:
        print(name, "interrupted after:", written)
"""

CTRL_C_EXAMPLES = ["DDPG", "DQN", "OAC", "SAC", "TD3"]


def test_examples_hold_ctrl_c_until_the_checkpoint_and_memory_are_written(
    run_python: RunPython, tmp_path: Path
) -> None:
    """Each example's ``save_checkpoint``, in one interpreter, its own ``train`` module each."""
    code = SAVE_WITH_CTRL_C.format(
        names=CTRL_C_EXAMPLES, examples=str(EXAMPLES), logdir=str(tmp_path)
    )
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        f"{name} interrupted after: ['checkpoint', 'memory']" for name in CTRL_C_EXAMPLES
    ], proc.stdout + proc.stderr[-2000:]
