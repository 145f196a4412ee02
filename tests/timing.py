"""The suite's time budget, shown at the end of every run: the time per test file, the ten
slowest files and the total per folder, each folder against its budget.

A file's time is the sum of its tests' setup, call and teardown durations, as pytest measures
them in the process that runs the test (an xdist worker reports them to the controller, which
adds them up here). The folders' budgets are seconds of that sum on the 2-core CI machine
(``pytest -n 2``, a quiet machine); ``docs/development.md`` states them and says what to do when
a feature's tests would exceed them. ``--times-per-file`` lists every file, not only the ten
slowest; ``--times-json PATH`` writes the table as JSON.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

# seconds of summed test durations per folder (see docs/development.md, "The time budget")
BUDGETS: dict[str, float] = {"tests/rl": 420.0, "tests/runtime": 420.0, "tests (top level)": 90.0}
SLOWEST_FILES = 10

_seconds: defaultdict[str, float] = defaultdict(float)
_counts: defaultdict[str, int] = defaultdict(int)


def folder_of(path: str) -> str:
    """The budget folder of a test file's path relative to the repository root."""
    for folder in BUDGETS:
        if path.startswith(folder + "/"):
            return folder
    return "tests (top level)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("time budget")
    group.addoption(
        "--times-per-file",
        action="store_true",
        help="list the summed test time of every test file, not only the ten slowest",
    )
    group.addoption("--times-json", metavar="PATH", help="write the time per test file as JSON")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _seconds[path] += report.duration
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _counts[path] += 1


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _seconds:
        return  # an xdist worker: the controller reports the whole run
    write = terminalreporter.write_line
    per_folder: defaultdict[str, float] = defaultdict(float)
    for path, seconds in _seconds.items():
        per_folder[folder_of(path)] += seconds
    terminalreporter.section("time per folder (summed test durations, against the budget)")
    for folder, budget in BUDGETS.items():
        spent = per_folder.get(folder, 0.0)
        over = "  OVER BUDGET: see docs/development.md" if spent > budget else ""
        write(f"{spent:8.1f} s of {budget:5.0f} s  {folder}{over}")
    write(f"{sum(per_folder.values()):8.1f} s in all")
    ranked = sorted(_seconds.items(), key=lambda item: -item[1])
    shown = ranked if config.getoption("times_per_file") else ranked[:SLOWEST_FILES]
    title = "time per test file" if len(shown) == len(ranked) else "the ten slowest test files"
    terminalreporter.section(title)
    for path, seconds in shown:
        write(f"{seconds:8.1f} s  {_counts[path]:4d} tests  {path}")
    target = config.getoption("times_json")
    if target:
        table = {path: {"seconds": round(s, 3), "tests": _counts[path]} for path, s in ranked}
        Path(target).write_text(json.dumps(table, indent=1) + "\n")
