"""The off-policy examples: a stopped-and-resumed run equals a run straight through, a resume
takes only the replay memory written with its checkpoint, Ctrl-C waits until the checkpoint
and the memory are both written, the MuJoCo and Atari paths run, and a PARL 2.x-style DQN
script runs unchanged but for its gym import."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch

from .conftest import REPO_ROOT, RunPython

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


# The straight run and the first part of the stopped run need no fresh interpreter: both run in
# one, which then offers the stopped run's memory file, moved one step back (a kill between the
# two files), to a resume: refused. Each resume that trains runs in a fresh interpreter.
FIRST_PARTS = """
import sys
import numpy as np
sys.path.insert(0, {folder!r})
import train
args = ["--no_tqdm", *{args!r}]
train.main([*args, "--logdir", {straight!r}])
train.main([*args, "--save_rpm", "--logdir", {resumed!r}, "--stop_after_steps", {half!r}])
rpm = {resumed!r} + "/rpm.npz"
intact = open(rpm, "rb").read()
with np.load(rpm) as saved:
    arrays = dict(saved)
arrays["pos"] = arrays["pos"] - 1  # the memory one step earlier
np.savez(rpm, **arrays)
try:
    train.main([*args, "--save_rpm", "--logdir", {resumed!r}, "--resume"])
    print("NOT REFUSED")
except RuntimeError as exc:
    print("REFUSED", exc)
open(rpm, "wb").write(intact)
"""

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


@pytest.mark.parametrize("name", sorted(RESUME_RUNS))
def test_resume_equals_straight_run_and_takes_only_the_memory_of_its_checkpoint(
    name: str, run_python: RunPython, tmp_path: Path
) -> None:
    """A run stopped halfway with ``--save_rpm`` and resumed in a fresh interpreter ends with
    the weights of a run straight through. A memory file of another point of the run (a kill
    between the two files) is refused; one beside a checkpoint written without ``--save_rpm``
    (an earlier part's) is set aside."""
    args, half = RESUME_RUNS[name]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    code = FIRST_PARTS.format(
        folder=str(EXAMPLES / name), args=args, straight=str(straight), resumed=str(resumed),
        half=str(half),
    )  # fmt: skip
    proc = run_python(code, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done:" in proc.stderr and (resumed / "rpm.npz").is_file()
    assert "REFUSED" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "is not the memory written with the checkpoint" in proc.stdout, proc.stdout
    assert glob.glob(str(straight / "events.out.tfevents.*"))
    stopped = torch.load(resumed / "model.ckpt", weights_only=True)

    log = run_example(run_python, name, *args, "--save_rpm", "--logdir", str(resumed), "--resume")
    assert "resumed from" in log
    assert_same_weights(straight / "model.ckpt", resumed / "model.ckpt")
    final = torch.load(resumed / "model.ckpt", weights_only=True)
    assert any(not torch.equal(stopped[k], final[k]) for k in final)  # it did train on

    # the straight run wrote its checkpoint without --save_rpm: a memory file beside it is older
    (straight / "rpm.npz").write_bytes((resumed / "rpm.npz").read_bytes())
    total = int(args[args.index("--train_total_steps") + 1]) + 1
    log = run_example(run_python, name, *args, "--save_rpm", "--logdir", str(straight),
                      "--resume", "--train_total_steps", str(total))  # fmt: skip
    assert "is from an earlier checkpoint" in log and "resumed from" in log, log[-2000:]


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
        "PongNoFrameskip-v4",
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
    # more than this run's one Pong episode)
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
