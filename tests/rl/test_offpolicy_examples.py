"""The off-policy examples: a stopped-and-resumed run equals a run straight through, the MuJoCo
and Atari paths run, and a PARL 2.x-style DQN script runs unchanged but for its gym import."""

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
    return proc.stderr


def assert_same_weights(first: Path, second: Path) -> None:
    a, b = torch.load(first, weights_only=True), torch.load(second, weights_only=True)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def resume_case(
    run_python: RunPython, tmp_path: Path, name: str, args: list[str], half: int
) -> None:
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_example(run_python, name, *args, "--logdir", str(straight))
    log = run_example(
        run_python, name, *args, "--logdir", str(resumed), "--stop_after_steps", str(half)
    )
    assert "done:" in log and (resumed / "rpm.npz").is_file()
    stopped = torch.load(resumed / "model.ckpt", weights_only=True)
    log = run_example(run_python, name, *args, "--logdir", str(resumed), "--resume")
    assert "resumed from" in log
    assert_same_weights(straight / "model.ckpt", resumed / "model.ckpt")
    final = torch.load(resumed / "model.ckpt", weights_only=True)
    assert any(not torch.equal(stopped[k], final[k]) for k in final)  # it did train on
    assert glob.glob(str(straight / "events.out.tfevents.*"))


def test_dqn_resume_equals_straight_run(run_python: RunPython, tmp_path: Path) -> None:
    args = [
        "--train_total_steps",
        "2400",
        "--test_every_steps",
        "800",
        "--eval_episodes",
        "2",
        "--save_rpm",
    ]
    resume_case(run_python, tmp_path, "DQN", args, half=1300)


@pytest.mark.parametrize("name", ["SAC", "TD3", "OAC"])
def test_actor_critic_resume_equals_straight_run(
    name: str, run_python: RunPython, tmp_path: Path
) -> None:
    args = [
        "--env",
        "Pendulum-v1",
        "--train_total_steps",
        "600",
        "--warmup_steps",
        "200",
        "--test_every_steps",
        "300",
        "--hidden",
        "32",
        "--batch_size",
        "32",
        "--save_rpm",
    ]
    if name == "SAC":
        args += ["--alpha", "auto"]
    resume_case(run_python, tmp_path, name, args, half=400)


PENDULUM = ["--env", "Pendulum-v1", "--train_total_steps", "600", "--warmup_steps", "200",
            "--test_every_steps", "300", "--hidden", "32", "--batch_size", "32"]  # fmt: skip
SHORT_RUNS = {
    "DQN": ["--train_total_steps", "1600", "--test_every_steps", "800", "--eval_episodes", "2"],
    **{name: PENDULUM for name in ("DDPG", "TD3", "SAC", "OAC")},
}


@pytest.mark.parametrize("name", sorted(SHORT_RUNS))
def test_resume_takes_only_the_memory_written_with_the_checkpoint(
    name: str, run_python: RunPython, tmp_path: Path
) -> None:
    """A memory file of another point of the run (a kill between the two files) is refused; one
    left by an earlier part when the last part ran without --save_rpm is set aside."""
    import numpy as np

    args, logdir = SHORT_RUNS[name], str(tmp_path / "run")
    half = str(int(args[args.index("--train_total_steps") + 1]) // 2)
    run_example(
        run_python, name, *args, "--save_rpm", "--logdir", logdir, "--stop_after_steps", half
    )
    rpm = tmp_path / "run" / "rpm.npz"
    intact = rpm.read_bytes()
    with np.load(rpm) as saved:
        arrays = dict(saved)
    arrays["pos"] = arrays["pos"] - 1  # the memory one step earlier
    np.savez(rpm, **arrays)
    script = str(EXAMPLES / name / "train.py")
    proc = run_python(args=[script, "--no_tqdm", *args, "--save_rpm", "--logdir", logdir,
                            "--resume"], timeout=180)  # fmt: skip
    assert proc.returncode != 0
    assert "is not the memory written with the checkpoint" in proc.stderr, proc.stderr[-2000:]

    rpm.write_bytes(intact)  # a part without --save_rpm leaves it behind, now older
    run_example(run_python, name, *args, "--logdir", logdir, "--resume")
    log = run_example(run_python, name, *args, "--save_rpm", "--logdir", logdir, "--resume",
                      "--train_total_steps", str(2 * int(half) + 300))  # fmt: skip
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
sys.path.insert(0, {folder!r})
import train
# Ctrl-C as in a terminal, whatever the test runner left (a background job ignores it)
signal.signal(signal.SIGINT, signal.default_int_handler)
# another thread, as torch and tqdm start: the signal may be delivered to it
threading.Thread(target=threading.Event().wait, daemon=True).start()
written = []

def save_checkpoint(path, counters, extra):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the checkpoint is written
    written.append("checkpoint")

agent = types.SimpleNamespace(alg=object(), e_greed=0.1, save_checkpoint=save_checkpoint)
memory = types.SimpleNamespace(save=lambda path: written.append("memory"), stamp=lambda: [0, 0])
env = gym.make("Pendulum-v1")
env.reset(seed=0)
args = types.SimpleNamespace(logdir={logdir!r}, save_rpm=True)
try:
    train.save_checkpoint(args, agent, memory, env, {{"total_steps": 1}})
    time.sleep(10)  # a Ctrl-C whose handler ran after the block (on a busy machine)
except KeyboardInterrupt:
    print("interrupted after:", written)
"""


@pytest.mark.parametrize("name", ["OAC", "SAC", "TD3", "DDPG", "DQN"])
def test_example_holds_ctrl_c_until_the_checkpoint_and_memory_are_written(
    run_python: RunPython, tmp_path: Path, name: str
) -> None:
    code = SAVE_WITH_CTRL_C.format(folder=str(EXAMPLES / name), logdir=str(tmp_path))
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "interrupted after: ['checkpoint', 'memory']" in proc.stdout


def test_dqn_refuses_a_negative_stop(run_python: RunPython, tmp_path: Path) -> None:
    """A negative --stop_after_steps would train no step and write the untrained model over
    the run's."""
    script = str(EXAMPLES / "DQN" / "train.py")
    proc = run_python(args=[script, "--stop_after_steps", "-1", "--logdir", str(tmp_path)])
    assert proc.returncode == 2
    assert "--stop_after_steps must be 0 (never) or more, got -1" in proc.stderr, proc.stderr
    assert not (tmp_path / "model.ckpt").exists()
