"""The MAPPO example (``examples/MAPPO``) on MPE's ``simple_speaker_listener``, run in a fresh
interpreter: the same seed gives the same run, a run resumed from its checkpoints ends where a
straight run does (it writes TensorBoard events and a checkpoint per agent), the legacy
dynamics reach the actors' envs, it runs with continuous actions, without the paper's switches
and on foraging, and a resume refuses other settings, another env or number of envs and
checkpoint files of two points. Its learning is measured by ``scripts/quality.py``; its count
flags' usage errors are checked with the other multi-agent examples' (in
test_marl_examples.py)."""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from .conftest import RunPython
from .example_mains import imported_example, run_mains
from .multiagent_support import require_multiagent

require_multiagent()  # a failure under CI=true, where the extra is installed
pytestmark = pytest.mark.slow  # the example script, run for real

SMALL = ["--env_num", "4", "--num_workers", "1", "--ppo_epoch", "3", "--no_progress"]


def _tensors(path: Path) -> list[torch.Tensor]:
    state = torch.load(path, weights_only=False)
    found: list[torch.Tensor] = []

    def walk(x: object) -> None:
        if torch.is_tensor(x):
            found.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(state["models"])
    walk(state["optimizers"])
    return found


def test_mappo_example_same_seed_same_run_resumed_equals_straight_and_refused_resumes(
    run_python: RunPython, tmp_path: Path
) -> None:
    """The same seed gives the same run; a run resumed in another interpreter than the one
    that stopped (the one of the refused resumes) ends with the straight run's evaluations, rollouts and weights. ``--legacy_dynamics`` travels to the envs
    the actors build: the first rollout, which the same untrained policies act in, scores
    otherwise. Continuous actions, the paper's switches off and foraging (which forbids some
    actions that MAPPO's policies do not mask: a forbidden draw does nothing, as in lbforaging)
    run. A resume is refused, naming the flags, without the legacy dynamics or with another
    value of a flag that takes one; on simple_tag (four agents where the run had two) by
    ``--env``, leaving the files as they were instead of starting afresh over them; with
    another ``--env_num`` (the updates done counted the run's envs each), also from a
    checkpoint that does not record it (read from its counters); from checkpoint files of two
    updates (a run killed while writing them). A finished run without evaluations, resumed
    with them, says why it has none without blaming this run's ``--eval_episodes``. 26
    minibatches of a 25-row rollout are refused by name before the actors start."""

    def args(steps: int, logdir: str, *extra: str) -> list[str]:
        common = ["--test_every_steps", "200", "--eval_episodes", "2", "--seed", "5"]
        return [*SMALL, *common, "--train_total_steps", str(steps), "--logdir", logdir, *extra]

    d = {
        name: tmp_path / name
        for name in ("straight", "again", "resumed", "legacy", "cont", "plain", "forage", "n4")
    }
    short = [*SMALL, "--train_total_steps", "100", "--test_every_steps", "100"]
    short += ["--eval_episodes", "1"]
    n4 = [*SMALL, "--train_total_steps", "200", "--test_every_steps", "200", "--eval_episodes"]
    n4 += ["0", "--logdir", str(d["n4"])]  # SMALL has 4 envs: 2 updates of 100 steps
    first = run_mains(
        run_python,
        [
            ("MAPPO", args(400, str(d["straight"]))),
            ("MAPPO", args(400, str(d["again"]))),
            ("MAPPO", args(200, str(d["resumed"]))),
            ("MAPPO", args(100, str(d["legacy"]), "--legacy_dynamics")),
            ("MAPPO", [*short, "--continuous_actions", "--logdir", str(d["cont"])]),
            ("MAPPO", [*short, "--use_popart", "False", "--use_centralized_V", "False",
                       "--use_value_active_masks", "False", "--logdir", str(d["plain"])]),
            ("MAPPO", [*short, "--env", "Foraging-5x5-2p-1f-coop-v3", "--logdir", str(d["forage"]),
                       "--train_total_steps", "200", "--test_every_steps", "200"]),  # 4 x 50
            ("MAPPO", n4),
        ],
    )  # fmt: skip
    for run in first:
        assert run.code == 0 and "Traceback" not in run.log and run.result, run.log[-3000:]
    straight, again, first_half, legacy, continuous, plain, forage, _ = (
        run.result for run in first
    )
    assert straight["total_steps"] == 400 and len(straight["train_returns"]) == 4
    assert straight["eval_history"] == again["eval_history"]
    assert [steps for steps, _ in straight["eval_history"]] == [200, 400]
    assert first_half["eval_history"] == straight["eval_history"][:1]
    assert legacy["train_returns"][0] != straight["train_returns"][0]
    for result, steps in ((continuous, 100), (plain, 100), (forage, 200)):
        assert result["total_steps"] == steps and len(result["eval_history"]) == 1

    for name in ("unrecorded", "points", "finished"):
        shutil.copytree(d["n4"], tmp_path / name)
    for agent in (0, 1):
        path = tmp_path / "unrecorded" / f"checkpoint_agent{agent}.pt"
        payload = torch.load(path, weights_only=False)
        del payload["extra"]["env_num"]  # as a checkpoint written before it was recorded
        torch.save(payload, path)
    path = tmp_path / "points" / "checkpoint_agent1.pt"
    payload = torch.load(path, weights_only=False)
    payload["counters"]["update"] = 7  # as if this file were from another point of the run
    torch.save(payload, path)
    written = (d["plain"] / "checkpoint_agent0.pt").read_bytes()
    more = [*n4, "--env_num", "8", "--train_total_steps", "400", "--resume"]
    runs = run_mains(
        run_python,
        [
            # the resume first, in an interpreter that ran nothing of it
            ("MAPPO", args(400, str(d["resumed"]), "--resume")),
            (
                "MAPPO",
                [*n4, "--eval_episodes", "1", "--resume", "--logdir", str(tmp_path / "finished")],
            ),
            (
                "MAPPO",
                [
                    *short,
                    "--seed",
                    "5",
                    "--test_every_steps",
                    "200",
                    "--resume",
                    "--use_popart",
                    "False",
                    "--logdir",
                    str(d["legacy"]),
                ],
            ),  # fmt: skip
            (
                "MAPPO",
                [
                    *short,
                    "--use_popart",
                    "False",
                    "--use_centralized_V",
                    "False",
                    "--use_value_active_masks",
                    "False",
                    "--env",
                    "simple_tag",
                    "--resume",
                    "--logdir",
                    str(d["plain"]),
                ],
            ),  # fmt: skip
            ("MAPPO", more),
            ("MAPPO", [*more, "--logdir", str(tmp_path / "unrecorded")]),
            (
                "MAPPO",
                [
                    *n4,
                    "--train_total_steps",
                    "400",
                    "--resume",
                    "--logdir",
                    str(tmp_path / "points"),
                ],
            ),
            (
                "MAPPO",
                [
                    "--env_num",
                    "1",
                    "--num_workers",
                    "1",
                    "--num_mini_batch",
                    "26",
                    "--no_progress",
                    "--logdir",
                    str(tmp_path / "minibatches"),
                ],
            ),  # fmt: skip
        ],
    )
    resume, finished, *refused = runs
    assert resume.code == 0 and "Traceback" not in resume.log and resume.result, resume.log[-3000:]
    resumed = resume.result
    assert resumed["eval_history"] == straight["eval_history"]
    assert resumed["train_returns"] == straight["train_returns"][2:]  # the updates it ran
    for agent in (0, 1):
        tensors = [
            _tensors(d[n] / f"checkpoint_agent{agent}.pt") for n in ("straight", "again", "resumed")
        ]
        assert tensors[0] and all(len(t) == len(tensors[0]) for t in tensors)
        for other in tensors[1:]:
            assert all(torch.equal(x, y) for x, y in zip(tensors[0], other, strict=True))
    assert any(p.name.startswith("events.out.tfevents") for p in d["straight"].iterdir())
    assert finished.code == 0, finished.log[-3000:]
    assert "no evaluation (the run it resumed had finished without any" in finished.log
    assert "--eval_episodes 0" not in finished.log
    assert all(run.code != 0 for run in refused), [run.log[-1000:] for run in refused]
    assert (
        "written with --legacy_dynamics and with --use_popart True; this run is without "
        "--legacy_dynamics and with --use_popart False" in refused[0].log
    ), refused[0].log[-2000:]
    assert (
        "written with --env simple_speaker_listener; this run is with --env simple_tag"
        in refused[1].log
    ), refused[1].log[-2000:]
    assert (d["plain"] / "checkpoint_agent0.pt").read_bytes() == written
    assert not (d["plain"] / "checkpoint_agent2.pt").exists()
    assert not (d["plain"] / "checkpoint_agent3.pt").exists()
    refusal = "written with --env_num 4; this run is with --env_num 8"
    assert refusal in refused[2].log, refused[2].log[-2000:]
    assert refusal in refused[3].log, refused[3].log[-2000:]
    assert "the checkpoint files in" in refused[4].log, refused[4].log[-2000:]
    assert (
        "--num_mini_batch 26 is more minibatches than a rollout has rows (25 steps of 1 "
        in refused[5].log
    ), refused[5].log[-2000:]
    assert "_rollout" not in refused[5].log  # refused before any rollout


def test_mappo_example_refuses_observations_and_actions_of_another_agent_count() -> None:
    envs = types.SimpleNamespace(
        obs_shape_n=[3, 11], act_shape_n=[3, 5], n_agents=2, state_shape=14, num_envs=4
    )
    with imported_example("examples/MAPPO") as train:
        team = train.Team(train.Config(), envs, episode_length=25)
        with pytest.raises(
            ValueError, match="the envs report 3 agents per env, but the team has 2"
        ):
            team.split(np.zeros((4, 3, 11)), np.zeros((4, 14)))
        with pytest.raises(ValueError, match="got actions of 1 agents, the team has 2"):
            team.env_actions([np.zeros((4, 1))])
