"""Benchmark figures as data: what a ``scripts/bench_*.py`` run prints, kept as a JSON record.

A benchmark prints its figures as tables; :class:`Report` prints each row as it comes and keeps
it, and with ``--record FILE`` the run ends by writing one record: the command, the commit, the
versions, the machine, the load average before and after, and every table. The records of the
documentation live in ``docs/results/bench/``; ``scripts/render_results.py`` renders each into the
block of ``docs/benchmarks.md`` (or of another page) that names it::

    <!-- bench:bench_remote start -->
    ...rendered...
    <!-- bench:bench_remote end -->

``source`` is ``"measured"`` for a record a run wrote and ``"transcribed"`` for one holding the
figures the documentation stated before the scripts wrote records; rerunning the command
replaces it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from results import ROOT, current_commit, machine_info, versions

BENCH_RECORDS = ROOT / "docs" / "results" / "bench"
SCHEMA = 1
FIELDS = (
    "schema", "source", "script", "command", "commit", "date", "versions", "machine", "load",
    "tables", "note",
)  # fmt: skip


def add_record_flag(parser: argparse.ArgumentParser) -> None:
    """``--record FILE``: write the run's record there (``docs/results/bench/<script>.json`` is
    what the documentation renders)."""
    parser.add_argument(
        "--record",
        metavar="FILE",
        default=None,
        help="write the figures as a JSON record to FILE, e.g. docs/results/bench/NAME.json "
        "(default: print only)",
    )


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


class Table:
    """A table of one benchmark: each row is printed aligned as it comes, and kept."""

    def __init__(self, title: str, columns: list[str], widths: list[int] | None = None) -> None:
        self.title = title
        self.columns = list(columns)
        self.rows: list[list[str]] = []
        given = list(widths or [])
        self.widths = given + [max(12, len(c)) for c in columns[len(given) :]]
        print(f"\n{title}")
        self._print(self.columns)

    def _print(self, cells: list[str]) -> None:
        first, *rest = zip(self.widths, cells, strict=True)
        line = f"{first[1]:<{first[0]}}" + "".join(f" {cell:>{width}}" for width, cell in rest)
        print(line.rstrip(), flush=True)

    def row(self, *cells: object) -> None:
        """One row: as many cells as columns (fewer are padded with empty cells)."""
        if len(cells) > len(self.columns):
            raise ValueError(f"{self.title}: {len(cells)} cells for {len(self.columns)} columns")
        text = [str(cell) for cell in cells] + [""] * (len(self.columns) - len(cells))
        self.rows.append(text)
        self._print(text)

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "columns": self.columns, "rows": self.rows}


class Report:
    """The tables of one benchmark run, and its record.

    ``script`` is the script's name without ``.py``; the command recorded is the one that ran,
    less ``--record`` and the flags of ``local`` (options naming files of this machine only, such
    as a downloaded wheel, that a reader's run does without).
    """

    def __init__(self, script: str, local: tuple[str, ...] = ()) -> None:
        self.script = script
        self.tables: list[Table] = []
        self.notes: list[str] = []
        self.load_before = _load()
        self.command = " ".join(
            ["python", f"scripts/{Path(sys.argv[0]).name}"]
            + [shlex.quote(a) for a in _without(sys.argv[1:], ("--record", *local))]
        )

    def table(self, title: str, columns: list[str], widths: list[int] | None = None) -> Table:
        table = Table(title, columns, widths)
        self.tables.append(table)
        return table

    def note(self, text: str) -> None:
        """A line of context kept with the figures (the calibration, a skipped row and why)."""
        print(text, flush=True)
        self.notes.append(text)

    def write(self, path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
        """Write the record to ``path`` (nothing when ``None``); returns it."""
        if path is None:
            return None
        record = {
            "schema": SCHEMA,
            "source": "measured",
            "script": self.script,
            "command": self.command,
            "commit": current_commit(),
            "date": datetime.date.today().isoformat(),
            "versions": versions(),
            "machine": machine_info(),
            "load": {"before": self.load_before, "after": _load()},
            "tables": [table.as_dict() for table in self.tables],
            "note": " ".join(self.notes) or None,
        }
        validate_bench_record(record)
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        temporary.replace(target)
        print(f"record written to {target}")
        return record


def _without(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """``argv`` less each of ``flags`` and its value (``--flag value`` or ``--flag=value``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        elif not arg.startswith(tuple(f"{flag}=" for flag in flags)):
            out.append(arg)
    return out


def validate_bench_record(record: dict[str, Any], where: str = "record") -> dict[str, Any]:
    """Check a benchmark record's fields and tables; returns it unchanged.

    Raises:
        ValueError: naming the missing field or the malformed table.
    """
    for name in FIELDS:
        if name not in record:
            raise ValueError(f"{where}: missing field {name!r}; null when unknown")
    if record["schema"] != SCHEMA:
        raise ValueError(f"{where}: 'schema' is {record['schema']!r}; this reader knows {SCHEMA}")
    if record["source"] not in ("measured", "transcribed"):
        raise ValueError(f"{where}: 'source' is {record['source']!r}")
    if not record["tables"]:
        raise ValueError(f"{where}: no tables")
    for table in record["tables"]:
        width = len(table["columns"])
        for row in table["rows"]:
            if len(row) != width:
                raise ValueError(
                    f"{where}: table {table['title']!r} has a row of {len(row)} cells "
                    f"for {width} columns: {row}"
                )
    return record


def load_bench_records(folder: Path = BENCH_RECORDS) -> dict[str, dict[str, Any]]:
    """Every benchmark record of ``folder`` by file stem, validated."""
    records = {}
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        records[path.stem] = validate_bench_record(record, str(path.relative_to(ROOT)))
    return records


def _commit_text(commit: str | None) -> str | None:
    if commit is None:
        return None
    dirty = " with uncommitted changes" if commit.endswith("-dirty") else ""
    return f"commit {commit[:7]}{dirty}"


def render_bench(record: dict[str, Any]) -> str:
    """A record as Markdown: each table, then where the figures come from."""
    parts = []
    for table in record["tables"]:
        lines = [f"**{table['title']}**", ""]
        lines.append("| " + " | ".join(table["columns"]) + " |")
        lines.append("|" + "---|" * len(table["columns"]))
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                  for row in table["rows"]]  # fmt: skip
        parts.append("\n".join(lines))
    if record["source"] == "measured":
        load = record["load"]["before"]
        where = [
            f"`{record['command']}`",
            _commit_text(record["commit"]),
            f"{record['machine']['cores']} cores",
            f"load average {load[0]:.1f} at the start" if load else None,
        ]
        parts.append("Source: " + ", ".join(part for part in where if part) + ".")
    else:
        parts.append(
            f"Source: `{record['command']}`; figures stated before the script wrote records: "
            "rerunning it with `--record` measures them anew."
        )
    if record["note"]:
        parts.append(record["note"])
    return "\n\n".join(parts) + "\n"
