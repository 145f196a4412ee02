"""The distributed examples run unchanged on Ray: ``--xparl_addr ray`` makes each script join the
Ray cluster that ``RAY_ADDRESS`` names (``parl.connect("ray")``: the run's Ray head,
tests/runtime/rays.py), ship its folder there with the cluster's packer, and run its actors as
Ray actors. The six scripts run one after the other in one fresh interpreter, each as
``python examples/X/train.py`` runs it (``runpy`` as ``__main__``, its folder first on
``sys.path``, its own modules forgotten after it) and ended as its interpreter's exit ends it
(``parl.disconnect()``: its actors end, its Ray connection is shut down): an interpreter with
torch, gymnasium and Ray imported costs seconds of CPU, once instead of six times. After each
script, no worker of its actors is left on the head."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.runtime.rays import HEAD_GROUPS

from .conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # the examples on the run's Ray head

CASES = {  # each at its smallest budget that trains and evaluates once; IMPALA and PPO with
    # two actors (several actors of one script on Ray), the others with one
    "IMPALA": ["--max_sample_steps", "1000", "--test_every_steps", "1000",
               "--eval_episodes", "1", "--no_tensorboard"],
    "A2C": ["--actor_num", "1", "--max_sample_steps", "500", "--test_every_steps", "500",
            "--eval_episodes", "1", "--no_progress"],
    "GA3C": ["--actor_num", "1", "--max_sample_steps", "500", "--test_every_steps", "500",
             "--eval_episodes", "1", "--no_progress"],
    "ES": ["--env", "CartPole-v1", "--actor_num", "1", "--train_steps", "1",
           "--noise_size", "1000000", "--test_every_train_steps", "1", "--eval_episodes", "1"],
    "PPO": ["--env_num", "2", "--train_total_steps", "512", "--test_every_steps", "512",
            "--eval_episode", "1", "--no_progress"],
    "AlphaZero": ["--actors_num", "1", "--train_total_steps", "1", "--games_per_iter", "4",
                  "--mcts_sims", "6", "--arena_games", "2", "--eval_episodes", "2",
                  "--epochs", "1", "--channels", "8", "--blocks", "1", "--no_progress"],
}  # fmt: skip
EVIDENCE = {  # a line each script logs once it trained and evaluated
    "IMPALA": r"step \d+: evaluation -?\d",
    "A2C": r"step \d+: evaluation -?\d",
    "GA3C": r"step \d+: evaluation -?\d",
    "ES": r"update 1, step \d+: evaluation -?\d",
    "PPO": r"evaluation over 1 episodes",
    "AlphaZero": r"iteration 1: against the lookahead player \d+-\d+-\d+",
}


_RUN_ON_RAY = """
import json, os, runpy, sys, time, traceback
import psutil
import parl
from parl.remote.context import current

examples, heads = {examples!r}, set({heads!r})
DAEMONS = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def actor_workers():
    # workers of actors on the head (ray::<Class>, descendants of a head process); its
    # daemons and idle workers are Ray's own
    found = set()
    for process in psutil.process_iter(["cmdline"]):
        title = ((process.info["cmdline"] or [""])[:1] or [""])[0].split(" ")[0]
        if not title.startswith("ray::") or title in DAEMONS:
            continue
        try:
            if any(parent.pid in heads for parent in process.parents()):
                found.add(process.pid)
        except psutil.Error:
            pass
    return found


def mark(line):
    for stream in (sys.stdout, sys.stderr):
        stream.write("\\n@@" + line + "\\n")
        stream.flush()


for example, argv in json.loads({cases!r}):
    before, modules = actor_workers(), set(sys.modules)
    script = os.path.join(examples, example, "train.py")
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(script))
    mark("run " + example)
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:
        traceback.print_exc()
        code = 1
    ray = sys.modules.get("ray")
    joined = None  # the Ray its actors went to: the head's GCS and its nodes' addresses
    if ray is not None and ray.is_initialized():
        joined = {{"carrier": type(current().carrier).__name__,
                  "gcs": ray.get_runtime_context().gcs_address,
                  "nodes": sorted(node["NodeManagerAddress"] for node in ray.nodes())}}
    parl.disconnect()  # what the script's exit does
    sys.path.remove(os.path.dirname(script))
    for name in set(sys.modules) - modules:  # the example's own modules (model.py, ...)
        if (getattr(sys.modules[name], "__file__", None) or "").startswith(examples):
            del sys.modules[name]
    deadline = time.monotonic() + 20
    while actor_workers() - before and time.monotonic() < deadline:
        time.sleep(0.1)  # (a scan of every process on the machine costs milliseconds)
    left = []
    for pid in sorted(actor_workers() - before):
        try:
            left.append(str(pid) + ": " + " ".join(psutil.Process(pid).cmdline())[:200])
        except psutil.Error:
            pass
    mark("exit " + json.dumps({{"code": code, "joined": joined, "left": left}}))
"""


@pytest.fixture(scope="module")
def runs(ray_head: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every example of CASES run on the head, in one interpreter: by example, its exit
    ``code``, its ``log`` (what it wrote to stdout and stderr), the Ray it ``joined`` (its
    carrier, the GCS address and the nodes' addresses, seen as it ended) and the workers of its
    actors ``left`` 20 s after it ended."""
    folder = tmp_path_factory.mktemp("examples-on-ray")
    cases = [(example, [*CASES[example], "--torch_threads", "1",
                        "--logdir", str(folder / example)]) for example in sorted(CASES)]  # fmt: skip
    code = _RUN_ON_RAY.format(
        examples=str(REPO_ROOT / "examples"),
        heads=sorted(HEAD_GROUPS),
        cases=json.dumps([(example, ["--xparl_addr", "ray", *argv]) for example, argv in cases]),
    )
    env = dict(os.environ, **ray_head.env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    everything = proc.stdout + proc.stderr  # Ray's own lines are not always in order with ours
    for bad in ("Traceback", "Exception ignored"):
        at = everything.find(bad)
        assert at < 0, everything[max(0, at - 3000) : at + 3000]
    logs: dict[str, list[str]] = {}
    ends: dict[str, dict] = {}
    for stream in (proc.stdout, proc.stderr):
        for part in stream.split("\n@@run ")[1:]:
            example, _, body = part.partition("\n")
            body, _, tail = body.partition("\n@@exit ")
            logs.setdefault(example, []).append(body)
            ends[example] = json.loads(tail.split("\n", 1)[0])
    assert sorted(ends) == sorted(CASES), proc.stderr[-4000:]
    return {example: {**ends[example], "log": "".join(logs[example])} for example in ends}


@pytest.mark.parametrize("example", sorted(CASES))
def test_a_distributed_example_runs_unchanged_on_ray(
    runs: dict[str, dict], example: str, ray_head: Any
) -> None:
    run = runs[example]
    log = run["log"]
    assert run["code"] == 0, log[-4000:]
    # it ran on Ray, not local workers: on the head, whose node is on loopback, nothing else
    assert run["joined"] == {"carrier": "RayCarrier", "gcs": ray_head.gcs,
                             "nodes": ["127.0.0.1"]}, run["joined"]  # fmt: skip
    assert re.search(EVIDENCE[example], log), log[-3000:]
    assert "Traceback" not in log and "UserWarning" not in log, log[-4000:]
    assert not run["left"], f"Ray workers left behind by {example}: {run['left']}"
