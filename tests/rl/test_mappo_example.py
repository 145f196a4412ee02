"""The MAPPO example (``examples/MAPPO``) on MPE's ``simple_speaker_listener``, run in a fresh
interpreter: it learns within a few thousand steps at a fixed seed, the same seed gives the same
run, and a run resumed from its checkpoints ends where a straight run does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, RunPython
from .multiagent_support import assert_flags_refused, require_multiagent

require_multiagent()  # a failure under CI=true, where the extra is installed
pytestmark = pytest.mark.slow  # the example script, run for real

MAPPO_DIR = REPO_ROOT / "examples" / "MAPPO"
SMALL = ["--env_num", "4", "--num_workers", "1", "--ppo_epoch", "3", "--no_progress"]


def _run_mains(run_python: RunPython, runs: list[list[str]], timeout: float = 240) -> list[dict]:
    """``train.main(args)`` of the example for each ``args`` in one interpreter; their results."""
    code = f"""
import dataclasses, json, sys, torch
sys.path.insert(0, {str(MAPPO_DIR)!r})
torch.set_num_threads(1)
import train
for args in {runs!r}:
    print("RESULT" + json.dumps(dataclasses.asdict(train.main(args))))
"""
    proc = run_python(code, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    return [json.loads(line[len("RESULT") :]) for line in lines]


def test_mappo_example_learns_speaker_listener(run_python: RunPython, tmp_path: Path) -> None:
    (result,) = _run_mains(
        run_python,
        [
            ["--train_total_steps", "6000", "--test_every_steps", "6000", "--env_num", "16"]
            + ["--num_workers", "1", "--eval_episodes", "3", "--no_progress", "--seed", "0"]
            + ["--logdir", str(tmp_path / "run")]
        ],
    )
    returns = result["train_returns"]
    assert len(returns) == 15 and result["total_steps"] == 6000
    # random speakers and listeners score about -50 per episode; 15 updates halve that
    first, last = sum(returns[:3]) / 3, sum(returns[-3:]) / 3
    assert last > first + 10.0, returns
    assert (tmp_path / "run" / "checkpoint_agent1.pt").exists()
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "run").iterdir())


def test_mappo_example_same_seed_same_run_and_resumed_equals_straight(
    run_python: RunPython, tmp_path: Path
) -> None:
    def args(steps: int, logdir: str, *extra: str) -> list[str]:
        common = ["--test_every_steps", "200", "--eval_episodes", "2", "--seed", "5"]
        return [*SMALL, *common, "--train_total_steps", str(steps), "--logdir", logdir, *extra]

    folders = {name: str(tmp_path / name) for name in ("straight", "again", "resumed")}
    straight, again, first_half, resumed = _run_mains(
        run_python,
        [
            args(400, folders["straight"]),
            args(400, folders["again"]),
            args(200, folders["resumed"]),
            args(400, folders["resumed"], "--resume"),
        ],
    )
    assert straight["eval_history"] == again["eval_history"]
    assert [steps for steps, _ in straight["eval_history"]] == [200, 400]
    assert first_half["eval_history"] == straight["eval_history"][:1]
    assert resumed["eval_history"] == straight["eval_history"]
    assert resumed["train_returns"] == straight["train_returns"][2:]  # the updates it ran
    code = f"""
import torch
def tensors(path):
    state = torch.load(path, weights_only=False)
    found = []
    def walk(x):
        if torch.is_tensor(x): found.append(x)
        elif isinstance(x, dict): [walk(v) for v in x.values()]
        elif isinstance(x, (list, tuple)): [walk(v) for v in x]
    walk(state["models"]); walk(state["optimizers"])
    return found
for agent in (0, 1):
    runs = [tensors(f"{{folder}}/checkpoint_agent{{agent}}.pt") for folder in {list(folders.values())!r}]
    assert runs[0] and all(len(r) == len(runs[0]) for r in runs)
    for other in runs[1:]:
        assert all(torch.equal(x, y) for x, y in zip(runs[0], other))
