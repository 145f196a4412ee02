"""The results tables are rendered from the records of ``docs/results/``: the committed tables
match the records, a record renders to the row it should, and a record missing a field is refused
with the field's name."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import render_results  # noqa: E402
import results_summary as summary  # noqa: E402
from benchrecord import load_bench_records, render_bench, validate_bench_record  # noqa: E402
from results import load_records, validate_record, write_record  # noqa: E402


@pytest.fixture
def record() -> dict[str, Any]:
    """A complete record of two seeds."""
    per_seed = [
        {"seed": 0, "final": 1200, "best": 1300, "wall_seconds": 60.0,
         "evaluations": [[500_000, 900], [1_000_000, 1200]]},
        {"seed": 1, "final": 1000, "best": 1100, "wall_seconds": 62.0,
         "evaluations": [[500_000, 700], [1_000_000, 1000]]},
    ]  # fmt: skip
    return {
        "schema": 1,
        "source": "measured",
        "algorithm": "PPO",
        "page": "ppo",
        "env": "Hopper-v5",
        "configuration": "PARL's MuJoCo configuration",
        "metric": "mean return of 10 deterministic evaluation episodes",
        "command": "python scripts/quality_onpolicy.py --env Hopper-v5",
        "commit": None,
        "versions": dict.fromkeys(["python", "torch", "numpy", "gymnasium", "mujoco"]),
        "machine": {"cpu": None, "cores": 2},
        "seeds": [0, 1],
        "budget": {"env_steps": 1_000_000},
        "figures": {
            "per_seed": per_seed,
            "mean": 1100,
            "sd": 141,
            "wall_seconds": 150.0,
            "baseline": None,
        },  # fmt: skip
        "curve": None,
        "note": None,
    }


def test_the_committed_tables_match_the_records() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_results.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_every_committed_records_curve_is_a_drawing_in_the_docs() -> None:
    # a record written with --plot_dir outside the repository names a path the pages cannot show
    for record in load_records():
        if record["curve"] is not None:
            path = ROOT / record["curve"]
            assert record["curve"].startswith("docs/curves/") and path.is_file(), (
                f"{record['algorithm']} on {record['env']}: curve {record['curve']!r}"
            )


def test_every_committed_record_is_valid() -> None:
    records = load_records()
    assert records
    assert {r["source"] for r in records} <= {"measured", "transcribed"}


def test_a_record_renders_to_a_row_with_mean_sd_seeds_budget_and_wall_time(record) -> None:
    row = render_results.page_row(record)
    assert row == (
        "| Hopper-v5, PARL's MuJoCo configuration | 1M steps | 0, 1 | 1,200, 1,000 | "
        "1,100 ± 141 | 1,300, 1,100 | 2 min | measured |"
    )
    assert summary.headline_row(record, "docs/algorithms/ppo.md") == [
        "PPO", "Hopper-v5", "1M env steps", "2", "1,100 ± 140", "return", "-", "61 s",
        "[ppo](docs/algorithms/ppo.md)",
    ]  # fmt: skip


def test_unknown_figures_render_as_a_dash(record) -> None:
    record["figures"].update(mean=None, sd=None, wall_seconds=None)
    record["figures"]["per_seed"][1]["wall_seconds"] = None
    row = render_results.page_row(record).split(" | ")
    assert row[4] == "-" and row[6] == "-"


def test_without_the_whole_runs_wall_time_each_seeds_is_shown(record) -> None:
    record["figures"]["wall_seconds"] = None
    assert render_results.page_row(record).split(" | ")[6] == "60 s, 62 s (each seed)"


def test_a_budget_in_episodes_renders_as_episodes(record) -> None:
    record["budget"] = {"env_steps": None, "episodes": 1000}
    assert render_results.page_row(record).split(" | ")[1] == "1,000 episodes"
    assert summary.budget(record) == "1k episodes"


def test_evaluations_at_different_steps_render_at_five_marks_nearest_first(record) -> None:
    # runs of whole episodes evaluate a few steps apart: 500,012 and 499,990 are the 500k mark
    record["figures"]["per_seed"][0]["evaluations"] = [
        [200_100, 5],
        [500_012, 900],
        [1_000_000, 1200],
    ]
    record["figures"]["per_seed"][1]["evaluations"] = [
        [199_950, 3],
        [499_990, 700],
        [1_000_003, 1000],
    ]
    lines = render_results.evaluation_table(record).splitlines()
    assert lines[0].count("steps") == 5 and "| 200k steps |" in lines[0]
    # each mark reads the last evaluation at or just after it
    assert lines[-1] == "| seed 1 | 3 | 3 | 700 | 700 | 1,000 | 1,100 |"
    record["figures"]["per_seed"][1]["evaluations"] = [[450_000, 700], [1_000_003, 1000]]
    assert (
        render_results.evaluation_table(record)
        .splitlines()[-1]
        .startswith("| seed 1 | - | - | 700 |")
    )


def test_evaluations_every_fiftieth_of_the_budget_render_each_marks_own(record) -> None:
    # evaluations exactly on a grid of 2% of the budget: the mark's own, not the next one
    record["budget"] = {"env_steps": 2_000_000}
    for entry in record["figures"]["per_seed"]:
        entry["evaluations"] = [[k * 40_000, k] for k in range(51)]
    lines = render_results.evaluation_table(record).splitlines()
    assert "| 400k steps | 800k steps | 1.2M steps | 1.6M steps | 2M steps |" in lines[0]
    assert lines[-1].startswith("| seed 1 | 10 | 20 | 30 | 40 | 50 |")


def test_a_page_shows_its_reference_its_measured_notes_and_its_curve(record) -> None:
    record["figures"]["baseline"] = {"name": "PARL's published curve", "value": 3300}
    record.update(note="one seed", curve="docs/curves/ppo_Hopper-v5.svg")
    transcribed = copy.deepcopy(record)
    transcribed.update(source="transcribed", note="copied from the old page", env="Walker2d-v5")
    page = render_results.render_page([record, transcribed])
    # the rows share the reference: said once; only the measured row's note shows, by its row
    assert "Beside it: PARL's published curve, 3,300.\n" in page
    assert "Notes, by row of the table:\n\n- row 1: one seed.\n" in page
    assert "copied from the old page" not in page
    assert (
        page.count("![PPO on Hopper-v5, PARL's MuJoCo configuration](../curves/ppo_Hopper-v5.svg)")
        == 1
    )


def test_a_page_says_each_metric_once_and_by_row_when_the_rows_differ(record) -> None:
    rows = [copy.deepcopy(record) for _ in range(4)]
    for row, metric in zip(rows, ["returns", "scores", "returns", "returns"], strict=True):
        row["metric"] = metric
    page = render_results.render_page(rows)
    assert "Figures, by row of the table:\n\n- rows 1, 3 and 4: returns.\n- row 2: scores." in page
    assert render_results.render_page(rows[2:]).count("returns") == 1
    assert "Figures: returns.\n" in render_results.render_page(rows[2:])


def test_the_evaluations_along_the_run_render_a_row_per_seed(record) -> None:
    table = render_results.evaluation_table(record)
    assert table is not None
    assert table.splitlines()[-1] == "| seed 1 | 700 | 1,000 | 1,100 |"


@pytest.mark.parametrize(
    "path", ["command", "figures.mean", "budget.env_steps", "versions.torch", "machine.cpu"]
)
def test_a_record_missing_a_field_is_refused_naming_it(record, path: str) -> None:
    broken = copy.deepcopy(record)
    *parents, last = path.split(".")
    target = broken
    for part in parents:
        target = target[part]
    del target[last]
    with pytest.raises(ValueError, match=f"missing field '{path}'"):
        validate_record(broken)


def test_a_seed_missing_its_final_return_is_refused(record) -> None:
    del record["figures"]["per_seed"][1]["final"]
    with pytest.raises(ValueError, match=r"figures\.per_seed\[1\]\.final"):
        validate_record(record)


def test_a_record_of_an_unknown_source_is_refused(record) -> None:
    record["source"] = "guessed"
    with pytest.raises(ValueError, match="'source' is 'guessed'"):
        validate_record(record)


def test_write_record_computes_mean_and_sd_and_reads_the_machine(tmp_path: Path) -> None:
    path = tmp_path / "ppo.json"
    written = write_record(
        path,
        algorithm="PPO",
        page="ppo",
        env="Hopper-v5",
        configuration=None,
        metric="evaluation return",
        command="python scripts/quality_onpolicy.py",
        budget_steps=1000,
        per_seed=[{"seed": 0, "final": 10.0}, {"seed": 1, "final": 20.0}],
    )
    assert json.loads(path.read_text()) == written
    assert written["figures"]["mean"] == 15.0
    assert written["figures"]["sd"] == pytest.approx(7.0711, abs=1e-4)
    assert written["versions"]["python"] and written["machine"]["cores"]
    assert written["figures"]["per_seed"][0]["best"] is None


@pytest.mark.parametrize(
    ("value", "shown"),
    [(1234.56, "1,234.6"), (-20.74, "-20.7"), (4.25, "4.2"), (0.0, "0.0"), (0.4321, "0.432"),
     (-0.0713, "-0.0713"), (1500, "1,500"), (None, "-")],
)  # fmt: skip
def test_figures_below_one_keep_three_significant_digits(value: Any, shown: str) -> None:
    # a normalised return of 0.43 or a loss of 0.341 must not print as 0.4 and 0.3
    assert render_results.number(value) == shown


# -- the README's headline and the Results page ---------------------------------------------


def _cells(path: Path, block: str) -> list[list[str]]:
    """The cells of every table row between a file's ``results:<block>`` markers."""
    text = path.read_text(encoding="utf-8")
    body = text[
        text.index(f"<!-- results:{block} start -->") : text.index(f"<!-- results:{block} end -->")
    ]
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
            for line in body.splitlines() if line.startswith("| ")]  # fmt: skip


