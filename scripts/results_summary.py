"""The short tables of the results: the README's headline (a row per algorithm) and the Results
page (every record, grouped by algorithm), both with cells a reader can scan.

Every cell stays under ``MAX_CELL`` characters: what is long (a configuration, the full name of
a reference, what exactly was measured) goes into a list under the table, by row. Figures follow
one precision rule (``mean_sd``), budgets name their unit (``budget``) and results their measure
(``measure``). ``scripts/render_results.py`` puts these tables between their markers; the
normalised scores are ``scripts/plot_normalised.py``'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from results import ROOT

MAX_CELL = 40
RANDOM = ROOT / "docs" / "results" / "random"

# The README's row of each algorithm: the record of its example's main env (the env the
# example trains on by default, else the one its page leads with).
HEADLINES = {
    "pg": "pg_CartPole-v1",
    "dqn": "dqn_CartPole-v1",
    "ddpg": "ddpg_HalfCheetah-v5",
    "td3": "td3_HalfCheetah-v5",
    "sac": "sac_HalfCheetah-v5",
    "ppo": "ppo_HalfCheetah-v5",
    "a2c": "a2c_CartPole-v1",
    "impala": "impala_HalfCheetah-v5",
    "es": "es_HalfCheetah-v5",
    "maddpg": "maddpg_continuous_simple_speaker_listener",
    "mappo": "mappo_simple_speaker_listener",
    "qmix": "qmix_epymarl_fc_simple_spread",
    "coma": "coma_epymarl_simple_spread",
    "cql": "cql_medium_HalfCheetah-v5",
    "iql": "iql_medium_Hopper-v5",
    "oac": "oac_HalfCheetah-v5",
    "dt": "dt_medium_Hopper-v5",
    "maml": "maml_sine",
    "ga3c": "ga3c_CartPole-v1",
    "alphazero": "alphazero_lookahead_connect4",
}

# What one step of the budget is, where it is not an environment step.
BUDGET_UNITS = {"maml": "meta-updates", "alphazero": "iterations"}


def _decimals(value: float) -> int:
    """The decimal places that leave three significant digits in ``value`` (-1: tens)."""
    return 2 - math.floor(math.log10(abs(value))) if value else 0


def _fixed(value: float, decimals: int) -> str:
    text = f"{round(value, decimals):,.{max(decimals, 0)}f}"
    return "0" if text.lstrip("-").strip("0.,") == "" else text


def figure(value: float) -> str:
    """``value`` to three significant digits, thousands separated: ``4,560``, ``-17.4``,
    ``0.309``."""
    return _fixed(value, _decimals(value))


def mean_sd(record: dict[str, Any]) -> str:
    """The final figure of the seeds: ``6,000 ± 580``; the one seed's alone; each seed's where
    the record has no mean. The rule: both rounded to the decimal place that leaves three
    significant digits in the larger of the two."""
    figures = record["figures"]
    mean, sd = figures["mean"], figures["sd"]
    if mean is None:
        return " and ".join(figure(entry["final"]) for entry in figures["per_seed"])
    if sd is None:
        return figure(mean)
    decimals = _decimals(max(abs(mean), sd))
    return f"{_fixed(mean, decimals)} ± {_fixed(sd, decimals)}"


def _count(value: int) -> str:
    """``1000000`` -> ``1M``, ``1600000`` -> ``1.6M``, ``25000`` -> ``25k``, ``50`` -> ``50``."""
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if value >= size and value % (size // 100) == 0:
            return f"{value / size:g}{suffix}"
    return f"{value:,}"


def is_offline(record: dict[str, Any]) -> bool:
    """A run that learns from a dataset: its baseline is the dataset's mean episode return."""
    baseline = record["figures"]["baseline"]
    return bool(baseline and "dataset" in baseline)


def budget(record: dict[str, Any]) -> str:
    """``1M env steps``, ``25k episodes``, ``40k meta-updates``, ``50 iterations``, ``50k
    updates`` (a run on a dataset), ``not stated``."""
    steps, episodes = record["budget"]["env_steps"], record["budget"].get("episodes")
    if steps is None and episodes is not None:
        return f"{_count(episodes)} episodes"
    if steps is None:
        return "not stated"
    unit = "updates" if is_offline(record) else BUDGET_UNITS.get(record["page"], "env steps")
    return f"{_count(steps)} {unit}"


def measure(record: dict[str, Any]) -> str:
    """What the figure is, in a few words; the record's ``metric`` says it in full."""
    metric = record["metric"]
    if "MSE" in metric:
        return "loss (MSE, lower is better)"
    if "games won" in metric:
        return "win rate"
    if "score" in metric:
        return "game score"
    if "training episodes" in metric:
        return "return (training episodes)"
    return "return"


def env(record: dict[str, Any]) -> str:
    """The env, and for a run on a dataset the dataset's kind: ``Hopper-v5, medium-replay``."""
    if not is_offline(record):
        return record["env"]
    dataset = record["figures"]["baseline"]["dataset"]
    kind = dataset.split("-", 1)[1].removesuffix("-v0")
    return f"{record['env']}, {kind}"


