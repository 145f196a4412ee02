"""``scripts/make_offline_dataset.py`` end to end on a tiny budget: every kind of dataset is a
Minari dataset with D4RL's reference scores, terminations and truncations apart and whole
episodes, that parl's reader and the offline examples read; ``--policy`` collects from an
``examples/SAC`` checkpoint; the expert stage continues from the medium one kept on disk; bad
input is a clear error and an interrupted run leaves no half-written dataset."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from .conftest import REPO_ROOT, RunPython
from .example_mains import Run, imported_example, run_mains, run_ok
from .test_offline_data import _needed

pytestmark = pytest.mark.slow  # the script and the examples, run for real

SCRIPT_PATH = "scripts/make_offline_dataset.py"  # for run_mains
SCRIPT = str(REPO_ROOT / SCRIPT_PATH)
SAMPLES = 200
EPISODE = 30  # --max_episode_steps: short episodes, so that some are truncated
TINY = ["--env", "Hopper-v5", "--samples", str(SAMPLES), "--max_episode_steps", str(EPISODE),
        "--warmup_steps", "50", "--medium_max_steps", "150", "--expert_steps", "250",
        "--test_every_steps", "60", "--eval_episodes", "2", "--hidden", "16",
        "--batch_size", "16", "--no_progress"]  # fmt: skip
KINDS = ("random", "medium", "medium-replay", "expert", "medium-expert")


def run_script(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every kind of Hopper-v5 dataset, made in one run; returns ``--out``."""
    _needed("minari")
    out = tmp_path_factory.mktemp("datasets")
    proc = run_script([*TINY, "--out", str(out)], out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def episodes(folder: Path) -> list:
    import minari

    return list(minari.MinariDataset(folder / "data").iterate_episodes())


def generation(folder: Path) -> dict:
    return json.loads((folder / "generation.json").read_text())


def test_every_kind_is_written_with_reference_scores_and_how_it_was_made(made: Path) -> None:
    import minari

    for kind in KINDS:
        folder = made / f"hopper-{kind}-v0"
        dataset = minari.MinariDataset(folder / "data")
        # D4RL's Hopper references: random -20.27, expert 3234.3
        assert minari.get_normalized_score(dataset, np.array([-20.272305, 3234.3])) == (
            pytest.approx([0.0, 1.0])
        )
        record = generation(folder)
        assert record["kind"] == kind and record["env"] == "Hopper-v5" and record["seed"] == 0
        assert "make_offline_dataset.py" in record["command"]
        assert record["samples"] == dataset.total_steps
        assert record["episodes"] == dataset.total_episodes
    medium, replay = (
        generation(made / "hopper-medium-v0"),
        generation(made / "hopper-medium-replay-v0"),
    )
    expert = generation(made / "hopper-expert-v0")
    for record in (medium, expert):
        assert record["samples"] == SAMPLES
        assert record["policy"]["source"] == "trained here"
        assert np.isfinite(record["policy"]["eval_return"])
    # medium stops at its cap (a return of 1078 is out of reach); expert trains on to 250
    assert 150 <= medium["policy"]["steps_trained"] < 250 <= expert["policy"]["steps_trained"]
    assert replay["samples"] == medium["policy"]["steps_trained"]
    assert generation(made / "hopper-random-v0")["samples"] == SAMPLES
    assert generation(made / "hopper-medium-expert-v0")["samples"] == 2 * SAMPLES
    assert not list(made.glob(".*")), "a staging folder was left behind"


def test_episodes_end_once_with_terminations_and_truncations_kept_apart(made: Path) -> None:
    seen_terminated = seen_truncated = 0
    for kind in KINDS:
        for episode in episodes(made / f"hopper-{kind}-v0"):
            steps = len(episode.rewards)
            assert episode.observations.shape == (steps + 1, 11)
            assert episode.actions.shape == (steps, 3)
            assert np.all(np.abs(episode.actions) <= 1.0)
            ends = episode.terminations | episode.truncations
            assert ends[-1] and not ends[:-1].any(), f"{kind}: an episode ends mid-way"
            if episode.truncations[-1]:  # the time limit, or the sample budget at the very end
                assert steps <= EPISODE
                seen_truncated += 1
            if episode.terminations[-1]:
                seen_terminated += 1
            assert steps <= EPISODE
    assert seen_terminated and seen_truncated


def test_medium_expert_is_the_medium_episodes_then_the_expert_ones(made: Path) -> None:
    both = episodes(made / "hopper-medium-expert-v0")
    parts = episodes(made / "hopper-medium-v0") + episodes(made / "hopper-expert-v0")
    assert len(both) == len(parts)
    for a, b in zip(both, parts, strict=True):
        for name in ("observations", "actions", "rewards", "terminations", "truncations"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_medium_replay_is_every_step_the_training_took(made: Path) -> None:
    with np.load(made / "sac-hopper-seed0" / "medium" / "steps.npz") as steps:
        actions = steps["actions"]
    replay = np.concatenate([e.actions for e in episodes(made / "hopper-medium-replay-v0")])
    np.testing.assert_array_equal(replay, actions)


def test_datasets_load_back_through_parls_reader(made: Path) -> None:
    from parl.utils.offline_data import load_minari

    for kind in KINDS:
        folder = made / f"hopper-{kind}-v0"
        data = load_minari(folder)
        record = generation(folder)
        assert data["observations"].shape == (record["samples"], 11)
        assert data["actions"].shape == (record["samples"], 3)
        assert int(data["terminals"].sum()) == record["terminated_episodes"]


def test_expert_run_later_continues_from_the_medium_stage_kept_on_disk(
    made: Path, run_python: RunPython, tmp_path: Path
) -> None:
    """``--kinds expert`` in a later run, beside the medium stage that a run of every kind
    kept on disk, gives that run's expert; ``--out`` relative to the working folder (Minari
    once failed to size the files of a dataset written under a relative path)."""
    shutil.copytree(made / "sac-hopper-seed0" / "medium", tmp_path / "sac-hopper-seed0" / "medium")
    again = [*TINY, "--out", "again", "--kinds", "medium", "--workdir", "sac-hopper-seed0"]
    expert, _ = run_ok(
        run_python,
        [(SCRIPT_PATH, [*TINY, "--out", ".", "--kinds", "expert"]), (SCRIPT_PATH, again)],
    )
    assert "continuing the SAC run kept in" in expert, expert[-3000:]
    first = torch.load(made / "sac-hopper-seed0" / "expert" / "model.ckpt", weights_only=True)
    second = torch.load(tmp_path / "sac-hopper-seed0" / "expert" / "model.ckpt", weights_only=True)
    for key in first:
        assert torch.equal(first[key], second[key]), key
    for name in ("observations", "actions"):
        a = np.concatenate([getattr(e, name) for e in episodes(made / "hopper-expert-v0")])
        b = np.concatenate([getattr(e, name) for e in episodes(tmp_path / "hopper-expert-v0")])
        np.testing.assert_array_equal(a, b)
    # the training time of a kept stage travels with it: a dataset made from it later records
    # the time SAC trained, apart from the seconds this command took
    medium = generation(made / "hopper-medium-v0")["policy"]["train_seconds"]
    expert_seconds = generation(tmp_path / "hopper-expert-v0")["policy"]["train_seconds"]
    assert 0 < medium < expert_seconds
    assert generation(tmp_path / "again" / "hopper-medium-v0")["policy"]["train_seconds"] == medium


def last_line(run: Run) -> str:
    """The last line of a run's log: the exception it raised, where it raised one."""
    return run.log.strip().splitlines()[-1]


def test_policy_flag_collects_from_an_sac_example_checkpoint_and_bad_input_is_a_clear_error(
    made: Path, run_python: RunPython, tmp_path: Path
) -> None:
    """The SAC example's policy file and its training checkpoint each give a medium dataset;
    bad input (an env without reference scores, a dataset that exists, a policy of another env
    or none, a policy for the SAC run's own replay, a kept run of other settings, an expert of
    no more steps than the medium policy, an ``--out`` that is a file, a NaN return) is a clear
    error that writes no dataset. The example's run, both collections and the bad inputs run in
    one interpreter."""
    _needed("minari")
    logdir = tmp_path / "sac"
    sac = ["--env", "Hopper-v5", "--train_total_steps", "60", "--warmup_steps", "20",
           "--test_every_steps", "30", "--eval_episodes", "1", "--hidden", "16",
           "--batch_size", "16", "--logdir", str(logdir), "--no_progress"]  # fmt: skip
    policies = (logdir / "model.ckpt", logdir / "checkpoint.pt")
    collect = [[*TINY, "--out", str(tmp_path / policy.stem), "--kinds", "medium",
                "--policy", str(policy)] for policy in policies]  # fmt: skip
    hopper_policy = str(made / "sac-hopper-seed0" / "medium" / "model.ckpt")
    out = str(made)
    medium_only = tmp_path / "medium-only"
    shutil.copytree(made / "sac-hopper-seed0" / "medium", medium_only / "medium")
    bad = [
        ["--env", "Pendulum-v1", "--out", out],
        ["--env", "Hopper-v5", "--out", out, "--kinds", "random"],
        ["--env", "HalfCheetah-v5", "--out", str(tmp_path / "o1"), "--kinds", "medium",
         "--policy", hopper_policy],
        ["--env", "Hopper-v5", "--out", str(tmp_path / "o2"), "--kinds", "medium",
         "--policy", str(tmp_path / "missing.ckpt")],
        ["--env", "Hopper-v5", "--out", str(tmp_path / "o3"), "--kinds", "medium-replay",
         "--policy", hopper_policy],
        ["--env", "Hopper-v5", "--out", str(tmp_path / "o4"), "--kinds", "medium",
         "--workdir", str(made / "sac-hopper-seed0"), "--hidden", "32"],
        [*TINY, "--out", str(tmp_path / "o5"), "--kinds", "expert", "--workdir",
         str(medium_only), "--expert_steps", "100"],
        ["--env", "Hopper-v5", "--out", str(tmp_path / "a-file"), "--kinds", "random"],
        ["--env", "Hopper-v5", "--out", str(tmp_path / "o6"), "--medium_return", "nan"],
    ]  # fmt: skip
    (tmp_path / "a-file").write_text("not a folder")
    runs = run_mains(
        run_python,
        [("SAC", sac), *((SCRIPT_PATH, argv) for argv in [*collect, *bad])],
    )
    for run in runs[:3]:
        assert run.code == 0 and "Traceback" not in run.log, run.log[-3000:]
    for policy in policies:
        record = generation(tmp_path / policy.stem / "hopper-medium-v0")
        assert record["policy"]["source"] == str(policy)
        assert record["policy"]["steps_trained"] >= 60  # the SAC run's counters
        assert record["samples"] == SAMPLES
        assert not (tmp_path / policy.stem / "sac-hopper-seed0").exists(), "nothing was trained"

    unknown_env, exists, wrong_env, missing, replay, other_run, short_expert, out_file, nan = runs[
        3:
    ]
    for run in (unknown_env, exists, replay, out_file, nan):  # usage errors
        assert run.code == 2 and "Traceback" not in run.log, run.log[-3000:]
    for run in (wrong_env, missing, other_run, short_expert):
        assert run.code == 1, run.log[-3000:]
    assert "no D4RL reference scores" in unknown_env.log, unknown_env.log[-2000:]
    assert "HalfCheetah" in unknown_env.log  # the tasks it can make
    assert "hopper-random-v0 exists: pass --overwrite" in exists.log, exists.log[-2000:]
    assert last_line(wrong_env).startswith("ValueError") and "11 observation values" in (
        last_line(wrong_env)
    )
    assert "HalfCheetah-v5 has 17 and 6" in last_line(wrong_env)
    assert last_line(missing).startswith("FileNotFoundError") and "missing.ckpt" in (
        last_line(missing)
    )
    assert "medium-replay is the SAC run's own" in replay.log, replay.log[-2000:]
    assert last_line(other_run).startswith("ValueError") and "'hidden': (16, 32)" in (
        last_line(other_run)
    )
    medium_steps = generation(made / "hopper-medium-v0")["policy"]["steps_trained"]
    assert last_line(short_expert) == (
        f"ValueError: the medium policy trained for {medium_steps} steps, --expert_steps 100 "
        "or more, so the expert would be the medium policy: ask for more --expert_steps"
    )
    assert not (tmp_path / "o5" / "hopper-expert-v0").exists()
    assert f"--out {tmp_path / 'a-file'} is a file" in out_file.log, out_file.log[-2000:]
    assert "--medium_return: must be a finite number" in nan.log, nan.log[-2000:]
    for name in ("o1", "o2", "o3", "o4", "o6"):
        assert not (tmp_path / name / "hopper-medium-v0").exists()


def test_an_interrupted_write_leaves_the_old_dataset_or_none(tmp_path: Path) -> None:
    root = tmp_path / "out"
    root.mkdir()
    final = root / "hopper-medium-v0"
    found = []
    with imported_example("scripts", "make_offline_dataset") as script:
        for before in (None, "old"):
            if before:
                final.mkdir()
                (final / "file").write_text(before)
            with pytest.raises(KeyboardInterrupt), script.staged_folder(final) as staging:
                (staging / "file").write_text("new, half written")
                raise KeyboardInterrupt
            found.append((before, sorted(p.name for p in root.iterdir()),
                          (final / "file").read_text() if final.exists() else None))  # fmt: skip
        with script.staged_folder(final) as staging:
            (staging / "file").write_text("new")
    found.append(("done", sorted(p.name for p in root.iterdir()), (final / "file").read_text()))
    assert found == [
        (None, [], None),
        ("old", ["hopper-medium-v0"], "old"),
        ("done", ["hopper-medium-v0"], "new"),
    ]


def default_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_at(args: list[str], cwd: Path, line: str, signum: int) -> tuple[str, int]:
    """Run the script and send ``signum`` as soon as it logs ``line``; returns its stderr and
    exit status. Ctrl-C reaches it as in a terminal, also when the tests run as a background
    job (whose children ignore it)."""
    proc = subprocess.Popen([sys.executable, SCRIPT, *args], cwd=cwd, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_ctrl_c)  # fmt: skip
    assert proc.stderr is not None
    seen = []
    for text in proc.stderr:
        seen.append(text)
        if line in text:
            proc.send_signal(signum)
            break
    seen.append(proc.stderr.read())
    return "".join(seen), proc.wait(timeout=120)


def first_evaluation(stderr: str) -> int:
    """The step of the first SAC evaluation a run logged."""
    found = re.search(r"SAC: (\d+) steps, evaluation return", stderr)
    assert found, stderr[-3000:]
    return int(found.group(1))


def test_ctrl_c_or_sigterm_keeps_the_run_and_the_rerun_ends_as_one_straight_run(
    run_python: RunPython, tmp_path: Path
) -> None:
    """Ctrl-C while SAC trains to the medium stage: the episode under way ends, the run so far
    is kept as a partial stage, no dataset is half-written, and the rerun (random left out, as
    the message says) continues it; SIGTERM (as a machine's shutdown sends) while the expert is
    extended from 250 to 400 steps does the same. The expert policy and its dataset are those
    of one run straight to 400 steps, which runs, with the last rerun and the refusal of fewer
    steps than the kept expert's, in an interpreter of its own."""
    _needed("minari")
    budget = [*TINY, "--medium_max_steps", "200", "--save_every", "50"]
    out = tmp_path / "resumed"
    work = out / "sac-hopper-seed0"
    short = [*budget, "--expert_steps", "250", "--out", str(out)]
    long = [*budget, "--kinds", "expert", "--expert_steps", "400", "--out", str(out), "--overwrite"]

    stderr, code = stop_at([*short, "--kinds", "random", "expert"], tmp_path,
                           "evaluation return", signal.SIGINT)  # fmt: skip
    assert code == 128 + signal.SIGINT, stderr[-3000:]
    assert any("wrote" in line and "hopper-random-v0" in line for line in stderr.split("\n"))
    # the random dataset, the SAC run kept: no medium or expert dataset, no staging folder
    assert sorted(p.name for p in out.iterdir()) == ["hopper-random-v0", "sac-hopper-seed0"]
    assert sorted(p.name for p in work.iterdir()) == ["medium-partial"]
    assert len(episodes(out / "hopper-random-v0")) > 0
    kept = json.loads((work / "medium-partial" / "info.json").read_text())["steps"]
    evaluated = first_evaluation(stderr)
    assert evaluated <= kept < evaluated + EPISODE  # the episode under way, not more
    assert (
        f"stopped by SIGINT at {kept:,} steps, the run so far kept in {work / 'medium-partial'}"
        in stderr
    )
    assert "(with random left out of --kinds" in stderr, stderr[-2000:]

    proc = run_script([*short, "--kinds", "expert"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"continuing the SAC run kept in {work / 'medium-partial'} ({kept} steps)" in proc.stderr
    assert first_evaluation(proc.stderr) > kept  # it went on from there, not from the start
    assert sorted(p.name for p in work.iterdir()) == ["expert", "medium"]
    trained = generation(out / "hopper-expert-v0")["policy"]["steps_trained"]
    assert 250 <= trained < 280

    stderr, code = stop_at(long, tmp_path, "evaluation return", signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, stderr[-3000:]
    assert f"continuing the SAC run kept in {work / 'expert'} " in stderr
    assert "stopped by SIGTERM at" in stderr
    assert sorted(p.name for p in work.iterdir()) == ["expert", "expert-partial", "medium"]
    assert json.loads((work / "expert-partial" / "info.json").read_text())["steps"] > trained
    # the datasets of the last finished run: none half-written, no staging folder
    assert sorted(p.name for p in out.iterdir()) == [
        "hopper-expert-v0", "hopper-random-v0", "sac-hopper-seed0"
    ]  # fmt: skip
    assert generation(out / "hopper-expert-v0")["policy"]["steps_trained"] == trained

    straight = tmp_path / "straight"
    to_expert = [*budget, "--kinds", "expert", "--expert_steps"]
    straight_run, rerun, fewer = run_mains(
        run_python,
        [
            (SCRIPT_PATH, [*to_expert, "400", "--out", str(straight)]),
            (SCRIPT_PATH, long),
            # fewer steps than the kept expert's cannot be had from it
            (SCRIPT_PATH, [*to_expert, "350", "--out", str(out), "--overwrite"]),
        ],
    )
    for run in (straight_run, rerun):
        assert run.code == 0 and "Traceback" not in run.log, run.log[-3000:]
    assert f"continuing the SAC run kept in {work / 'expert-partial'}" in rerun.log
    assert first_evaluation(rerun.log) > 300
    assert sorted(p.name for p in work.iterdir()) == ["expert", "medium"]

    first = torch.load(straight / "sac-hopper-seed0" / "expert" / "model.ckpt", weights_only=True)
    second = torch.load(work / "expert" / "model.ckpt", weights_only=True)
    for key in first:
        assert torch.equal(first[key], second[key]), key
    for name in ("observations", "actions", "rewards"):
        a = np.concatenate([getattr(e, name) for e in episodes(straight / "hopper-expert-v0")])
        b = np.concatenate([getattr(e, name) for e in episodes(out / "hopper-expert-v0")])
        np.testing.assert_array_equal(a, b)
    steps = [generation(o / "hopper-expert-v0")["policy"]["steps_trained"] for o in (out, straight)]
    assert steps[0] == steps[1]
    assert fewer.code != 0, fewer.log[-3000:]
    assert "more than --expert_steps 350" in fewer.log and "another --workdir" in fewer.log


SMALL = {
    "CQL": ["--hidden", "16", "--batch_size", "16"],
    "IQL": ["--hidden", "16", "--batch_size", "16"],
    "DT": ["--context", "4", "--embed_dim", "16", "--n_layer", "1", "--batch_size", "8"],
}


def test_offline_examples_train_on_a_dataset_the_script_made(
    made: Path, run_python: RunPython, tmp_path: Path
) -> None:
    """CQL, DT and IQL each train and evaluate on the medium-replay dataset (in one
    interpreter), with D4RL's normalized score, and write their model."""
    dataset = str(made / "hopper-medium-replay-v0")
    runs = run_mains(
        run_python,
        [
            (
                example,
                [
                    "--env",
                    "Hopper-v5",
                    "--dataset",
                    dataset,
                    "--train_total_steps",
                    "20",
                    "--test_every_steps",
                    "10",
                    "--eval_episodes",
                    "1",
                    *SMALL[example],
                    "--logdir",
                    str(tmp_path / example),
                    "--no_progress",
                ],
            )  # fmt: skip
            for example in sorted(SMALL)
        ],
    )
    for example, run in zip(sorted(SMALL), runs, strict=True):
        assert run.code == 0, run.log[-3000:]
        assert "Evaluation: total_steps 10" in run.log and "normalized score" in run.log
        assert (tmp_path / example / "model.ckpt").is_file()
