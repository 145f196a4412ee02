"""The distributed examples run unchanged on Ray: ``--xparl_addr ray`` makes each script join the
Ray cluster that ``RAY_ADDRESS`` names (``parl.connect("ray")``: a head started once for the
test module), ship its folder there with the cluster's packer, and run its actors as Ray actors.
Each script runs as ``python examples/X/train.py`` in a fresh interpreter, as a user runs it;
no actor of it is left on the cluster when it exits."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.runtime.conftest import wait_until
from tests.runtime.rays import HEAD_GROUPS, ray_head  # noqa: F401 - the fixture

from .conftest import REPO_ROOT, RunPython

pytestmark = pytest.mark.slow  # the examples on a Ray head of their own

RAY_DAEMON_TITLES = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def _ray_processes() -> set[int]:
    """Workers of actors of the module's Ray head (``ray::<Class>``, descendants of a
    ``ray_head`` process); the head's daemons and idle workers (``ray::IDLE``, which Ray keeps
    started for later tasks) are Ray's own. Processes of any other Ray on the machine are not
    counted."""
    found = set()
    for process in psutil.process_iter(["cmdline"]):
        title = ((process.info["cmdline"] or [""])[:1] or [""])[0].split(" ")[0]
        if title.startswith("ray::") and title not in RAY_DAEMON_TITLES and _of_a_head(process):
            found.add(process.pid)
    return found


def _of_a_head(process: psutil.Process) -> bool:
    try:
        return any(parent.pid in HEAD_GROUPS for parent in process.parents())
    except psutil.Error:
        return False


def _gone(pids: set[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


CASES = {  # each at its smallest budget that trains and evaluates once
    "IMPALA": ["--max_sample_steps", "1000", "--test_every_steps", "1000",
               "--eval_episodes", "1", "--no_tensorboard"],
    "A2C": ["--actor_num", "2", "--max_sample_steps", "500", "--test_every_steps", "500",
            "--eval_episodes", "1", "--no_progress"],
    "GA3C": ["--actor_num", "2", "--max_sample_steps", "500", "--test_every_steps", "500",
             "--eval_episodes", "1", "--no_progress"],
    "ES": ["--env", "CartPole-v1", "--train_steps", "1", "--noise_size", "1000000",
           "--test_every_train_steps", "1", "--eval_episodes", "1"],
    "PPO": ["--env_num", "2", "--train_total_steps", "512", "--test_every_steps", "512",
            "--eval_episode", "1", "--no_progress"],
    "AlphaZero": ["--train_total_steps", "1", "--games_per_iter", "4", "--mcts_sims", "6",
                  "--arena_games", "2", "--eval_episodes", "2", "--epochs", "1",
                  "--channels", "8", "--blocks", "1", "--no_progress"],
}  # fmt: skip
EVIDENCE = {  # a line each script logs once it trained and evaluated
    "IMPALA": r"step \d+: evaluation -?\d",
    "A2C": r"step \d+: evaluation -?\d",
    "GA3C": r"step \d+: evaluation -?\d",
    "ES": r"update 1, step \d+: evaluation -?\d",
    "PPO": r"evaluation over 1 episodes",
    "AlphaZero": r"iteration 1: against the lookahead player \d+-\d+-\d+",
}


@pytest.mark.parametrize("example", sorted(CASES))
def test_a_distributed_example_runs_unchanged_on_ray(
    run_python: RunPython,
    tmp_path: Path,
    example: str,
    ray_head: Any,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in ray_head.env.items():
        monkeypatch.setenv(name, value)
    before = _ray_processes()
    script = REPO_ROOT / "examples" / example / "train.py"
    args = [str(script), "--xparl_addr", "ray", *CASES[example], "--torch_threads", "1",
            "--logdir", str(tmp_path / "log")]  # fmt: skip
    proc = run_python(args=args, timeout=240, cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "Connected to Ray cluster" in log, log[-2000:]  # it ran on Ray, not local workers
    joined = re.findall(r"Ray cluster at address: ([^:\s]+)", log)
    assert joined and set(joined) == {"127.0.0.1"}, joined  # the head on loopback, nothing else
    assert re.search(EVIDENCE[example], log), log[-3000:]
    assert "Traceback" not in log and "UserWarning" not in log, log[-4000:]
    started = _ray_processes() - before  # its actors' workers (the head's daemons stay)
    assert _wait_gone(started), f"Ray workers left behind by {example}: {_describe(started)}"


def _wait_gone(pids: set[int], timeout: float = 20.0) -> bool:
    return wait_until(lambda: _gone(pids), timeout=timeout)


def _describe(pids: set[int]) -> list[str]:
    found = []
    for pid in sorted(pids):
        try:
            found.append(f"{pid}: {' '.join(psutil.Process(pid).cmdline())[:200]}")
        except psutil.Error:
            found.append(f"{pid}: gone")
    return found