@pytest.mark.parametrize(("path", "block"), [(ROOT / "README.md", "summary"),
                                             (ROOT / "docs" / "results.md", "all"),
                                             (ROOT / "docs" / "results.md", "normalised")])  # fmt: skip
def test_every_results_cell_is_short(path: Path, block: str) -> None:
    long = [cell for row in _cells(path, block) for cell in row if len(cell) > 45]
    assert not long, f"{path.name}: cells over 45 characters: {long}"


def test_the_readme_has_a_headline_row_per_algorithm_with_its_units() -> None:
    rows = _cells(ROOT / "README.md", "summary")
    header, rows = rows[0], rows[1:]
    assert header == summary.HEADLINE_HEADER
    pages = [re.search(r"\[(\w+)\]", row[-1]).group(1) for row in rows]  # type: ignore[union-attr]
    assert pages == [page for page in render_results.ORDER if page in summary.HEADLINES]
    assert len(rows) == 20
    by_page = dict(zip(pages, rows, strict=True))
    # the budget names its unit and the result its measure
    assert by_page["maml"][2].endswith(" meta-updates") and "lower is better" in by_page["maml"][5]
    assert by_page["alphazero"][2].endswith(" iterations") and by_page["alphazero"][5] == "win rate"
    assert by_page["iql"][2].endswith(" updates") and by_page["ppo"][2].endswith(" env steps")
    assert by_page["pg"][2].endswith(" episodes") and by_page["ppo"][5] == "return"
    # a published reference beside the result
    assert by_page["sac"][6].startswith("PARL: ")


