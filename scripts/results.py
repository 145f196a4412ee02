"""Quality results as data: one JSON record per experiment under ``docs/results/``.

A record holds what a reader needs to trust or repeat a figure: the command, the commit, the
library versions, the machine, the seeds, the budget in environment steps, the figures (each
seed's final and best return, their mean and standard deviation, wall time) and the curve file.
Every field is present; an unknown one is ``null`` and the ``note`` says why. ``source`` is
``"measured"`` for a record a script wrote when its run finished and ``"transcribed"`` for one
copied from figures the documentation stated before records existed.

Scripts call :func:`write_record`; ``scripts/render_results.py`` reads the records back with
:func:`load_records` and renders the tables of the algorithm pages and of the README.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "results"
SCHEMA = 1
SOURCES = ("measured", "transcribed")
PACKAGES = ("python", "torch", "numpy", "gymnasium", "mujoco")

# Every field a record must carry, dotted for the nested ones; a value may be null.
FIELDS = (
    "schema",
    "source",
    "algorithm",
    "page",
    "env",
    "configuration",
    "metric",
    "command",
    "commit",
    *(f"versions.{name}" for name in PACKAGES),
    "machine.cpu",
    "machine.cores",
    "seeds",
    "budget.env_steps",
    "figures.per_seed",
    "figures.mean",
    "figures.sd",
    "figures.wall_seconds",
    "figures.baseline",
    "curve",
    "note",
)
SEED_FIELDS = ("seed", "final", "best", "wall_seconds", "evaluations")


def validate_record(record: dict[str, Any], where: str = "record") -> dict[str, Any]:
    """Check that ``record`` has every field of the schema; returns it unchanged.

    Raises:
        ValueError: naming the first missing field, or a bad ``source`` or ``schema``.
    """
    for dotted in FIELDS:
        value: Any = record
        for part in dotted.split("."):
            if not isinstance(value, dict) or part not in value:
                raise ValueError(
                    f"{where}: missing field {dotted!r}; every field of the schema is present, "
                    "null when unknown (say why in 'note')"
                )
            value = value[part]
    if record["schema"] != SCHEMA:
        raise ValueError(f"{where}: 'schema' is {record['schema']!r}; this reader knows {SCHEMA}")
    if record["source"] not in SOURCES:
        raise ValueError(f"{where}: 'source' is {record['source']!r}; use one of {SOURCES}")
    seeds = record["seeds"]
    if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
        raise ValueError(f"{where}: 'seeds' is {seeds!r}; give a list of integers")
    for i, entry in enumerate(record["figures"]["per_seed"]):
        for name in SEED_FIELDS:
            if name not in entry:
                raise ValueError(
                    f"{where}: missing field 'figures.per_seed[{i}].{name}'; null when unknown"
                )
    return record


def load_records(folder: Path = RECORDS) -> list[dict[str, Any]]:
    """Every record of ``folder`` (``*.json``), validated, in file-name order."""
    return list(load_named_records(folder).values())


def load_named_records(folder: Path = RECORDS) -> dict[str, dict[str, Any]]:
    """Every record of ``folder``, validated, by its file's name without ``.json``
    (``ppo_HalfCheetah-v5``), in file-name order."""
    records = {}
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        records[path.stem] = validate_record(record, str(path.relative_to(ROOT)))
    return records


def versions() -> dict[str, str | None]:
    """Python's version and each package's in ``PACKAGES`` (None where not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES[1:]:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine_info() -> dict[str, Any]:
    """The processor's name and the number of cores, as a record shows them."""
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:  # not Linux: the processor string is the best there is
        cpu = platform.processor() or None
    return {"cpu": cpu, "cores": os.cpu_count()}


def current_commit() -> str | None:
    """The repository's ``HEAD``, or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return out.stdout.strip() + ("-dirty" if dirty else "")


def write_record(
    path: str | os.PathLike[str],
    *,
    algorithm: str,
    page: str,
    env: str,
    configuration: str | None,
    metric: str,
    command: str,
    budget_steps: int | None,
    per_seed: list[dict[str, Any]],
    wall_seconds: float | None = None,
    baseline: dict[str, Any] | None = None,
    curve: str | None = None,
    note: str | None = None,
    budget_episodes: int | None = None,
    commit: str | None = None,
) -> dict[str, Any]:
    """Write a measured record of a finished run to ``path`` (a ``.json`` file); returns it.

    Args:
        per_seed: one dict per seed with ``seed``, ``final`` (the last evaluation), and
            optionally ``best``, ``wall_seconds`` and ``evaluations`` (``[[step, value], ...]``).
        wall_seconds: the wall time of the whole experiment, all seeds together.
        baseline: a reference stated beside the result, ``{"name": ..., "value": ...}``:
            measured in the same run, or a published figure (the name says which).
        budget_episodes: the budget in episodes, for a run that counts episodes rather than
            steps (``budget_steps`` is then ``None``).
        commit: the commit the run started from (``current_commit()`` then); by default the
            ``HEAD`` when the record is written.

    The commit, the versions and the machine are read here; the mean and the standard
    deviation (sample, ``n - 1``) are computed from the seeds' final returns.
    """
    for i, entry in enumerate(per_seed):
        for name in ("seed", "final"):
            if entry.get(name) is None:
                raise ValueError(f"per_seed[{i}] has no {name!r}; give each seed's seed and final")
    seeds = [{name: entry.get(name) for name in SEED_FIELDS} for entry in per_seed]
    finals = [float(entry["final"]) for entry in per_seed]
    record = {
        "schema": SCHEMA,
        "source": "measured",
        "algorithm": algorithm,
        "page": page,
        "env": env,
        "configuration": configuration,
        "metric": metric,
        "command": command,
        "commit": commit or current_commit(),
        "versions": versions(),
        "machine": machine_info(),
        "seeds": [int(entry["seed"]) for entry in per_seed],
        "budget": {"env_steps": budget_steps}
        if budget_episodes is None
        else {"env_steps": budget_steps, "episodes": budget_episodes},
        "figures": {
            "per_seed": seeds,
            "mean": statistics.mean(finals) if finals else None,
            "sd": statistics.stdev(finals) if len(finals) > 1 else None,
            "wall_seconds": wall_seconds,
            "baseline": baseline,
        },
        "curve": curve,
        "note": note,
    }
    validate_record(record)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record
