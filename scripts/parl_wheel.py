"""PARL 2.2.1's published wheel for the benchmarks that time PARL's own algorithm code.

The wheel is downloaded with pip once (or given), checked against PyPI's sha256, and a module of
``parl/algorithms/torch/`` is extracted from it and loaded against this package, as the parity
tests do (``tests/rl/test_parl_parity.py`` holds the version and the digest). Its code is never
copied into the repository.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.rl.test_parl_parity import PARL_VERSION, WHEEL_NAME, WHEEL_SHA256  # noqa: E402

__all__ = ["PARL_VERSION", "fetch_wheel", "load_module"]


def fetch_wheel(folder: Path, given: Path | str | None = None) -> Path:
    """PARL's wheel: ``given``, else downloaded into ``folder`` with pip; its sha256 checked."""
    wheel = Path(given) if given else folder / WHEEL_NAME
    if not given and not wheel.is_file():
        command = [
            sys.executable, "-m", "pip", "download", f"parl=={PARL_VERSION}", "--no-deps",
            "--only-binary=:all:", "--disable-pip-version-check", "-q", "-d", str(folder),
        ]  # fmt: skip
        subprocess.run(command, check=True, timeout=300)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise SystemExit(f"{wheel} has sha256 {digest}, not PyPI's {WHEEL_SHA256}")
    return wheel


def load_module(wheel: Path, folder: Path, module: str) -> ModuleType:
    """PARL's ``parl/algorithms/torch/<module>.py`` from ``wheel``, loaded against this
    package (its ``import parl`` resolves here)."""
    with zipfile.ZipFile(wheel) as archive:
        path = Path(archive.extract(f"parl/algorithms/torch/{module}.py", folder))
    spec = importlib.util.spec_from_file_location(f"published_parl_{module}", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded
