"""The PPO and A2C examples, each run in a fresh interpreter (their module names would collide):
PPO learns CartPole within a bounded budget at a fixed seed (a threshold guard), same seed same
result, resumable checkpoints, and smoke runs on MuJoCo and Atari (A2C's with remote actors
on Pong)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, RunPython

pytestmark = pytest.mark.slow  # the example scripts, run for real

PPO_DIR = REPO_ROOT / "examples" / "PPO"
A2C_DIR = REPO_ROOT / "examples" / "A2C"


def _run_main(run_python: RunPython, folder: Path, args: list[str], timeout: float = 240) -> dict:
    """``train.main(args)`` of the example in ``folder``; returns its result as a dict."""
    code = f"""
import dataclasses, json, sys, torch
sys.path.insert(0, {str(folder)!r})
torch.set_num_threads(1)
import train
result = train.main({args!r})
out = dataclasses.asdict(result) if dataclasses.is_dataclass(result) else {{"history": result}}
print("RESULT" + json.dumps(out))
"""
    proc = run_python(code, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT") :])


@pytest.mark.threshold
def test_threshold_ppo_learns_cartpole_within_a_bounded_budget(
    run_python: RunPython, tmp_path: Path
) -> None:
    result = _run_main(
        run_python,
        PPO_DIR,
        [
            "--train_total_steps",
            "40960",
            "--test_every_steps",
            "5120",
            "--target_return",
            "475",
            "--stop_at_target",
            "--no_progress",
            "--logdir",
            str(tmp_path / "ppo"),
        ],
    )
    assert result["steps_to_target"] is not None, result["eval_history"]
    assert result["steps_to_target"] <= 40960
    assert (tmp_path / "ppo" / "checkpoint.pt").exists()
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "ppo").iterdir())


def test_ppo_same_seed_same_result_and_resume(run_python: RunPython, tmp_path: Path) -> None:
    """Two runs of one seed in two interpreters end with the same evaluations and parameters;
    the first, resumed in the second interpreter (which did not run it) with a larger budget,
    continues from its checkpoint's step."""
    args = ["--train_total_steps", "1024", "--test_every_steps", "512", "--eval_episode", "2",
            "--no_progress", "--seed", "3"]  # fmt: skip
    first = _run_main(run_python, PPO_DIR, [*args, "--logdir", str(tmp_path / "a")])
    # the second run, the comparison of the two checkpoints and the resume in one interpreter
    resume = [*args, "--train_total_steps", "2048", "--resume", "--logdir", str(tmp_path / "a")]
    code = f"""
import dataclasses, json, sys, torch
sys.path.insert(0, {str(PPO_DIR)!r})
torch.set_num_threads(1)
import train
result = train.main({[*args, "--logdir", str(tmp_path / "b")]!r})
print("RESULT" + json.dumps(dataclasses.asdict(result)))
a = torch.load({str(tmp_path / "a" / "checkpoint.pt")!r}, weights_only=False)
b = torch.load({str(tmp_path / "b" / "checkpoint.pt")!r}, weights_only=False)
def tensors(state):
    found = []
    def walk(x):
        if torch.is_tensor(x): found.append(x)
        elif isinstance(x, dict): [walk(v) for v in x.values()]
        elif isinstance(x, (list, tuple)): [walk(v) for v in x]
    walk(state["models"])
    return found
ta, tb = tensors(a), tensors(b)
assert ta and len(ta) == len(tb) and all(torch.equal(x, y) for x, y in zip(ta, tb))
print("same")
resumed = train.main({resume!r})
print("RESUMED" + json.dumps(dataclasses.asdict(resumed)))
"""
    proc = run_python(code)
    assert proc.returncode == 0 and "same" in proc.stdout, proc.stderr[-2000:]
    for blemish in ("Traceback", "Exception ignored"):
        assert blemish not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    second = json.loads([ln for ln in lines if ln.startswith("RESULT")][-1][len("RESULT") :])
    assert first["eval_history"] == second["eval_history"]
    resumed = json.loads([ln for ln in lines if ln.startswith("RESUMED")][-1][len("RESUMED") :])
    assert [steps for steps, _ in resumed["eval_history"]] == [1536, 2048]  # first after 1024
    assert resumed["total_steps"] == 2048


def test_ppo_example_smoke_on_mujoco(run_python: RunPython, tmp_path: Path) -> None:
    proc = run_python(
        args=[
            str(PPO_DIR / "train.py"),
            "--env",
            "HalfCheetah-v5",
            "--continuous_action",
            "--train_total_steps",
            "2048",
            "--eval_episode",
            "1",
            "--no_progress",
            "--logdir",
            str(tmp_path / "cheetah"),
        ],
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "evaluation over 1 episodes" in proc.stderr + proc.stdout


def test_ppo_example_on_atari_without_evaluation(run_python: RunPython, tmp_path: Path) -> None:
    """PARL's Atari configuration on Breakout (the Nature CNN on 84x84 frames), one update;
    ``--eval_episodes 0`` skips the greedy evaluation and still saves the checkpoint (a negative
    count is refused with the other usage errors, in ``test_example_flags.py``)."""
    logdir = tmp_path / "breakout"
    result = _run_main(
        run_python,
        PPO_DIR,
        ["--env", "BreakoutNoFrameskip-v4", "--env_num", "2", "--train_total_steps", "256",
         "--eval_episodes", "0", "--no_progress", "--logdir", str(logdir)],
    )  # fmt: skip
    assert result["eval_history"] == [] and result["total_steps"] == 256
    assert (logdir / "checkpoint.pt").exists()
    assert any(p.name.startswith("events.out.tfevents") for p in logdir.iterdir())


def test_a2c_example_smoke_on_atari_with_env_actors(run_python: RunPython, tmp_path: Path) -> None:
    """docs/algorithms/a2c.md's ``examples/A2C/train.py --env PongNoFrameskip-v4`` starts (the
    Atari ids are registered before the env is made) and samples every step it was given."""
    result = _run_main(
        run_python,
        A2C_DIR,
        [
            "--env",
            "PongNoFrameskip-v4",
            "--actor_num",
            "2",
            "--env_num",
            "2",
            "--max_sample_steps",
            "80",
            "--test_every_steps",
            "1000000",
            "--no_progress",
            "--logdir",
            str(tmp_path / "pong"),
        ],
    )
    assert result["history"] == [] and result["sample_steps"] == 80
    assert (tmp_path / "pong" / "model.ckpt").exists()
