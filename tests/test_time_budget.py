"""The suite's time budget: the folders' budgets that every run reports are the ones the
development guide states, each test file counts towards the right folder, and collection refuses
tests that train to a score beyond the allowed few or without their name and marker."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import conftest, timing

ROOT = Path(__file__).resolve().parents[1]


def test_the_development_guide_states_the_budgets_the_runs_report() -> None:
    text = (ROOT / "docs" / "development.md").read_text()
    section = text.split("## The time budget", 1)[1].split("\n## ", 1)[0]
    stated = {
        "tests (top level)" if folder == "tests" else folder: float(seconds)
        for folder, seconds in re.findall(r"^\| `([\w/]+)`[^|]*\| (\d+) s \|$", section, re.M)
    }
    assert stated == timing.BUDGETS


@pytest.mark.parametrize(
    ("path", "folder"),
    [
        ("tests/rl/test_dqn.py", "tests/rl"),
        ("tests/runtime/test_framing.py", "tests/runtime"),
        ("tests/test_docs.py", "tests (top level)"),
        ("tests/rl_extra/test_x.py", "tests (top level)"),  # a prefix is not a folder
    ],
)
def test_each_file_counts_towards_its_folder(path: str, folder: str) -> None:
    assert timing.folder_of(path) == folder


@dataclass
class FakeItem:
    name: str
    markers: set[str] = field(default_factory=set)

    @property
    def nodeid(self) -> str:
        return f"tests/rl/test_x.py::{self.name}"

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def guard(name: str) -> FakeItem:
    return FakeItem(f"test_threshold_{name}", {"threshold"})


def test_five_threshold_guards_pass_and_a_sixth_is_refused_naming_them() -> None:
    items = [guard(f"g{i}[seed]") for i in range(5)] + [FakeItem("test_shapes")]
    conftest.check_threshold_guards(items)  # type: ignore[arg-type]
    with pytest.raises(pytest.UsageError, match=r"6 tests train to a score, at most 5.*g5"):
        conftest.check_threshold_guards([*items, guard("g5")])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "item",
    [FakeItem("test_threshold_unmarked"), FakeItem("test_reaches_200", {"threshold"})],
    ids=["named-not-marked", "marked-not-named"],
)
def test_a_threshold_test_is_both_named_and_marked(item: FakeItem) -> None:
    with pytest.raises(pytest.UsageError, match="named test_threshold_... and marked"):
        conftest.check_threshold_guards([item])  # type: ignore[arg-type]


def test_a_run_reports_the_time_per_file_and_folder(tmp_path: Path) -> None:
    """A real run of a few of the suite's cheapest tests ends with the folders against their
    budgets and every file's time, and writes the same table as JSON."""
    table = tmp_path / "times.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--times-per-file", "--times-json", str(table),
         "tests/test_time_budget.py::test_each_file_counts_towards_its_folder"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r" 0\.0 s of +420 s  tests/rl\n", out), out[-2000:]
    assert re.search(r"s of +90 s  tests \(top level\)\n", out), out[-2000:]
    assert re.search(r"s +4 tests  tests/test_time_budget\.py\n", out), out[-2000:]
    import json

    written = json.loads(table.read_text())
    assert set(written) == {"tests/test_time_budget.py"}
    assert written["tests/test_time_budget.py"]["tests"] == 4
    assert "Traceback" not in proc.stderr