print("same")
"""
    proc = run_python(code)
    assert proc.returncode == 0 and "same" in proc.stdout, proc.stderr[-2000:]


def test_mappo_example_legacy_dynamics_reach_the_actors_envs_and_a_resume_keeps_them(
    run_python: RunPython, tmp_path: Path
) -> None:
    """``--legacy_dynamics`` travels to the envs the actors build: the first rollout, which the
    same untrained policies act in, scores otherwise; resuming without the flag is refused."""
    common = [*SMALL, "--train_total_steps", "100", "--test_every_steps", "100", "--seed", "3"]
    common += ["--eval_episodes", "1"]
    legacy, plain = _run_mains(
        run_python,
        [
            [*common, "--legacy_dynamics", "--logdir", str(tmp_path / "legacy")],
            [*common, "--logdir", str(tmp_path / "plain")],
        ],
    )
    assert legacy["train_returns"][0] != plain["train_returns"][0]
    argv = [str(MAPPO_DIR / "train.py"), *common, "--logdir", str(tmp_path / "legacy")]
    # without the flag, and with another value of a flag that takes one
    proc = run_python(args=[*argv, "--resume", "--use_popart", "False"], timeout=180)
    assert proc.returncode != 0
    assert (
        "written with --legacy_dynamics and with --use_popart True; this run is without "
        "--legacy_dynamics and with --use_popart False" in proc.stderr
    ), proc.stderr[-2000:]


def test_mappo_example_refuses_observations_and_actions_of_another_agent_count(
    run_python: RunPython,
) -> None:
    code = f"""
import sys, types
import numpy as np
sys.path.insert(0, {str(MAPPO_DIR)!r})
import train
envs = types.SimpleNamespace(
    obs_shape_n=[3, 11], act_shape_n=[3, 5], n_agents=2, state_shape=14, num_envs=4
)
team = train.Team(train.Config(), envs, episode_length=25)
for call, args in ((team.split, (np.zeros((4, 3, 11)), np.zeros((4, 14)))),
                   (team.env_actions, ([np.zeros((4, 1))],))):
    try:
        call(*args)
    except ValueError as exc:
        print("ERROR", exc)
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERROR the envs report 3 agents per env, but the team has 2" in proc.stdout
    assert "ERROR got actions of 1 agents, the team has 2" in proc.stdout


def test_mappo_example_runs_continuous_actions_and_without_the_papers_switches(
    run_python: RunPython, tmp_path: Path
) -> None:
    common = [*SMALL, "--train_total_steps", "100", "--test_every_steps", "100"]
    continuous, plain = _run_mains(
        run_python,
        [
            [*common, "--eval_episodes", "1", "--continuous_actions"]
            + ["--logdir", str(tmp_path / "continuous")],
            [*common, "--eval_episodes", "1", "--use_popart", "False", "--use_centralized_V"]
            + ["False", "--use_value_active_masks", "False", "--logdir", str(tmp_path / "plain")],
        ],
    )
    for result in (continuous, plain):
        assert result["total_steps"] == 100 and len(result["eval_history"]) == 1