def reference_label(baseline: dict[str, Any]) -> str:
    """A reference's name in a word or two: ``PARL``, ``random play``, ``dataset``."""
    name = baseline["name"]
    for start, label in (("PARL's", "PARL"), ("random play", "random play"),
                         ("the dataset's", "dataset"), ("the target", "target"),
                         ("all food", "all food"), ("SAC", "SAC")):  # fmt: skip
        if name.startswith(start):
            return label
    return name.split(" (")[0].split(",")[0][:24]


def reference_value(value: float) -> str:
    """A reference as its source gave it, three significant digits at most: ``5,000``,
    ``0.34``, ``-20.7``."""
    text = figure(value)
    return text.rstrip("0").rstrip(".") if "." in text else text


def reference(record: dict[str, Any]) -> str:
    """``PARL: 5,000``, ``random play: -20.7``; ``-`` without one."""
    baseline = record["figures"]["baseline"]
    if not baseline:
        return "-"
    return f"{reference_label(baseline)}: {reference_value(baseline['value'])}"


def time_per_seed(record: dict[str, Any]) -> str:
    """The mean wall time of a seed: its own when each seed's is known, else the whole run's
    over the seeds; ``-`` when unknown."""
    walls = [entry["wall_seconds"] for entry in record["figures"]["per_seed"]]
    if walls and all(wall is not None for wall in walls):
        seconds = sum(walls) / len(walls)
    elif record["figures"]["wall_seconds"] is not None and record["seeds"]:
        seconds = record["figures"]["wall_seconds"] / len(record["seeds"])
    else:
        return "-"
    return wall_time(seconds)


def wall_time(seconds: float | None) -> str:
    """``45 s``, ``25 min``, ``2.7 h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _table(header: list[str], rows: list[list[str]]) -> str:
    for row in rows:
        long = [cell for cell in row if len(cell) > MAX_CELL and not cell.startswith("[")]
        if long:
            raise ValueError(f"results cell over {MAX_CELL} characters: {long[0]!r}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


HEADLINE_HEADER = ["algorithm", "env", "budget", "seeds", "final, mean ± sd", "measure",
                   "reference", "time per seed", "page"]  # fmt: skip


def headline_row(record: dict[str, Any], link: str) -> list[str]:
    return [record["algorithm"], env(record), budget(record), str(len(record["seeds"])),
            mean_sd(record), measure(record), reference(record), time_per_seed(record),
            f"[{record['page']}]({link})"]  # fmt: skip


def render_headline(records: dict[str, dict[str, Any]], order: list[str]) -> str:
    """The README's table: the headline record of each algorithm, in ``order`` (pages)."""
    missing = [name for name in HEADLINES.values() if name not in records]
    if missing:
        raise SystemExit(f"scripts/results_summary.py: HEADLINES names no record {missing}")
    rows = [headline_row(records[HEADLINES[page]], f"docs/algorithms/{page}.md")
            for page in order if page in HEADLINES]  # fmt: skip
    return _table(HEADLINE_HEADER, rows) + "\n"


PAGE_HEADER = ["algorithm", "env", "variant", "budget", "seeds", "final, mean ± sd", "measure",
               "reference", "time per seed"]  # fmt: skip


def _letters(count: int) -> list[str]:
    return [chr(ord("a") + i) if i < 26 else f"a{i}" for i in range(count)]


def render_algorithm(title: str, page: str, records: list[dict[str, Any]]) -> str:
    """One algorithm's section of the Results page: a row per record, each variant (the
    record's configuration) as a letter explained under the table, then what each figure
    measures and the references in full."""
    variants = list(dict.fromkeys(r["configuration"] for r in records if r["configuration"]))
    letter = dict(zip(variants, _letters(len(variants)), strict=True))
    rows = [[r["algorithm"], env(r), f"({letter[r['configuration']]})" if r["configuration"]
             else "-", budget(r), str(len(r["seeds"])), mean_sd(r), measure(r), reference(r),
             time_per_seed(r)] for r in records]  # fmt: skip
    parts = [f"### {title}", _table(PAGE_HEADER, rows)]
    if variants:
        parts.append("Variants:\n\n" + "\n".join(f"- ({letter[v]}) {v}." for v in variants))
    parts.append(grouped("Measured as", records, lambda r: r["metric"]))
    parts.append(grouped("References", records, _full_reference))
    parts.append(f"Commands, seeds and curves: [{title}](algorithms/{page}.md#results).")
    return "\n\n".join(part for part in parts if part)


def _full_reference(record: dict[str, Any]) -> str | None:
    baseline = record["figures"]["baseline"]
    if not baseline:
        return None
    label = reference_label(baseline)
    return f"{label}: {baseline['name']}" if label != baseline["name"] else None


def _rows(rows: list[int]) -> str:
    """``row 2``, ``rows 1 and 3``, ``rows 1, 2 and 4``."""
    if len(rows) == 1:
        return f"row {rows[0]}"
    return "rows " + ", ".join(map(str, rows[:-1])) + f" and {rows[-1]}"


def grouped(
    label: str, records: list[dict[str, Any]], text_of: Callable[[dict[str, Any]], str | None]
) -> str:
    """``label: text.`` when every row of the table has the same text; else a list with each
    distinct text once, in the table's order, after the rows (counted from 1) it belongs to;
    ``""`` when no row has one."""
    rows: dict[str, list[int]] = {}
    for row, record in enumerate(records, 1):
        if text := text_of(record):
            rows.setdefault(text, []).append(row)
    if not rows:
        return ""
    if len(rows) == 1 and len(next(iter(rows.values()))) == len(records):
        return f"{label}: {next(iter(rows))}."
    return f"{label}, by row of the table:\n\n" + "\n".join(
        f"- {_rows(numbers)}: {text}." for text, numbers in rows.items()
    )


def load_random_baselines(folder: Path = RANDOM) -> dict[str, dict[str, Any]]:
    """The random-policy baselines (``scripts/random_baselines.py``), by file name. One with
    ``records`` (record names) is the zero of those records only; one without, of every
    record on its env with its measure."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        baseline = json.loads(path.read_text(encoding="utf-8"))
        for name in ("env", "measure", "records", "mean", "sd", "episodes", "command"):
            if name not in baseline:
                raise ValueError(f"{path.relative_to(ROOT)}: missing field {name!r}")
        found[path.stem] = baseline
    return found


def is_published(baseline: dict[str, Any] | None) -> bool:
    """A reference that PARL or a paper published (not one measured beside the run)."""
    return bool(baseline) and "published" in baseline["name"]


Randoms = dict[str, dict[str, Any]]


def random_score(name: str, record: dict[str, Any], randoms: Randoms) -> float | None:
    """A random policy's figure on the record's env and measure: the record's own baseline
    when it is random play, else one measured by ``scripts/random_baselines.py``."""
    baseline = record["figures"]["baseline"]
    if baseline and baseline["name"].startswith("random play"):
        return float(baseline["value"])
    for found in randoms.values():
        if found["records"] is None:
            fits = found["env"] == record["env"] and found["measure"] == measure(record)
        else:
            fits = name in found["records"]
        if fits:
            return float(found["mean"])
    return None


def normalised(name: str, record: dict[str, Any], randoms: Randoms) -> float | None:
    """``(ours - random) / (reference - random)``: 0 is random play, 1 the published
    reference; ``None`` without a published reference, a random figure or a mean."""
    baseline, mean = record["figures"]["baseline"], record["figures"]["mean"]
    chance = random_score(name, record, randoms)
    if not is_published(baseline) or chance is None or mean is None:
        return None
    return (mean - chance) / (float(baseline["value"]) - chance)


NORMALISED_HEADER = ["algorithm", "env", "variant", "ours", "reference", "random",
                     "normalised"]  # fmt: skip


def normalised_rows(
    named: dict[str, dict[str, Any]], randoms: Randoms
) -> list[tuple[str, dict[str, Any], float]]:
    """The records with a normalised score: name, record and score, in ``named``'s order."""
    return [(name, r, score) for name, r in named.items()
            if (score := normalised(name, r, randoms)) is not None]  # fmt: skip


def render_normalised(named: dict[str, dict[str, Any]], randoms: Randoms, figure_path: str) -> str:
    """The normalised scores' table and figure, and the records that cannot have one."""
    scored = normalised_rows(named, randoms)
    rows = [[r["algorithm"], env(r), str(i), mean_sd(r),
             reference_value(r["figures"]["baseline"]["value"]),
             reference_value(random_score(name, r, randoms) or 0.0), f"{score:.2f}"]
            for i, (name, r, score) in enumerate(scored, 1)]  # fmt: skip
    lacking_random = [r for name, r in named.items() if is_published(r["figures"]["baseline"])
                      and random_score(name, r, randoms) is None]  # fmt: skip
    parts = [
        f"![Normalised scores: 0 is a random policy, 1 the published reference]({figure_path})",
        _table(NORMALISED_HEADER, rows),
        "Variants:\n\n"
        + "\n".join(
            f"{i}. {r['configuration'] or 'the defaults'}." for i, (_, r, _) in enumerate(scored, 1)
        ),  # fmt: skip
    ]
    if lacking_random:
        envs: dict[str, list[str]] = {}
        for r in lacking_random:
            envs.setdefault(r["algorithm"], []).append(r["env"])
        names = [f"{name} ({', '.join(dict.fromkeys(where))})" for name, where in envs.items()]
        parts.append("A published reference but no random-policy figure on the same measure "
                     "yet: " + ", ".join(names) + ".")  # fmt: skip
    return "\n\n".join(parts) + "\n"
