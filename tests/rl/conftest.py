"""Fixtures of the RL tests: small models and agents, a subprocess runner, the QuickStart."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from parl.algorithms import PolicyGradient

from .nets import PGAgent, PolicyNet

REPO_ROOT = Path(__file__).resolve().parents[2]
QUICKSTART_DIR = REPO_ROOT / "examples" / "QuickStart"


MakeAgent = Callable[..., PGAgent]


@pytest.fixture
def make_agent() -> MakeAgent:
    """``make_agent(seed=0, **net_kwargs)``: a PolicyGradient agent on CPU, seeded weights."""

    def make(seed: int = 0, lr: float = 1e-2, **net_kwargs: Any) -> PGAgent:
        torch.manual_seed(seed)
        return PGAgent(PolicyGradient(PolicyNet(**net_kwargs), lr=lr, device="cpu"))

    return make


@pytest.fixture
def single_thread() -> Iterator[None]:
    """One torch thread for bit-exact reproducibility; the previous count is restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


RunPython = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def run_python(tmp_path: Path) -> RunPython:
    """Run Python code (or ``args``) in a fresh interpreter, in ``tmp_path``, with the repository
    importable; returns the completed process (stdout and stderr captured as text). An
    interpreter that exits 0 must not have printed "Exception ignored" (a finalizer or thread
    that failed unseen: what a user would see at the end of a run)."""

    def run(
        code: str | None = None,
        args: list[str] | None = None,
        timeout: float = 120,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
        )
        command = [sys.executable, *(["-c", code] if code is not None else []), *(args or [])]
        proc = subprocess.run(
            command,
            cwd=cwd or tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode == 0:
            assert "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
        return proc

    return run


@pytest.fixture(scope="session")
def quickstart() -> Iterator[ModuleType]:
    """``examples/QuickStart/train.py`` imported as a module of its own name: every example has
    a ``train.py``, and another test may already hold ``sys.modules["train"]``."""
    sys.path.insert(0, str(QUICKSTART_DIR))
    try:
        spec = importlib.util.spec_from_file_location(
            "quickstart_train", QUICKSTART_DIR / "train.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while it runs
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(QUICKSTART_DIR))
        sys.modules.pop("quickstart_train", None)


@pytest.fixture
def summary_dir(tmp_path: Path) -> Iterator[Path]:
    """``parl.utils.summary`` writing into a temporary folder; closed afterwards."""
    from parl.utils import summary

    logdir = tmp_path / "tb"
    summary.set_dir(logdir)
    yield logdir
    summary.close()
