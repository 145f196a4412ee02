"""Several example scripts run in one interpreter, each as ``python <script> <flags>`` would
run it (``runpy`` as ``__main__``, its folder first on ``sys.path``, its own modules forgotten
after it): for checks of what a script does before it trains (``--help``, usage errors, errors
naming a bad env), where a fresh interpreter per case would cost seconds of imports each."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import REPO_ROOT, RunPython

_RUN_SCRIPTS = """
import contextlib, io, json, os, runpy, sys
examples = {examples!r}
out = {{}}
for key, script, argv in {cases!r}:
    before, folder = set(sys.modules), os.path.dirname(script)
    sys.argv, stdout, stderr = [script, *argv], io.StringIO(), io.StringIO()
    code, error = 0, None
    sys.path.insert(0, folder)
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:
            code, error = 1, f"{{type(exc).__name__}}: {{exc}}"
    sys.path.remove(folder)
    for module in set(sys.modules) - before:  # each example's own modules (model.py, ...)
        if (getattr(sys.modules[module], "__file__", None) or "").startswith(examples):
            del sys.modules[module]
    out[key] = {{"code": code, "stdout": stdout.getvalue(), "stderr": stderr.getvalue(),
                "error": error}}
print("RESULTS" + json.dumps(out))
"""


def run_scripts(
    run_python: RunPython, cases: list[tuple[str, Path, list[str]]], timeout: float = 300
) -> dict[str, dict]:
    """Run each ``(key, script, argv)`` in one fresh interpreter, in order; returns, by key,
    the exit ``code`` (0 when the script returned, 1 when it raised), what it printed to
    ``stdout`` and ``stderr``, and the ``error`` it raised as ``"Type: message"`` (or None)."""
    code = _RUN_SCRIPTS.format(
        examples=str(REPO_ROOT / "examples"),
        cases=[(key, str(script), argv) for key, script, argv in cases],
    )
    proc = run_python(code, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS"))
    return json.loads(line[len("RESULTS") :])