def test_mappo_example_resume_refuses_checkpoint_files_from_different_points(
    run_python: RunPython, tmp_path: Path
) -> None:
    """Checkpoint files of two updates (a run killed while it wrote them) make ``--resume``
    stop with a clear error, not train on from a team mixed from two points of the run."""
    logdir = str(tmp_path / "run")
    args = [*SMALL, "--test_every_steps", "100", "--eval_episodes", "0", "--logdir", logdir]
    _run_mains(run_python, [[*args, "--train_total_steps", "100"]])
    code = f"""
import sys, torch
sys.path.insert(0, {str(MAPPO_DIR)!r})
import train
path = {logdir!r} + "/checkpoint_agent1.pt"
payload = torch.load(path, weights_only=False)
payload["counters"]["update"] = 7  # as if this file were from another point of the run
torch.save(payload, path)
try:
    train.main({[*args, "--train_total_steps", "200", "--resume"]!r})
except RuntimeError as exc:
    print("REFUSED", exc)
"""
    proc = run_python(code, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REFUSED the checkpoint files in" in proc.stdout, proc.stdout[-2000:]


def test_mappo_example_says_why_a_resumed_finished_run_has_no_evaluation(
    run_python: RunPython, tmp_path: Path
) -> None:
    """A run that ended with ``--eval_episodes 0``, resumed with evaluations: nothing is left
    to train or evaluate, and the closing line does not blame this run's ``--eval_episodes``."""
    logdir = str(tmp_path / "run")
    args = [*SMALL, "--train_total_steps", "50", "--test_every_steps", "50", "--logdir", logdir]
    _run_mains(run_python, [[*args, "--eval_episodes", "0"]])
    argv = [str(MAPPO_DIR / "train.py"), *args, "--eval_episodes", "1", "--resume"]
    proc = run_python(args=argv, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no evaluation (the run it resumed had finished without any" in proc.stderr
    assert "--eval_episodes 0" not in proc.stderr


def test_mappo_example_refuses_to_resume_on_another_env(
    run_python: RunPython, tmp_path: Path
) -> None:
    """simple_tag has four agents where simple_spread has three: the resume is refused by
    ``--env`` instead of starting afresh over the three checkpoint files it finds."""
    logdir = tmp_path / "run"
    args = [*SMALL, "--train_total_steps", "50", "--test_every_steps", "50", "--eval_episodes"]
    args += ["1", "--logdir", str(logdir)]
    _run_mains(run_python, [[*args, "--env", "simple_spread"]])
    written = (logdir / "checkpoint_agent0.pt").read_bytes()
    argv = [str(MAPPO_DIR / "train.py"), *args, "--env", "simple_tag", "--resume"]
    proc = run_python(args=argv, timeout=180)
    assert proc.returncode != 0
    assert "written with --env simple_spread; this run is with --env simple_tag" in proc.stderr, (
        proc.stderr[-2000:]
    )
    assert (logdir / "checkpoint_agent0.pt").read_bytes() == written
    assert not (logdir / "checkpoint_agent3.pt").exists()


def test_mappo_example_refuses_to_resume_with_another_number_of_envs(
    run_python: RunPython, tmp_path: Path
) -> None:
    """The updates done counted ``--env_num`` episodes each: with another number, the resume
    would count them at its own and end before it trained (or seed rollouts the run had
    already had). A checkpoint that does not record the number gets it from its counters."""
    logdir = tmp_path / "run"
    args = [*SMALL, "--train_total_steps", "200", "--test_every_steps", "200", "--eval_episodes"]
    args += ["0", "--logdir", str(logdir)]
    _run_mains(run_python, [args])  # SMALL has 4 envs: 2 updates of 100 steps
    argv = [str(MAPPO_DIR / "train.py"), *args, "--env_num", "8", "--train_total_steps", "400"]
    proc = run_python(args=[*argv, "--resume"], timeout=180)
    assert proc.returncode != 0
    refusal = "written with --env_num 4; this run is with --env_num 8"
    assert refusal in proc.stderr, proc.stderr[-2000:]
    code = f"""
import torch
for agent in (0, 1):
    path = {str(logdir)!r} + f"/checkpoint_agent{{agent}}.pt"
    payload = torch.load(path, weights_only=False)
    del payload["extra"]["env_num"]  # as a checkpoint written before it was recorded
    torch.save(payload, path)
"""
    assert run_python(code).returncode == 0
    proc = run_python(args=[*argv, "--resume"], timeout=180)
    assert proc.returncode != 0 and refusal in proc.stderr, proc.stderr[-2000:]


def test_mappo_example_refuses_more_minibatches_than_rows_before_it_starts(
    run_python: RunPython, tmp_path: Path
) -> None:
    """A rollout of 25 steps of 1 env has 25 rows: 26 minibatches are refused by name before
    the actors start, not after the first rollout."""
    argv = [str(MAPPO_DIR / "train.py"), "--env_num", "1", "--num_workers", "1"]
    argv += ["--num_mini_batch", "26", "--no_progress", "--logdir", str(tmp_path / "run")]
    proc = run_python(args=argv, timeout=180)
    assert proc.returncode != 0
    assert "--num_mini_batch 26 is more minibatches than a rollout has rows (25 steps of 1 " in (
        proc.stderr
    ), proc.stderr[-2000:]
    assert "_rollout" not in proc.stderr  # refused before any rollout


def test_mappo_example_runs_on_foraging(run_python: RunPython, tmp_path: Path) -> None:
    """Foraging forbids some actions (a move into a wall, a load with no food beside) and
    MAPPO's policies do not mask: a forbidden draw does nothing, as in lbforaging itself,
    instead of stopping the run."""
    (result,) = _run_mains(
        run_python,
        [
            [*SMALL, "--env", "Foraging-5x5-2p-1f-coop-v3", "--train_total_steps", "400"]
            + ["--test_every_steps", "400", "--eval_episodes", "2"]
            + ["--logdir", str(tmp_path / "run")]
        ],
    )
    assert result["total_steps"] == 400 and len(result["eval_history"]) == 1


def test_mappo_example_refuses_counts_it_cannot_run_with(run_python: RunPython) -> None:
    """No env or actor stopped the run with an error from inside it; no PPO epoch trained
    nothing for the whole run."""
    flags = ["--env_num", "--num_workers", "--ppo_epoch", "--num_mini_batch"]
    assert_flags_refused(run_python, "MAPPO", flags)
