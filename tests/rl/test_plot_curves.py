"""scripts/plot_curves.py: TensorBoard scalars of several runs become one SVG picture."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parl.utils import summary

from .conftest import REPO_ROOT

spec = importlib.util.spec_from_file_location(
    "plot_curves", REPO_ROOT / "scripts" / "plot_curves.py"
)
assert spec is not None and spec.loader is not None
plot_curves = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_curves)

SVG = "{http://www.w3.org/2000/svg}"


def _write_run(folder: Path, values: list[float]) -> None:
    summary.set_dir(folder)
    for step, value in enumerate(values):
        summary.add_scalar("train/episode_reward", value, (step + 1) * 1000)
    summary.close()


def test_runs_become_lines_on_shared_axes(tmp_path: Path, capsys) -> None:
    _write_run(tmp_path / "a", [-21.0, -20.0, -15.0, -3.0])
    _write_run(tmp_path / "b", [-20.5, -19.0, -10.0])
    out = tmp_path / "pics" / "curve.svg"
    plot_curves.main([f"{tmp_path / 'a'}:seed 0", str(tmp_path / "b"), "--title", "Pong <IMPALA>",
                      "--out", str(out)])  # fmt: skip
    root = ET.parse(out).getroot()  # well-formed: the title's "<" was escaped
    lines = root.findall(f"{SVG}polyline")
    assert [len(line.get("points", "").split()) for line in lines] == [4, 3]
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "Pong <IMPALA>" in texts and "seed 0" in texts and "b" in texts
    # y grows upwards: the last point of run a (-3) is drawn above its first (-21)
    points = [tuple(map(float, p.split(","))) for p in lines[0].get("points", "").split()]
    assert points[-1][1] < points[0][1] and points[-1][0] > points[0][0]
    assert "seed 0 (4 points)" in capsys.readouterr().out


def test_smoothing_and_ticks() -> None:
    assert plot_curves.smooth([(1, 0.0), (2, 2.0), (3, 4.0)], 2) == [(1, 0.0), (2, 1.0), (3, 3.0)]
    assert plot_curves.nice_ticks(-21, 0) == [-25.0, -20.0, -15.0, -10.0, -5.0, 0.0]
    ticks = plot_curves.nice_ticks(0, 1_000_000)
    assert ticks[0] == 0 and ticks[-1] >= 1_000_000 and len(ticks) <= 7


def test_a_records_picture_says_its_configuration_and_keeps_its_labels_inside(
    tmp_path: Path,
) -> None:
    """Drawn from a record: the configuration under the title (pictures of one env differ), a
    long measure wrapped beside the plot instead of cut at its edges."""
    import json

    record = json.loads(
        (REPO_ROOT / "docs/results/qmix_Foraging-8x8-2p-2f-coop-v3.json").read_text()
    )
    record["metric"] = "a " + "very long measure " * 12
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    out = tmp_path / "qmix.svg"
    plot_curves.main(["--record", str(path), "--out", str(out)])
    root = ET.parse(out).getroot()
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "QMIX on Foraging-8x8-2p-2f-coop-v3" in texts
    assert record["configuration"] in texts  # the subtitle, one line here
    assert "environment steps" in texts
    rotated = [t for t in root.iter(f"{SVG}text") if "rotate(-90)" in t.get("transform", "")]
    height = float(root.get("height", "0"))
    # at most two lines, each shorter than the plot is high (6.5 px a character at 12 px)
    assert 1 < len(rotated) <= 2 and all(len(t.text or "") * 6.5 < height for t in rotated)


def test_the_committed_qmix_pictures_tell_their_configurations_apart() -> None:
    import json

    records = [json.loads(p.read_text()) for p in (REPO_ROOT / "docs/results").glob("qmix_*.json")]
    subtitles = set()
    for record in records:
        root = ET.parse(REPO_ROOT / record["curve"]).getroot()
        texts = [t.text or "" for t in root.iter(f"{SVG}text")]
        subtitles.add(" ".join(t for t in texts if t and t in record["configuration"]))
    assert len(subtitles) == len(records)


def test_a_missing_tag_is_named(tmp_path: Path) -> None:
    _write_run(tmp_path / "a", [1.0])
    with pytest.raises(SystemExit, match="no scalar 'eval/return'"):
        plot_curves.main(
            [str(tmp_path / "a"), "--tag", "eval/return", "--out", str(tmp_path / "x.svg")]
        )


def test_quality_report_counts_only_finished_runs(tmp_path: Path) -> None:
    """``quality_onpolicy.py --report`` builds the table from runs of earlier invocations: a
    seed whose evaluations stop short of ``--steps`` (still training, or killed) is left out
    and the verdict says how many seeds it rests on."""
    import subprocess
    import sys

    root = tmp_path / "runs" / "HalfCheetah-v5"
    for seed, values, last_step in ((0, [100.0, 3500.0], 4096), (1, [50.0, 2900.0], 4096),
                                    (2, [80.0], 2048)):  # fmt: skip
        summary.set_dir(root / f"seed{seed}")
        for i, value in enumerate(values):
            summary.add_scalar("eval/episode_reward", value, last_step // len(values) * (i + 1))
        summary.close()
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "quality_onpolicy.py"), "--report",
         "--env", "HalfCheetah-v5", "--steps", "4096", "--logroot", str(tmp_path / "runs"),
         "--plot_dir", str(tmp_path / "pics")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "HalfCheetah-v5 seed 2: not finished" in proc.stdout
    assert "seeds 3500, 2900; mean 3200 (sd 424) (2 of 3 seeds); target >= 3000: met so far" in (
        proc.stdout
    )
    lines = (
        ET.parse(tmp_path / "pics" / "ppo_HalfCheetah-v5.svg").getroot().findall(f"{SVG}polyline")
    )
    assert len(lines) == 2


def test_quality_keep_adds_seeds_to_an_earlier_record(tmp_path: Path) -> None:
    """``quality.py --keep RECORD`` records the seeds trained now together with the seeds of an
    earlier record that it does not train: their figures unchanged, their curves drawn from the
    recorded evaluations (their logs are gone), the earlier commit named; a record of another
    experiment or budget is refused before anything runs."""
    import json
    import subprocess
    import sys

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import quality
    from results import write_record

    experiment = quality.EXPERIMENTS["oac_HalfCheetah-v5"]
    steps = 2 * experiment.every
    earlier = write_record(
        tmp_path / "earlier.json", algorithm=experiment.algorithm, page=experiment.page,
        env=experiment.env, configuration=experiment.configuration, metric=experiment.metric,
        command="python scripts/quality.py oac_HalfCheetah-v5", budget_steps=steps,
        per_seed=[{"seed": 0, "final": 10.0, "best": 12.0, "wall_seconds": 5.0,
                   "evaluations": [[experiment.every, 12.0], [steps, 10.0]]},
                  {"seed": 1, "final": -1.0, "best": -1.0, "wall_seconds": 5.0,
                   "evaluations": [[steps, -1.0]]}],
    )  # fmt: skip
    summary.set_dir(quality.logdir(str(tmp_path / "runs"), experiment, 1))
    for step, value in ((experiment.every, 30.0), (steps, 40.0)):
        summary.add_scalar(experiment.tag, value, step)
    summary.close()

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(REPO_ROOT / "scripts" / "quality.py"), "oac_HalfCheetah-v5",
             "--report", "--seeds", "1", "--steps", str(steps), "--logroot",
             str(tmp_path / "runs"), "--plot_dir", str(tmp_path / "pics"), *extra],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    proc = run("--keep", str(tmp_path / "earlier.json"))
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "runs" / "oac_HalfCheetah-v5.json").read_text())
    assert record["seeds"] == [0, 1]
    seed0, seed1 = record["figures"]["per_seed"]
    assert seed0 == earlier["figures"]["per_seed"][0]  # kept as it was
    assert seed1["final"] == 40.0  # seed 1 of the earlier record is replaced by the new run
    assert record["figures"]["mean"] == 25.0
    assert f"from an earlier run (commit {str(earlier['commit'])[:12]})" in record["note"]
    assert "--keep docs/results/oac_HalfCheetah-v5.json" in record["command"]
    lines = (
        ET.parse(tmp_path / "pics" / "oac_HalfCheetah-v5.svg").getroot().findall(f"{SVG}polyline")
    )
    assert len(lines) == 2

    other = dict(earlier, budget={"env_steps": steps * 2})
    (tmp_path / "other.json").write_text(json.dumps(other))
    proc = run("--keep", str(tmp_path / "other.json"))
    assert proc.returncode != 0
    assert "not of this run's" in proc.stderr and "same experiment and budget" in proc.stderr
    proc = run("--keep", str(tmp_path / "missing.json"))
    assert proc.returncode != 0 and "not a readable record" in proc.stderr


def test_a_record_with_kept_seeds_gives_each_seeds_wall_time_not_the_runs(tmp_path: Path) -> None:
    """The wall time of the run that adds a seed to a record covers that seed only: the record
    keeps each seed's and leaves the whole experiment's unknown; without kept seeds it stays."""
    import argparse
    import json
    import sys

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import quality
    from results import write_record

    experiment = quality.EXPERIMENTS["oac_HalfCheetah-v5"]
    steps = experiment.every

    def seed(number: int) -> dict[str, object]:
        return {"seed": number, "final": 1.0, "best": 1.0, "wall_seconds": 50.0,
                "evaluations": [[steps, 1.0]]}  # fmt: skip

    write_record(
        tmp_path / "earlier.json", algorithm=experiment.algorithm, page=experiment.page,
        env=experiment.env, configuration=experiment.configuration, metric=experiment.metric,
        command="python scripts/quality.py oac_HalfCheetah-v5", budget_steps=steps,
        per_seed=[seed(0)], wall_seconds=50.0,
    )  # fmt: skip
    walls = {}
    for keep in (None, str(tmp_path / "earlier.json")):
        out = tmp_path / ("kept" if keep else "alone")
        args = argparse.Namespace(keep=keep, seeds=[1], steps=steps, plot_dir=None,
                                  record_dir=str(out), logroot=str(out), commit=None)  # fmt: skip
        quality.report(experiment, [seed(1)], args, 321.0)
        record = json.loads((out / "oac_HalfCheetah-v5.json").read_text())
        walls[bool(keep)] = (record["seeds"], record["figures"]["wall_seconds"])
    assert walls == {False: ([1], 321.0), True: ([0, 1], None)}


def test_quality_reads_a_run_that_went_past_the_budget_up_to_it(tmp_path: Path) -> None:
    """A run stopped by hand after ``--steps`` is recorded as the run to ``--steps``: its final
    figure, its best, its curve and its binned values (per episode, MADDPG's) end there."""
    import json
    import subprocess
    import sys

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import quality

    experiment = quality.EXPERIMENTS["maddpg_continuous_legacy_simple_spread"]
    width = experiment.bin
    summary.set_dir(quality.logdir(str(tmp_path / "runs"), experiment, 0))
    for episode in range(1, 4 * width + 1):  # bins: -30, -20, -10 and, past the budget, -5
        summary.add_scalar(experiment.tag, (-30.0, -20.0, -10.0, -5.0)[(episode - 1) // width],
                           episode)  # fmt: skip
    summary.close()
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "quality.py"), experiment.name, "--report",
         "--seeds", "0", "--steps", str(3 * width), "--logroot", str(tmp_path / "runs"),
         "--plot_dir", str(tmp_path / "pics")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "runs" / f"{experiment.name}.json").read_text())
    (run,) = record["figures"]["per_seed"]
    assert run["final"] == -10.0 and run["best"] == -10.0
    assert run["evaluations"] == [[width, -30.0], [2 * width, -20.0], [3 * width, -10.0]]
    assert record["budget"] == {"env_steps": None, "episodes": 3 * width}
    svg = ET.parse(tmp_path / "pics" / f"{experiment.name}.svg").getroot()
    (line,) = svg.findall(f"{SVG}polyline")
    assert len(line.get("points", "").split()) == 3


