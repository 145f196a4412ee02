"""Headless Chromium for the monitor's tests: Debian's ``chromium`` package (``.ci/run``
installs it). ``CHROMIUM`` is None when it is missing."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"  # screenshots kept by CI
DOCS_PICTURES = ROOT / "docs" / "_static"  # screenshots the docs show, made by the tests
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def browser(url: str, *extra: str) -> str:
    """The page's DOM after its scripts ran (``--virtual-time-budget`` lets the first poll of
    /api/status finish), or the browser's own output when it fails."""
    done = subprocess.run(
        [
            CHROMIUM or "chromium",
            "--headless",
            "--no-sandbox",  # root in CI
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=4000",
            "--window-size=1280,900",
            *extra,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of the PNG at ``path`` (read from its header; fails on a non-PNG)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def check_docs_picture(shot: Path, name: str) -> None:
    """The docs show ``docs/_static/<name>``, a screenshot this test suite made: with
    ``PARL_DOCS_SCREENSHOTS=1`` the fresh ``shot`` replaces it; otherwise the committed one must
    be a PNG of the same size (a page whose layout changed size asks for a new picture)."""
    picture = DOCS_PICTURES / name
    if os.environ.get("PARL_DOCS_SCREENSHOTS") == "1":
        DOCS_PICTURES.mkdir(exist_ok=True)
        shutil.copyfile(shot, picture)
    assert picture.exists(), (
        f"docs/_static/{name} is missing: run this test with PARL_DOCS_SCREENSHOTS=1 to make it"
    )
    assert png_size(picture) == png_size(shot), (
        f"docs/_static/{name} no longer matches the page's size: run this test with "
        "PARL_DOCS_SCREENSHOTS=1 and commit the new picture"
    )
