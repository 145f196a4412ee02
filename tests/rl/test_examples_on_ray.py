"""The distributed examples run unchanged on Ray: ``--xparl_addr ray`` makes each script start a
local Ray (``parl.connect("ray")``), ship its folder there with the cluster's packer, and run its
actors as Ray actors. Each script runs as ``python examples/X/train.py`` in a fresh interpreter,
as a user runs it; every Ray process it started must be gone when it exits."""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest

from tests.runtime.conftest import wait_until
from tests.runtime.rays import require_ray

from .conftest import REPO_ROOT, RunPython

RAY_PROCESS_NAMES = ("raylet", "gcs_server", "plasma_store", "ray::")


def _ray_processes() -> set[int]:
    found = set()
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            text = " ".join([process.info["name"] or "", *(process.info["cmdline"] or [])[:1]])
        except psutil.Error:
            continue
        if any(name in text for name in RAY_PROCESS_NAMES):
            found.add(process.pid)
    return found


def _gone(pids: set[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


CASES = {
    "IMPALA": ["--max_sample_steps", "3000", "--test_every_steps", "3000",
               "--eval_episodes", "2", "--no_tensorboard"],
    "A2C": ["--actor_num", "2", "--max_sample_steps", "1500", "--test_every_steps", "1000",
            "--no_progress"],
    "ES": ["--env", "CartPole-v1", "--train_steps", "2", "--noise_size", "1000000",
           "--test_every_train_steps", "1", "--eval_episodes", "1"],
    "PPO": ["--env_num", "2", "--train_total_steps", "1024", "--test_every_steps", "512",
            "--eval_episode", "1", "--no_progress"],
}  # fmt: skip
EVIDENCE = {  # a line each script logs once it trained and evaluated
    "IMPALA": r"step \d+: evaluation -?\d",
    "A2C": r"step \d+: evaluation -?\d",
    "ES": r"update 2, step \d+: evaluation -?\d",
    "PPO": r"evaluation over 1 episodes",
}


@pytest.mark.parametrize("example", sorted(CASES))
def test_a_distributed_example_runs_unchanged_on_ray(
    run_python: RunPython, tmp_path: Path, example: str
) -> None:
    require_ray()
    before = _ray_processes()
    script = REPO_ROOT / "examples" / example / "train.py"
    args = [str(script), "--xparl_addr", "ray", *CASES[example], "--logdir", str(tmp_path / "log")]
    proc = run_python(args=args, timeout=240, cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "Started a local Ray instance" in log, log[-2000:]  # it ran on Ray, not local workers
    assert re.search(EVIDENCE[example], log), log[-3000:]
    assert "Traceback" not in log and "UserWarning" not in log, log[-4000:]
    started = _ray_processes() - before
    assert _wait_gone(started), f"Ray processes left behind by {example}: {sorted(started)}"


def _wait_gone(pids: set[int], timeout: float = 20.0) -> bool:
    return wait_until(lambda: _gone(pids), timeout=timeout)
