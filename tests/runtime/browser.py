"""Headless Chromium for the monitor's tests: Debian's ``chromium`` package (``.ci/run``
installs it). ``CHROMIUM`` is None when it is missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"  # screenshots kept by CI
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
