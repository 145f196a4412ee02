"""The pages of the documentation site, read as sources (no build): each algorithm page leads
with its idea and results and ends with its example's flags, and the ``argparse`` directive of
``docs/_ext/example_argparse.py`` keeps a description's usage lines apart and reads a switch's
default as off."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import pytest

from parl.utils.train_flags import add_common_flags, example_parser

DOCS = Path(__file__).resolve().parents[1] / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import example_argparse  # noqa: E402

PAGES = sorted(p for p in (DOCS / "algorithms").glob("*.md") if p.name != "index.md")


def test_there_is_a_page_per_algorithm() -> None:
    assert len(PAGES) == 20


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_an_algorithm_page_reads_idea_results_example_then_flags(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.M)
    results = text.index(f"<!-- results:{page.stem} start -->")
    example = text.index("```{include} ../../examples/")
    flags = text.index(".. argparse::")
    assert text.index("## Results") < results < example < flags, page.name
    # the idea comes first, short: the results start in the first third of the page
    assert text[: text.index("## Results")].count("\n") < text.count("\n") / 3, page.name
    # the flags are the last section, folded
    assert headings[-1] == "Every flag", headings
    assert text.rindex("<details>") < flags < text.rindex("</details>"), page.name


def _doctree(rst: str):
    try:
        from docutils.core import publish_doctree
    except ImportError:  # docutils comes with Sphinx, in the docs extra
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("docutils is not installed (pip install -e '.[docs]')")

    return publish_doctree(rst, settings_overrides={"report_level": 5})


def test_a_description_keeps_its_usage_lines_as_a_literal_block() -> None:
    doc = """Train on CartPole (default) or ``--env HalfCheetah-v5``.

    python examples/X/train.py                       # CartPole-v1
    python examples/X/train.py --env HalfCheetah-v5
      --seed 1

More prose that is not shown.
"""
    parser = example_parser(doc)
    tree = _doctree(example_argparse.description_rst(parser.description))
    from docutils import nodes

    (block,) = tree.findall(nodes.literal_block)
    assert block.astext().splitlines() == [
        "python examples/X/train.py                       # CartPole-v1",
        "python examples/X/train.py --env HalfCheetah-v5",
        "  --seed 1",
    ]
    (paragraph,) = tree.findall(nodes.paragraph)
    assert paragraph.astext() == "Train on CartPole (default) or --env HalfCheetah-v5."


def test_a_description_of_prose_only_stays_paragraphs() -> None:
    rst = example_argparse.description_rst("One line\nand its next.\n\nA second paragraph.")
    assert "::" not in rst
    assert rst == "One line\nand its next.\n\nA second paragraph.\n"


def test_a_switch_reads_off_by_default_whatever_it_stores() -> None:
    parser = argparse.ArgumentParser()
    add_common_flags(parser, env="CartPole-v1")  # --no_progress stores progress=False
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--lr", type=float, default=0.5)
    options = [
        {"name": ["--no_progress"], "default": True, "help": "hide the progress bar"},
        {"name": ["--verbose"], "default": False, "help": ""},
        {"name": ["--lr"], "default": 0.5, "help": ""},
        {"name": ["--resume"], "default": "==SUPPRESS==", "help": ""},
    ]
    result = example_argparse.switches_off({"action_groups": [{"options": options}]}, parser)
    defaults = [entry["default"] for entry in result["action_groups"][0]["options"]]
    assert defaults == [False, False, 0.5, "==SUPPRESS=="]


def test_the_site_loads_the_directive_from_its_extensions_folder() -> None:
    conf = (DOCS / "conf.py").read_text(encoding="utf-8")
    assert '"example_argparse"' in conf and os.path.isfile(DOCS / "_ext" / "example_argparse.py")
