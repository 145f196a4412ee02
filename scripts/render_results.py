"""Render the results tables from the records of ``docs/results/`` (``scripts/results.py``).

    python scripts/render_results.py           # rewrite the tables in place
    python scripts/render_results.py --check   # exit 1, naming each stale file

Each algorithm page holds its table between ``<!-- results:<page> start -->`` and
``<!-- results:<page> end -->`` (``<page>`` is the record's ``page``, e.g. ``ppo``), the README
its summary between ``<!-- results:summary start -->`` and ``<!-- results:summary end -->``
(a row per algorithm: ``scripts/results_summary.py``), and the Results page every record between
``<!-- results:all start -->`` and ``<!-- results:all end -->``, the normalised scores between
``<!-- results:normalised start -->`` and ``<!-- results:normalised end -->``.
A benchmark's figures (``scripts/benchrecord.py``, records in ``docs/results/bench/``) go between
``<!-- bench:<record> start -->`` and ``<!-- bench:<record> end -->`` in any page of ``docs/``.
Only the text between the markers is rendered; the rest of a file is left as written.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_summary as summary
from benchrecord import load_bench_records, render_bench
from results import ROOT, load_named_records
from results_summary import grouped, wall_time

README = ROOT / "README.md"
NORMALISED_SVG = ROOT / "docs" / "curves" / "normalised_scores.svg"
ORDER = ["pg", "dqn", "ddpg", "td3", "sac", "ppo", "a2c", "impala", "es", "maddpg", "mappo",
         "qmix", "coma", "cql", "iql", "oac", "dt", "maml", "ga3c", "alphazero"]  # fmt: skip
BLOCK = re.compile(r"(<!-- results:(\w+) start -->\n)(.*?)(<!-- results:\2 end -->)", re.S)
BENCH_BLOCK = re.compile(r"(<!-- bench:(\w+) start -->\n)(.*?)(<!-- bench:\2 end -->)", re.S)


def number(value: float | None) -> str:
    """A figure as the tables print it: thousands separated; an integer as it is, a float with
    one decimal, or below 1 three significant digits (a normalised return of 0.43, a loss of
    0.341; a transcribed figure keeps the precision the page gave it)."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,d}"
    return f"{value:,.1f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"


def steps(value: int | None) -> str:
    """``1000000`` -> ``1M``, ``1200000`` -> ``1.2M``, ``250000`` -> ``250k``, others with
    separators."""
    if value is None:
        return "not stated"
    if value % 1_000_000 == 0:
        return f"{value // 1_000_000}M"
    if value > 1_000_000 and value % 10_000 == 0:
        return f"{value / 1_000_000:g}M"
    if value % 1_000 == 0 and value < 1_000_000:
        return f"{value // 1_000}k"
    return f"{value:,}"


def budget(record: dict[str, Any]) -> str:
    """``1M steps``, or ``1,000 episodes`` for a run that counts episodes."""
    episodes = record["budget"].get("episodes")
    if record["budget"]["env_steps"] is None and episodes is not None:
        return f"{episodes:,} episodes"
    return f"{steps(record['budget']['env_steps'])} steps"


def _task(record: dict[str, Any]) -> str:
    return ", ".join(part for part in (record["env"], record["configuration"]) if part)


def _seeds(record: dict[str, Any]) -> str:
    seeds = record["seeds"]
    return f"{len(seeds)} seed" + ("s" if len(seeds) != 1 else "")


def mean_sd(record: dict[str, Any]) -> str:
    """``6,002 ± 579``; the mean alone for one seed; ``-`` when the record has no mean."""
    figures = record["figures"]
    if figures["mean"] is None:
        return "-"
    if figures["sd"] is None:
        return number(figures["mean"])
    return f"{number(figures['mean'])} ± {number(figures['sd'])}"


def run_time(record: dict[str, Any]) -> str:
    """The whole experiment's wall time, else each seed's (``4 min, 5 min``), else ``-``."""
    if record["figures"]["wall_seconds"] is not None:
        return wall_time(record["figures"]["wall_seconds"])
    walls = [entry["wall_seconds"] for entry in record["figures"]["per_seed"]]
    if any(wall is None for wall in walls) or not walls:
        return "-"
    return ", ".join(wall_time(wall) for wall in walls) + (" (each seed)" if len(walls) > 1 else "")


def page_row(record: dict[str, Any]) -> str:
    """One row of an algorithm page's table: task, budget, seeds, finals, mean ± sd, bests,
    wall time, source."""
    per_seed = record["figures"]["per_seed"]
    finals = ", ".join(number(entry["final"]) for entry in per_seed)
    bests = ", ".join(number(entry["best"]) for entry in per_seed)
    seeds = ", ".join(str(seed) for seed in record["seeds"])
    cells = [
        _task(record),
        budget(record),
        seeds,
        finals,
        mean_sd(record),
        bests if any(entry["best"] is not None for entry in per_seed) else "-",
        run_time(record),
        record["source"],
    ]
    return "| " + " | ".join(cells) + " |"


PAGE_HEADER = (
    "| task | budget | seeds | final, per seed | mean ± sd | best, per seed | wall time | source |\n"
    "|---|---|---|---|---|---|---|---|"
)


def evaluation_table(record: dict[str, Any]) -> str | None:
    """The evaluations along the run, a row per seed; ``None`` when the record has none.

    When every seed was evaluated at the same few (at most 7) points, those are the columns.
    Otherwise the columns are five even marks of the budget, and each cell is the seed's
    evaluation closest to its mark within 2% of the budget (runs of whole episodes evaluate a
    few steps late or early), else its last evaluation before the mark, or ``-`` before its
    first evaluation."""
    per_seed = record["figures"]["per_seed"]
    marks = [[step for step, _ in entry["evaluations"] or []] for entry in per_seed]
    if not marks or not all(marks):
        return None
    spent = record["budget"]["env_steps"] or record["budget"].get("episodes")
    unit = "steps" if record["budget"]["env_steps"] else "episodes"
    columns = marks[0]
    if any(m != columns for m in marks) or len(columns) > 7:
        if not spent:
            return None
        columns = [spent * k // 5 for k in range(1, 6)]

    def nearest(evaluations: list[list[float]], mark: int) -> float | None:
        # the curve read at the mark: the evaluation closest to it within 2% of the budget (the
        # earlier of two as close), else the last one before it
        window = 0.02 * (spent or 0)
        close = [(abs(step - mark), step, value) for step, value in evaluations]
        close = [entry for entry in close if entry[0] <= window]
        if close:
            return min(close)[2]
        before = [value for step, value in evaluations if step <= mark]
        return before[-1] if before else None

    lines = [
        f"| {record['algorithm']}, {_task(record)} | "
        + " | ".join(f"{steps(step)} {unit}" for step in columns)
        + " | best |",
        "|---" * (len(columns) + 2) + "|",
    ]
    for entry in per_seed:
        values = " | ".join(number(nearest(entry["evaluations"], mark)) for mark in columns)
        lines.append(f"| seed {entry['seed']} | {values} | {number(entry['best'])} |")
    return "\n".join(lines)


def render_page(records: list[dict[str, Any]]) -> str:
    """The Markdown between one page's markers."""
    parts = [PAGE_HEADER + "\n" + "\n".join(page_row(record) for record in records)]
    parts += [table for record in records if (table := evaluation_table(record))]
    parts.append(grouped("Figures", records, lambda r: r["metric"]))
    commands = list(dict.fromkeys(f"`{r['command']}`" for r in records))
    parts.append(("Command: " if len(commands) == 1 else "Commands: ") + ", ".join(commands) + ".")

    def reference(r: dict[str, Any]) -> str | None:
        baseline = r["figures"]["baseline"]
        return f"{baseline['name']}, {number(baseline['value'])}" if baseline else None

    # a transcribed record's note is about its provenance, which the source column says
    def note(r: dict[str, Any]) -> str | None:
        return r["note"].rstrip(".") if r["note"] and r["source"] == "measured" else None

    parts += [text for text in (grouped("Beside it", records, reference),
                                grouped("Notes", records, note)) if text]  # fmt: skip
    # each curve once, as the pages under docs/algorithms/ reach docs/curves/
    curves = dict.fromkeys(
        (r["curve"], f"{r['algorithm']} on {_task(r)}") for r in records if r["curve"]
    )
    parts += [f"![{alt}](../{path.removeprefix('docs/')})" for path, alt in curves]
    return "\n\n".join(parts) + "\n"


def _title(page: str) -> str:
    """The algorithm page's own title (its first heading)."""
    first = (ROOT / "docs" / "algorithms" / f"{page}.md").read_text(encoding="utf-8")
    return first.splitlines()[0].removeprefix("# ")


def render_all(records: list[dict[str, Any]]) -> str:
    """The Results page: a section per algorithm page, in the pages' order."""
    pages = list(dict.fromkeys(record["page"] for record in records))
    return (
        "\n\n".join(
            summary.render_algorithm(_title(page), page, [r for r in records if r["page"] == page])
            for page in pages
        )
        + "\n"
    )


def render_file(path: Path, named: dict[str, dict[str, Any]]) -> str:
    """``path``'s text with every marked block rendered from the records (by name)."""
    records = list(named.values())
    # the figure's path as this file reaches it
    figure = os.path.relpath(NORMALISED_SVG, path.parent)

    def block(match: re.Match[str]) -> str:
        name = match.group(2)
        if name == "summary":
            body = summary.render_headline(named, ORDER)
        elif name == "all":
            body = render_all(records)
        elif name == "normalised":
            body = summary.render_normalised(named, summary.load_random_baselines(), figure)
        else:
            mine = [record for record in records if record["page"] == name]
            if not mine:
                raise SystemExit(f"{path.relative_to(ROOT)}: no record has page {name!r}")
            body = render_page(mine)
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(block, path.read_text(encoding="utf-8"))


def render_bench_file(text: str, where: str, records: dict[str, dict[str, Any]]) -> str:
    """``text`` with every benchmark block rendered from ``records`` (by record name)."""

    def block(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in records:
            raise SystemExit(f"{where}: no benchmark record docs/results/bench/{name}.json")
        return match.group(1) + render_bench(records[name]) + match.group(4)

    return BENCH_BLOCK.sub(block, text)


def ordered_records() -> dict[str, dict[str, Any]]:
    """Every record by name, in the tables' order: the algorithms in the order of the algorithm
    pages' index; within one, the longest runs (the MuJoCo 1M-step tables) before the shorter
    ones."""
    return dict(
        sorted(
            load_named_records().items(),
            key=lambda item: (ORDER.index(item[1]["page"]),
                              -(item[1]["budget"]["env_steps"] or 0), item[1]["env"]),
        )
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale files, change none")
    args = parser.parse_args(argv)
    named = ordered_records()
    bench = load_bench_records()
    stale = []
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "_build" not in p.parts]
    for path in [README, *pages]:
        text = path.read_text(encoding="utf-8")
        rendered = render_bench_file(render_file(path, named), str(path.relative_to(ROOT)), bench)
        if rendered == text:
            continue
        stale.append(str(path.relative_to(ROOT)))
        if not args.check:
            path.write_text(rendered, encoding="utf-8")
    if args.check and stale:
        print(
            "stale results tables (run python scripts/render_results.py): " + ", ".join(stale),
            file=sys.stderr,
        )
        return 1
    for name in stale:
        print(f"rendered {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
