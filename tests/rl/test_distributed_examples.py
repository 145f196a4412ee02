"""The distributed examples (IMPALA, A2C with remote actors, ES), each run end to end in a fresh
interpreter with 2 local actors; a SIGKILLed actor stops training with ActorDiedError, never a
hang."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, RunPython

IMPALA_DIR = REPO_ROOT / "examples" / "IMPALA"
A2C_DIR = REPO_ROOT / "examples" / "A2C"
ES_DIR = REPO_ROOT / "examples" / "ES"


def _run_main(run_python: RunPython, folder: Path, args: list[str], timeout: float = 180) -> dict:
    code = f"""
import dataclasses, json, sys, torch
sys.path.insert(0, {str(folder)!r})
torch.set_num_threads(1)
import train
result = train.main({args!r})
print("RESULT" + json.dumps(dataclasses.asdict(result)))
"""
    proc = run_python(code, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT") :]) | {"log": proc.stdout + proc.stderr}


def _assert_time_breakdown(result: dict, learner_keys: set[str], logdir: Path) -> None:
    assert learner_keys <= set(result["learner_times"]), result["learner_times"]
    assert result["actor_times"]["sampling"] > 0, result["actor_times"]
    assert "learner time (of" in result["log"] and "actor time" in result["log"]
    assert list(logdir.glob("events.out.tfevents.*")), "no TensorBoard events written"


def test_impala_learns_cartpole_with_two_local_actors(
    run_python: RunPython, tmp_path: Path
) -> None:
    logdir = tmp_path / "impala"
    args = ["--actor_num", "2", "--max_sample_steps", "60000", "--test_every_steps", "10000",
            "--target_return", "475", "--logdir", str(logdir)]  # fmt: skip
    result = _run_main(run_python, IMPALA_DIR, args)
    best = max(mean for _, mean in result["history"])
    assert best >= 150, result["history"]  # a random policy scores about 22
    assert result["train_steps"] >= 1 and result["sample_steps"] >= 10000
    _assert_time_breakdown(result, {"waiting", "learning", "batching", "publishing"}, logdir)
    assert (logdir / "model.ckpt").exists()


KILL_SCRIPT = """
import os, signal, sys, time
sys.path.insert(0, {folder!r})
import torch
torch.set_num_threads(1)
import parl, train
config = {{**train.{config}, "seed": 0, "actor_num": 2, "logdir": {logdir!r}, **{extra!r}}}
learner = train.Learner(config)
for _ in range(2):
    learner.step()
pid = learner.actors[0].getpid()
pid = pid.get() if hasattr(pid, "get") else pid
os.kill(pid, signal.SIGKILL)
start = time.monotonic()
try:
    for _ in range(100000):
        learner.step()
    print("NO ERROR")
except parl.ActorDiedError as exc:
    print(f"DIED after {{time.monotonic() - start:.2f}} s: {{exc}}")
"""


@pytest.mark.parametrize(
    ("folder", "config", "extra"),
    [
        (IMPALA_DIR, "cartpole_config", {}),
        (A2C_DIR, "cartpole_config", {}),
        (ES_DIR, "cartpole_config", {"noise_size": 1_000_000}),
    ],
    ids=["IMPALA", "A2C", "ES"],
)
def test_killing_an_actor_stops_training_with_a_clear_error(
    run_python: RunPython, tmp_path: Path, folder: Path, config: str, extra: dict
) -> None:
    script = KILL_SCRIPT.format(
        folder=str(folder), config=config, logdir=str(tmp_path / "log"), extra=extra
    )
    proc = run_python(script, timeout=90)  # a hang fails here
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DIED after" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "actor 0 of 2 died" in proc.stdout
    seconds = float(proc.stdout.split("DIED after ")[1].split(" s")[0])
    assert seconds < 30, proc.stdout


def test_a2c_remote_actors_and_vector_env_modes_run_end_to_end(
    run_python: RunPython, tmp_path: Path
) -> None:
    common = ["--max_sample_steps", "2000", "--test_every_steps", "1000", "--no_progress"]
    result = _run_main(
        run_python, A2C_DIR, [*common, "--actor_num", "2", "--logdir", str(tmp_path / "a")]
    )
    assert result["sample_steps"] >= 2000 and len(result["history"]) == 2
    _assert_time_breakdown(result, {"waiting", "learning", "publishing"}, tmp_path / "a")
    local = _run_main(
        run_python,
        A2C_DIR,
        [*common, "--mode", "vector_env", "--actor_num", "0", "--logdir", str(tmp_path / "b")],
    )
    assert local["sample_steps"] >= 2000 and "sampling" in local["learner_times"]
    assert local["actor_times"] == {}


def test_es_runs_end_to_end_on_cartpole_and_halfcheetah(
    run_python: RunPython, tmp_path: Path
) -> None:
    small = ["--noise_size", "1000000", "--test_every_train_steps", "1", "--eval_episodes", "1"]
    result = _run_main(
        run_python,
        ES_DIR,
        ["--env", "CartPole-v1", "--train_steps", "3", *small, "--logdir", str(tmp_path / "c")],
    )
    assert result["train_steps"] == 3 and len(result["history"]) == 3
    assert result["sample_steps"] >= 3 * 2000  # min_steps_per_batch of the CartPole config
    _assert_time_breakdown(result, {"waiting", "learning", "obs_filter"}, tmp_path / "c")
    cheetah = _run_main(
        run_python,
        ES_DIR,
        ["--train_steps", "1", "--min_episodes_per_batch", "4", "--min_steps_per_batch", "2000",
         *small, "--logdir", str(tmp_path / "h")],
    )  # fmt: skip
    assert cheetah["train_steps"] == 1 and cheetah["sample_steps"] >= 4000  # 1,000-step episodes


@pytest.mark.parametrize("transport", ["shm", "values"])
def test_impala_and_a2c_run_a_gaussian_policy_on_halfcheetah(
    run_python: RunPython, tmp_path: Path, transport: str
) -> None:
    """MuJoCo: a Gaussian policy, float actions in the trajectory slots (or by value), and the
    model's observation statistics updated by the learner and saved with the checkpoint."""
    logdir = tmp_path / "impala"
    result = _run_main(
        run_python,
        IMPALA_DIR,
        ["--env", "HalfCheetah-v5", "--max_sample_steps", "1000", "--test_every_steps", "600",
         "--eval_episodes", "1", "--transport", transport, "--logdir", str(logdir)],
    )  # fmt: skip
    assert result["train_steps"] >= 10 and len(result["history"]) == 1
    _assert_time_breakdown(result, {"waiting", "learning", "batching", "publishing"}, logdir)
    code = f"""
import sys, torch
sys.path.insert(0, {str(IMPALA_DIR)!r})
from model import MujocoModel
state = torch.load({str(logdir / "model.ckpt")!r})
model = MujocoModel(17, 6)
model.load_state_dict(state)
print("COUNT", float(model.obs_norm.count), float(model.obs_norm.var.mean()))
"""
    proc = run_python(code, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    count, var = (float(x) for x in proc.stdout.split("COUNT")[1].split())
    assert count >= 10 * 64 and var != 1.0  # updated from every training batch
    if transport == "shm":
        a2c = _run_main(
            run_python,
            A2C_DIR,
            ["--env", "HalfCheetah-v5", "--max_sample_steps", "1500", "--test_every_steps",
             "1000", "--no_progress", "--logdir", str(tmp_path / "a2c")],
        )  # fmt: skip
        assert a2c["train_steps"] >= 20 and len(a2c["history"]) == 1
        _assert_time_breakdown(a2c, {"waiting", "learning", "publishing"}, tmp_path / "a2c")