def test_quality_baselines_are_read_from_a_record_and_from_a_dataset(tmp_path: Path) -> None:
    """A ``record`` baseline is the published record's mean over the seeds of the run (only
    those it holds, said in a note); a ``dataset`` baseline is the dataset's mean episode
    return; a missing record or dataset is an error that says how to make it."""
    import json
    import sys

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import quality

    sac = json.loads((REPO_ROOT / "docs" / "results" / "sac_HalfCheetah-v5.json").read_text())
    finals = {run["seed"]: run["final"] for run in sac["figures"]["per_seed"]}
    baseline = {"name": "SAC", "record": "sac_HalfCheetah-v5"}
    resolved, notes = quality.resolve_baseline(baseline, [0, 1])
    assert resolved == {"name": "SAC", "value": round((finals[0] + finals[1]) / 2, 2)}
    assert notes == []
    resolved, notes = quality.resolve_baseline(baseline, [1, 99])
    assert resolved is not None and resolved["value"] == round(finals[1], 2)
    assert notes == ["the baseline is over seeds 1, the ones sac_HalfCheetah-v5 holds"]
    with pytest.raises(SystemExit, match="none of this run's"):
        quality.resolve_baseline(baseline, [98, 99])
    with pytest.raises(SystemExit, match="publish nothing_here first"):
        quality.resolve_baseline({"name": "x", "record": "nothing_here"}, [0])

    dataset = tmp_path / "hopper-medium-v0"
    dataset.mkdir()
    (dataset / "generation.json").write_text(json.dumps({
        "episodes": 12, "samples": 3000, "mean_episode_return": 1234.56,
        "algorithm": "SAC, stochastic actions",
        "policy": {"eval_return": 1500.4, "steps_trained": 40000},
    }))  # fmt: skip
    resolved, notes = quality.resolve_baseline({"name": "mean", "dataset": str(dataset)}, [0])
    assert resolved == {"name": "mean", "value": 1234.6, "dataset": "hopper-medium-v0"}
    assert notes == ["the dataset: 12 episodes, 3,000 steps, SAC, stochastic actions, a policy "
                     "that evaluates at 1,500 after 40,000 steps of training; its mean episode "
                     "return 1,234.6"]  # fmt: skip
    with pytest.raises(SystemExit, match="make_offline_dataset.py"):
        quality.resolve_baseline({"name": "mean", "dataset": str(tmp_path / "none")}, [0])
    every = [e.baseline for e in quality.EXPERIMENTS.values() if e.baseline]
    assert all({"value", "record", "dataset"} & set(b) for b in every)