def test_the_results_page_has_every_record_under_its_algorithm() -> None:
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    rows = _cells(ROOT / "docs" / "results.md", "all")
    assert len([row for row in rows if row[0] != "algorithm"]) == len(load_records())
    assert text.count("\n### ") == len({r["page"] for r in load_records()})


@pytest.mark.parametrize(
    ("mean", "sd", "shown"),
    [(6002, 579, "6,000 ± 580"), (-7.793, 0.0591, "-7.79 ± 0.06"), (3.315, 17.54, "3.3 ± 17.5"),
     (500.0, 0.0, "500 ± 0"), (4561.9, None, "4,560"), (0.30943, None, "0.309"),
     (-17.4, None, "-17.4")],
)  # fmt: skip
def test_a_result_keeps_three_significant_digits_in_the_larger_of_mean_and_sd(
    record, mean: float, sd: float | None, shown: str
) -> None:
    record["figures"].update(mean=mean, sd=sd)
    assert summary.mean_sd(record) == shown


def test_budgets_and_measures_name_their_units(record) -> None:
    assert summary.budget(record) == "1M env steps"
    record.update(page="maml", metric="test MSE on 10,000 held-out 5-shot tasks (lower is better)")
    record["budget"]["env_steps"] = 40_000
    assert (summary.budget(record), summary.measure(record)) == (
        "40k meta-updates", "loss (MSE, lower is better)")  # fmt: skip
    record.update(page="alphazero", metric="share of 100 games won against a random player")
    record["budget"]["env_steps"] = 50
    assert (summary.budget(record), summary.measure(record)) == ("50 iterations", "win rate")
    record.update(page="iql", metric="mean return of 10 episodes")
    record["budget"]["env_steps"] = 40_000
    record["figures"]["baseline"] = {"name": "the dataset's mean episode return", "value": 807.5,
                                     "dataset": "hopper-medium-replay-v0"}  # fmt: skip
    assert summary.budget(record) == "40k updates"
    assert summary.env(record) == "Hopper-v5, medium-replay"
    assert summary.reference(record) == "dataset: 808"


