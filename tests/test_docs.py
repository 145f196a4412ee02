"""The documentation site: it builds with warnings as errors and every cross-reference resolved
(``sphinx-build -W -n``), every internal link and anchor of the built pages leads somewhere, no
page carries development history, and the index and a guide load in a real headless Chromium
(screenshots kept in ``artifacts/docs-*.png``, CI artefacts).

Sphinx and its extensions come with the ``docs`` extra (``pip install -e '.[docs]'``); without
them the tests skip with that hint, except under ``CI=true``, where they fail. The same holds
for Chromium (``apt-get install -y chromium``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.runtime.browser import ARTIFACTS, CHROMIUM, browser

pytestmark = pytest.mark.slow  # builds the whole site (tens of seconds) and starts a browser

DOCS = Path(__file__).resolve().parents[1] / "docs"
EXAMPLES = DOCS.parent / "examples"
_ON_CI = os.environ.get("CI") == "true"

# Words that belong to the project's history, not to its documentation.
HISTORY = re.compile(
    r"\bissues?\s+#?\d+|(?<![\w&])#\d+\b|\breview(?:s|ed|er|ers)?\b|\bsessions?\b", re.I
)


def _need(module: str, hint: str) -> None:
    try:
        __import__(module)
    except ImportError:
        if _ON_CI:
            raise
        pytest.skip(f"{module} is not installed ({hint})")


class _Page(HTMLParser):
    """What a built page links to, the anchors it offers, and the text a reader sees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.anchors: set[str] = set()
        self.text: list[str] = []
        self._hidden = 0  # inside <script> or <style>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for key in ("id", "name"):
            if values.get(key):
                self.anchors.add(values[key] or "")
        for key in ("href", "src"):
            if values.get(key) and not (tag == "meta"):
                self.links.append(values[key] or "")
        if tag in ("script", "style"):
            self._hidden += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.text.append(data)


def _build(tmp_path: Path) -> Path:
    """The site built from a copy of ``docs/`` (autosummary writes its pages into the source
    folder: a copy keeps the work tree clean and parallel builds apart). ``examples/`` is
    copied beside it: the pages include the examples' READMEs and read their flags."""
    _need("sphinx", "pip install -e '.[docs]'")
    source = tmp_path / "docs"
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns("_build", "generated"))
    shutil.copytree(
        EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("train_log", "__pycache__")
    )
    out = tmp_path / "html"
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q", "-b", "html"]
        + [str(source), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"sphinx-build failed:\n{done.stdout[-3000:]}{done.stderr[-6000:]}"
    return out


def _pages(site: Path) -> dict[Path, _Page]:
    pages = {}
    for path in sorted(site.rglob("*.html")):
        page = _Page()
        page.feed(path.read_text(encoding="utf-8"))
        pages[path] = page
    return pages


def _check_links(site: Path, pages: dict[Path, _Page]) -> None:
    assert len(pages) > 40, sorted(str(p.relative_to(site)) for p in pages)
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # another site, or data:/mailto:
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(site)} -> {link}"
            if not target.is_file():
                broken.append(f"{where}: no such file")
            elif parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in pages[target].anchors:
                    broken.append(f"{where}: no anchor #{parts.fragment}")
    assert not broken, "broken internal links:\n" + "\n".join(broken)


def _check_history(site: Path, pages: dict[Path, _Page]) -> None:
    found = []
    for path, page in pages.items():
        if path.name in ("genindex.html", "search.html", "py-modindex.html"):
            continue
        text = " ".join(page.text)
        for match in HISTORY.finditer(text):
            context = text[max(0, match.start() - 60) : match.end() + 60].replace("\n", " ")
            found.append(f"{path.relative_to(site)}: {match.group(0)!r} in ...{context}...")
    assert not found, "development history in the pages:\n" + "\n".join(found)


def test_the_markdown_sources_carry_no_history() -> None:
    found = [
        f"{path.relative_to(DOCS)}:{number}: {line.strip()}"
        for path in sorted(DOCS.rglob("*.md"))
        if "_build" not in path.parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not found, "\n".join(found)


def _check_in_browser(site: Path, page: str, expect: str, shot: str) -> None:
    url = (site / page).as_uri()
    dom = browser(url, "--dump-dom")
    assert expect in dom, dom[-3000:]
    assert 'class="sidebar-tree"' in dom, "the theme's navigation is missing"
    ARTIFACTS.mkdir(exist_ok=True)
    picture = ARTIFACTS / shot
    picture.unlink(missing_ok=True)
    browser(url, f"--screenshot={picture}")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 10_000


def test_the_site_builds_links_resolve_and_pages_load_in_a_browser(tmp_path: Path) -> None:
    site = _build(tmp_path)
    pages = _pages(site)
    _check_links(site, pages)
    _check_history(site, pages)
    if CHROMIUM is None:
        if _ON_CI:
            raise RuntimeError("CI=true but chromium is missing: apt-get install -y chromium")
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium)")
    _check_in_browser(site, "index.html", "parl-torch", "docs-index.png")
    _check_in_browser(site, "guides/actors.html", "Futures, ", "docs-actors.png")
