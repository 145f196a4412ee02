"""The README is the project's front page: short, free of development history, its relative links
lead to files of the repository, and its two Python examples run as written (exit 0, no traceback
or "Exception ignored" on stderr) and are no longer than their headings say. Its extras table
(and the install page's) lists exactly the extras of ``setup.cfg``, and its table of figures
without a record calls nothing pending that a record of ``docs/results/`` holds.

The history words are those ``tests/test_docs.py`` keeps out of the documentation site, plus
work-log dates and rounds; ``CHANGELOG.md`` is held to the same words (it is dated by version).
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.test_doc_examples import run_cleanly
from tests.test_docs import HISTORY

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 220

# A work log's marks: calendar dates (2026-11-25, 25.11.2026, Nov 25) and numbered rounds.
WORK_LOG = re.compile(
    r"\b20\d\d-\d\d-\d\d\b|\b\d{1,2}\.\d{1,2}\.20\d\d\b"
    r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2}\b|\bround \d+\b",
    re.I,
)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file (outside code blocks)."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_the_readme_is_a_front_page_of_at_most_220_lines() -> None:
    assert len(_lines(README)) <= MAX_LINES, (
        f"README.md has {len(_lines(README))} lines; move details into a page under docs/"
    )


@pytest.mark.parametrize("name", ["README.md", "CHANGELOG.md"])
def test_no_development_history(name: str) -> None:
    found = [
        f"{name}:{number}: {line.strip()}"
        for number, line in enumerate(_lines(ROOT / name), 1)
        if HISTORY.search(line) or WORK_LOG.search(line)
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", ["README.md", "CHANGELOG.md"])
def test_relative_links_lead_to_files_of_the_repository(name: str) -> None:
    source = ROOT / name
    text = FENCE.sub("", source.read_text(encoding="utf-8"))
    broken = []
    for link in LINK.findall(text):
        parts = urlsplit(link)
        if parts.scheme or link.startswith("//"):
            continue  # another site
        target = (source.parent / unquote(parts.path)).resolve() if parts.path else source
        if not target.is_file():
            broken.append(f"{link}: no such file")
        elif not target.is_relative_to(ROOT):
            broken.append(f"{link}: outside the repository")
        elif parts.fragment and target.suffix == ".md":
            if parts.fragment not in _anchors(target):
                broken.append(f"{link}: no heading #{parts.fragment}")
    assert not broken, f"broken links in {name}:\n" + "\n".join(broken)


def _python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def test_the_readme_has_an_actor_example_and_an_rl_example() -> None:
    blocks = _python_blocks()
    assert len(blocks) == 2, [block.splitlines()[:3] for block in blocks]
    assert "@parl.remote_class" in blocks[0]
    assert "parl.Model" in blocks[1] and "parl.algorithms" in blocks[1]


def _run(code: str, tmp_path: Path) -> str:
    return run_cleanly(code, tmp_path / "example.py", "README.md", timeout=300)


def test_the_actor_example_runs_as_written(tmp_path: Path) -> None:
    out = _run(_python_blocks()[0], tmp_path)
    assert "(1048576, 4)" in out


@pytest.mark.slow  # CartPole episodes with a torch call per step: several seconds
def test_every_line_of_the_rl_example_runs(tmp_path: Path) -> None:
    """Every line of the block runs, for 20 of its 200 episodes: what the 200 reach is the
    QuickStart's (the threshold test of ``tests/rl/test_policy_gradient.py`` and its record)."""
    code = _python_blocks()[1]
    assert code.count("range(200)") == 1, "the RL example's episode loop changed: update this test"
    out = _run(code.replace("range(200)", "range(20)"), tmp_path)
    assert "last episode's return:" in out


def test_each_example_heading_states_its_length_truthfully() -> None:
    """``## Actors in 20 lines``: the block under such a heading has at most that many lines."""
    text = README.read_text(encoding="utf-8")
    sections = re.findall(r"^## .*? in (\d+) lines\n(.*?)(?=^## )", text, re.S | re.M)
    assert len(sections) == 2, "expected the actor and the RL example under '... in N lines'"
    for promised, body in sections:
        code = re.search(r"^```python\n(.*?)^```", body, re.S | re.M)
        assert code, body[:200]
        lines = code.group(1).splitlines()
        assert len(lines) <= int(promised), f"{len(lines)} lines under a heading of {promised}"


def _table_rows(text: str, after: str) -> list[list[str]]:
    """The cells of the first Markdown table after the line that starts with ``after``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    rows = []
    for line in lines[start + 1 :]:
        if rows and not line.startswith("|"):
            break
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows[1:]  # without the header


def _extras() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return set(config["options.extras_require"])


@pytest.mark.parametrize(
    ("name", "heading"), [("README.md", "## Install"), ("docs/install.md", "## Extras")]
)
def test_the_extras_table_lists_exactly_the_extras_of_setup_cfg(name: str, heading: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    listed = {row[0].strip("`") for row in _table_rows(text, heading)}
    assert listed == _extras(), (
        f"{name}: missing {sorted(_extras() - listed)}, not an extra {sorted(listed - _extras())}"
    )