def test_a_long_cell_is_refused_naming_it(record) -> None:
    record["env"] = "x" * 41
    with pytest.raises(ValueError, match="over 40 characters: 'xxx"):
        summary.render_algorithm("PPO", "ppo", [record])


def test_a_normalised_score_needs_a_published_reference_and_a_random_figure(record) -> None:
    randoms = {"Hopper-v5": {"env": "Hopper-v5", "measure": "return", "records": None,
                             "mean": 100.0}}  # fmt: skip
    assert summary.normalised("ppo_Hopper-v5", record, randoms) is None  # no reference
    record["figures"]["baseline"] = {"name": "PARL's published curve", "value": 2100}
    expected = (1100 - 100) / (2100 - 100)
    assert summary.normalised("ppo_Hopper-v5", record, randoms) == pytest.approx(expected)
    assert summary.normalised("ppo_Hopper-v5", record, {}) is None  # no random figure
    # a random figure that names its records is the zero of those only
    named = {"mpe": {"env": "Walker2d-v5", "measure": "return", "records": ["ppo_Hopper-v5"],
                     "mean": 100.0}}  # fmt: skip
    assert summary.normalised("ppo_Hopper-v5", record, named) == pytest.approx(expected)
    assert summary.normalised("ppo_Hopper-v5_other", record, named) is None
    record["metric"] = "mean score of 5 greedy evaluation games"  # another measure
    assert summary.normalised("ppo_Hopper-v5", record, randoms) is None


def test_the_normalised_scores_picture_is_current() -> None:
    import plot_normalised

    assert plot_normalised.main(["--check"]) == 0, "run python scripts/plot_normalised.py"
    assert "<rect" in render_results.NORMALISED_SVG.read_text(encoding="utf-8")


def test_every_random_baseline_record_is_complete_and_names_records_that_exist() -> None:
    randoms = summary.load_random_baselines()
    names = set(render_results.ordered_records())
    assert "HalfCheetah-v5" in randoms
    for baseline in randoms.values():
        assert baseline["episodes"] >= 2 and baseline["command"].startswith("python scripts/")
        assert set(baseline["records"] or ()) <= names, baseline["records"]


def test_a_random_policys_returns_are_measured_and_bad_flags_are_named(capsys) -> None:
    import random_baselines

    returns = random_baselines.gym_returns("CartPole-v1", 3, seed=0)
    assert len(returns) == 3 and all(8 <= value <= 500 for value in returns)
    with pytest.raises(SystemExit):
        random_baselines.main(["simple", "--mpe"])
    assert "--mpe needs --records" in capsys.readouterr().err


# -- benchmark records ---------------------------------------------------------------------------

BENCH_SCRIPTS = sorted((ROOT / "scripts").glob("bench_*.py"))


def test_every_committed_benchmark_record_is_valid_and_rendered_somewhere() -> None:
    records = load_bench_records()
    assert records
    pages = [p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md")]
    for name in records:
        assert any(f"<!-- bench:{name} start -->" in text for text in pages), name


@pytest.mark.parametrize("script", BENCH_SCRIPTS, ids=lambda p: p.stem)
def test_every_benchmark_script_can_write_its_record(script: Path) -> None:
    # the flag and the write, both: a script that takes --record but never writes is caught too
    text = script.read_text(encoding="utf-8")
    if script.stem == "bench_offpolicy_dqn":  # a part of bench_offpolicy.py's record
        assert "table.row(" in text
        return
    assert "add_record_flag(parser)" in text and "report.write(args.record)" in text


@pytest.mark.parametrize("page", ["benchmarks.md", "guides/performance.md"])
def test_the_tables_of_benchmark_scripts_name_each_script_that_runs(page: str) -> None:
    """Each page's table of ``scripts/bench_*.py`` names every script with a ``__main__`` and
    none without (``bench_offpolicy_dqn.py`` is a part of ``bench_offpolicy.py``)."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `scripts/bench_")]
    named = set(re.findall(r"`(?:scripts/)?(bench_\w+)\.py`", "\n".join(rows)))
    runnable = {s.stem for s in BENCH_SCRIPTS if "__main__" in s.read_text(encoding="utf-8")}
    assert named == runnable, (
        f"{page}: not named {sorted(runnable - named)}, not a script {sorted(named - runnable)}"
    )


def test_a_benchmark_run_writes_a_record_that_renders(tmp_path: Path) -> None:
    out = tmp_path / "threads.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_threads.py"), "--actors", "2",
         "--steps", "1", "--repeat", "1", "--threads", "1", "--record", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = validate_bench_record(json.loads(out.read_text(encoding="utf-8")))
    assert record["source"] == "measured" and record["script"] == "bench_threads"
    # the command recorded is the one that reproduces the figures, without the record's path
    assert record["command"] == (
        "python scripts/bench_threads.py --actors 2 --steps 1 --repeat 1 --threads 1"
    )
    assert record["machine"]["cores"] and record["versions"]["torch"]
    (table,) = record["tables"]
    assert table["columns"] == ["torch threads per actor", "best", "worst"]
    assert table["rows"][0][0] == "num_threads=1" and table["rows"][0][1].endswith(" s")
    rendered = render_bench(record)
    assert "| num_threads=1 | " in rendered
    assert "`python scripts/bench_threads.py --actors 2" in rendered


def test_a_benchmark_record_missing_a_field_or_with_a_ragged_row_is_refused() -> None:
    record = json.loads((ROOT / "docs" / "results" / "bench" / "bench_remote.json").read_text())
    broken = copy.deepcopy(record)
    del broken["command"]
    with pytest.raises(ValueError, match="missing field 'command'"):
        validate_bench_record(broken)
    ragged = copy.deepcopy(record)
    ragged["tables"][0]["rows"][0].append("extra")
    with pytest.raises(ValueError, match="a row of 5 cells for 4 columns"):
        validate_bench_record(ragged)


def test_a_block_naming_a_missing_benchmark_record_is_an_error() -> None:
    text = "<!-- bench:bench_nowhere start -->\n<!-- bench:bench_nowhere end -->\n"
    with pytest.raises(SystemExit, match=r"docs/results/bench/bench_nowhere\.json"):
        render_results.render_bench_file(text, "docs/x.md", load_bench_records())


def test_a_stale_benchmark_block_is_rendered_anew() -> None:
    records = load_bench_records()
    text = "<!-- bench:bench_threads start -->\nold figures\n<!-- bench:bench_threads end -->\n"
    rendered = render_results.render_bench_file(text, "docs/x.md", records)
    assert "old figures" not in rendered
    assert rendered == render_results.render_bench_file(rendered, "docs/x.md", records)


def test_a_per_episode_curve_becomes_one_mean_per_bin() -> None:
    import plot_curves

    points = [(step, float(step % 2)) for step in range(1, 2001)]  # 0, 1, 0, 1, ...
    points.append((2001, 10.0))  # a last, partial bin
    assert plot_curves.bin_points(points, 1000) == [(1000, 0.5), (2000, 0.5), (3000, 10.0)]
