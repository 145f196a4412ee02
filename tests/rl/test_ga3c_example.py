"""The GA3C example with real simulator processes: it trains end to end on CartPole with 2
local simulators and reports where the time went; its predictor answers several simulators in
one batch, serves them oldest call first (none starved) and never waits for a straggler; an
env it cannot run is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, RunPython
from .test_distributed_examples import _run_main

pytestmark = pytest.mark.slow  # the example, on worker processes

GA3C_DIR = REPO_ROOT / "examples" / "GA3C"


def test_ga3c_runs_end_to_end_with_two_local_simulators(
    run_python: RunPython, tmp_path: Path
) -> None:
    logdir = tmp_path / "ga3c"
    args = ["--actor_num", "2", "--max_sample_steps", "2000", "--test_every_steps", "1000",
            "--eval_episodes", "2", "--no_progress", "--logdir", str(logdir)]  # fmt: skip
    result = _run_main(run_python, GA3C_DIR, args)
    assert result["sample_steps"] >= 2000 and len(result["history"]) == 2
    assert result["train_steps"] == result["sample_steps"] // 128  # whole batches of 128 steps
    learner_keys = {"waiting", "predicting", "training", "batching", "evaluating"}
    assert learner_keys <= set(result["learner_times"]), result["learner_times"]
    assert result["actor_times"]["simulating"] > 0, result["actor_times"]
    assert result["actor_times"]["waiting for a prediction"] > 0, result["actor_times"]
    assert "learner time (of" in result["log"] and "simulator time, 2 simulators" in result["log"]
    predictor = result["predictor"]
    # every step of every env was predicted for once (the first observations too)
    assert predictor["batches"] * predictor["mean_batch_size"] >= result["sample_steps"] + 8
    assert 4 <= predictor["mean_batch_size"] <= 16, predictor  # one or two requests of 4
    assert "mean batch" in result["log"]
    assert list(logdir.glob("events.out.tfevents.*")), "no TensorBoard events written"
    assert (logdir / "model.ckpt").exists() and (logdir / "checkpoint.pt").exists()


BATCHING_SCRIPT = """
import json, sys, torch
sys.path.insert(0, {folder!r})
torch.set_num_threads(1)
import train
config = {{**train.cartpole_config, "seed": 0, "actor_num": {actors}, "env_num": 2,
          "max_predict_batch_size": {max_batch}, "logdir": {logdir!r}}}
learner = train.Learner(config)
try:
    for _ in range(300):
        learner.step()
finally:
    learner.close()
print("STATS" + json.dumps({{**learner.predictor.stats(), "served": learner.predictor.served}}))
"""


def _batching(run_python: RunPython, tmp_path: Path, actors: int, max_batch: int) -> dict:
    script = BATCHING_SCRIPT.format(
        folder=str(GA3C_DIR), actors=actors, max_batch=max_batch, logdir=str(tmp_path / "log")
    )
    proc = run_python(script, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("STATS")][-1]
    return json.loads(line[len("STATS") :])


def test_predictor_answers_several_simulators_in_one_batch(
    run_python: RunPython, tmp_path: Path
) -> None:
    """Room for every request (3 simulators of 2 envs, batches of up to 16 observations): the
    simulators that have answered share one forward pass, and a request that has arrived is
    answered by the next batch (passed over 0 times)."""
    stats = _batching(run_python, tmp_path, actors=3, max_batch=16)
    assert stats["max_requests"] >= 2, stats  # several simulators in one batch
    assert stats["mean_requests"] > 1.0, stats
    assert stats["max_wait"] == 0, stats
    assert stats["mean_batch_size"] <= 6, stats  # whole requests of 2 observations
    assert sum(stats["served"]) == stats["batches"] * stats["mean_requests"]


def test_predictor_serves_the_oldest_call_first_and_starves_none(
    run_python: RunPython, tmp_path: Path
) -> None:
    """Room for 2 of 3 requests per batch: a request may be passed over once (the two ahead of
    it fill the batch), never twice, since the simulators just answered go behind it; every
    simulator is served about as often as the others."""
    stats = _batching(run_python, tmp_path, actors=3, max_batch=4)
    assert stats["max_requests"] == 2, stats  # the cap: 4 observations, whole requests of 2
    assert stats["max_wait"] <= 1, stats
    served = stats["served"]
    assert min(served) >= 0.8 * max(served), served


def test_an_env_of_no_supported_kind_is_named(run_python: RunPython, tmp_path: Path) -> None:
    proc = run_python(
        args=[str(GA3C_DIR / "train.py"), "--env", "Pendulum-v1", "--logdir", str(tmp_path)],
        timeout=60,
    )
    assert proc.returncode != 0
    assert "ValueError: GA3C's example runs CartPole and Atari" in proc.stderr, proc.stderr
    assert "Pendulum-v1 (gymnasium.envs.classic_control" in proc.stderr