def test_a_quality_record_names_the_commit_its_training_started_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run takes an hour; commits made meanwhile must not be named as the code that trained."""
    import json
    import sys

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import quality
    import results

    experiment = quality.EXPERIMENTS["oac_HalfCheetah-v5"]
    steps = 2 * experiment.every
    heads = iter(["a" * 40, "b" * 40])
    monkeypatch.setattr(results, "current_commit", lambda: next(heads))

    def train(experiment: quality.Experiment, seeds: list[int], steps: int, logroot: str,
              parallel: int, resume: bool = False) -> float:  # fmt: skip
        summary.set_dir(quality.logdir(logroot, experiment, seeds[0]))
        for step in (experiment.every, steps):
            summary.add_scalar(experiment.tag, 1.0, step)
        summary.close()
        next(heads)  # a commit lands while the run trains
        return 1.0

    monkeypatch.setattr(quality, "train", train)
    quality.main(["oac_HalfCheetah-v5", "--seeds", "0", "--steps", str(steps),
                  "--logroot", str(tmp_path)])  # fmt: skip
    record = json.loads((tmp_path / "oac_HalfCheetah-v5.json").read_text())
    assert record["commit"] == "a" * 40


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 20)), max_size=8))
@settings(max_examples=200, deadline=None)
def test_busy_seconds_is_the_length_of_the_union_of_the_spans(
    starts_and_lengths: list[tuple[float, float]],
) -> None:
    import sys

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import quality

    spans = [(first, first + length) for first, length in starts_and_lengths]
    # the union measured on a fine grid: each cell whose middle some span covers
    cells = 12_000
    covered = sum(
        any(first <= (i + 0.5) / 100 <= last for first, last in spans) for i in range(cells)
    )
    assert quality.busy_seconds(spans) == pytest.approx(covered / 100, abs=0.01 * len(spans) + 1e-9)


def test_quality_reads_a_resumed_run_as_its_parts(tmp_path: Path) -> None:
    """A run stopped after its evaluation at 2,500 steps and before its checkpoint, then
    resumed: the evaluation logged twice counts once, as the resumed part logged it, and the
    wall time is the two parts' time, not the hour between them."""
    import sys

    from torch.utils.tensorboard import SummaryWriter

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import quality

    experiment = quality.EXPERIMENTS["dqn_CartPole-v1"]
    folder = Path(quality.logdir(str(tmp_path), experiment, 0))
    parts = [(1000.0, [(2500, 10.0, 1000.0), (2600, 0.0, 1100.0)]),  # (start, [(step, value, t)])
             (5000.0, [(2500, 12.0, 5050.0), (5000, 30.0, 5200.0)])]  # fmt: skip
    for index, (start, points) in enumerate(parts):
        writer = SummaryWriter(str(folder), filename_suffix=f".part{index}")
        writer.add_scalar("train/loss", 1.0, 0, walltime=start)
        for step, value, at in points:
            tag = experiment.tag if step % 2500 == 0 else "train/episode_reward"
            writer.add_scalar(tag, value, step, walltime=at)
        writer.close()
    (run,) = quality.finished(experiment, [0], 5000, str(tmp_path))
    assert run["evaluations"] == [[2500, 12.0], [5000, 30.0]]
    assert run["final"] == 30.0 and run["best"] == 30.0
    assert run["wall_seconds"] == 100.0 + 200.0


@pytest.mark.slow  # runs an example script
def test_quality_resume_continues_each_seed_from_the_checkpoint_its_example_writes(
    tmp_path: Path,
) -> None:
    """``--resume`` with a larger ``--steps``: the real example continues from the checkpoint
    of the first run (its log appended to), and the record holds both parts' evaluations.
    MADDPG and MAPPO write ``checkpoint_agent<i>.pt``, which ``--resume`` finds (MAPPO is the
    example run here: one update of 32 envs per part); a seed with logs and no checkpoint is
    refused before anything runs."""
    import json
    import subprocess
    import sys

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import quality

    for experiment in quality.EXPERIMENTS.values():
        per_agent = experiment.example in ("MADDPG", "MAPPO")
        assert experiment.checkpoint == (
            "checkpoint_agent0.pt" if per_agent else "checkpoint.pt"
        ), experiment.name
    script = str(REPO_ROOT / "scripts" / "quality.py")
    common = ["mappo_simple_speaker_listener", "--seeds", "0", "--logroot", str(tmp_path)]

    def quality_run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, script, *common, *args], capture_output=True,
                              text=True, timeout=300)  # fmt: skip

    proc = quality_run("--steps", "800")  # one update of 32 envs
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = quality_run("--steps", "1600", "--resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("--resume") == 1, proc.stdout
    for blemish in ("Traceback", "Exception ignored"):
        assert blemish not in proc.stderr, proc.stderr[-2000:]
    record = json.loads((tmp_path / "mappo_simple_speaker_listener.json").read_text())
    (run,) = record["figures"]["per_seed"]
    assert [step for step, _ in run["evaluations"]] == [800, 1600]
    assert "resumed from its checkpoint" in record["note"]
    seed = tmp_path / "MAPPO" / "simple_speaker_listener"
    log = (seed / "seed0.log").read_text()
    # the first part's lines are kept, then the resumed part's
    assert log.count("done:") == 2 and log.index("done:") < log.index("resumed from"), log
    assert "done: 1600 steps" in log, log[-2000:]

    (seed / "seed0" / "checkpoint_agent0.pt").unlink()
    proc = quality_run("--steps", "2400", "--resume")
    assert proc.returncode != 0
    assert "no checkpoint_agent0.pt to continue from" in proc.stderr, proc.stderr[-2000:]
