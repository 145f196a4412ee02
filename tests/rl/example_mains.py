"""Several runs of the examples' ``train.main`` in one fresh interpreter: the straight runs and
part runs a test compares, and the runs an example refuses, without paying an interpreter's
start (torch, gymnasium, parl: about two seconds) for each. A resume that a test compares with
a straight run runs in another interpreter than the one that ran its stopped part, as a user's
does. An example's module that a test calls without training (its memory, its flag checks)
is imported into the test's own process (``imported_example``)."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

from .conftest import REPO_ROOT, RunPython

_CODE = """
import dataclasses, importlib, json, os, sys, traceback
import torch
torch.set_num_threads(1)
current = None
for k, (folder, name, argv) in enumerate(json.loads({calls!r})):
    if folder != current:
        # each example's own modules (train, its agent, its model) imported afresh
        for loaded_name, loaded in list(sys.modules.items()):
            if current and (getattr(loaded, "__file__", None) or "").startswith(current + os.sep):
                del sys.modules[loaded_name]
        if current is not None:
            sys.path.remove(current)
        sys.path.insert(0, folder)
        current = folder
    module = importlib.import_module(name)
    sys.argv = [module.__file__, *argv]  # as its command line would have it
    sys.stderr.write("\\n@@run %d\\n" % k)
    sys.stderr.flush()
    code = 0
    try:
        result = module.main(argv)
        if dataclasses.is_dataclass(result):
            sys.stderr.write("\\n@@result " + json.dumps(dataclasses.asdict(result)) + "\\n")
        sys.stderr.write("\\n@@threads %d\\n" % torch.get_num_threads())
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    sys.stderr.write("\\n@@exit %d\\n" % code)
    sys.stderr.flush()
"""


def _script(example: str) -> tuple[str, str]:
    """The folder and module name of ``example``: an example's name (its ``train.py``) or a
    script's path from the repository root (``scripts/make_offline_dataset.py``)."""
    if example.endswith(".py"):
        path = REPO_ROOT / example
        return str(path.parent), path.stem
    return str(REPO_ROOT / "examples" / example), "train"


@dataclass
class Run:
    """One ``main(argv)``: its exit status (0: it returned; 2: a usage error; 1: it
    raised) and what it wrote to stderr (its log, a usage message or a traceback)."""

    code: int
    log: str
    result: dict | None = None  # what ``main`` returned, where that is a dataclass
    threads: int | None = None  # torch's intra-op threads when ``main`` returned


def run_mains(
    run_python: RunPython, calls: list[tuple[str, list[str]]], timeout: float = 300
) -> list[Run]:
    """``examples/<example>/train.py``'s ``main(argv)`` for each ``(example, argv)`` of
    ``calls``, in order, in one fresh interpreter; each call's exit status and log. An
    ``example`` ending in ``.py`` is a script's path from the repository root instead
    (``scripts/make_offline_dataset.py``): its module's ``main(argv)``."""
    scripts = [(*_script(example), argv) for example, argv in calls]
    code = _CODE.format(calls=json.dumps(scripts))
    proc = run_python(code, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
    runs = []
    for part in proc.stderr.split("\n@@run ")[1:]:
        body, _, tail = part.partition("\n@@exit ")
        log = body.split("\n", 1)[1] if "\n" in body else ""
        log, _, threads = log.partition("\n@@threads ")
        log, _, result = log.partition("\n@@result ")
        runs.append(Run(int(tail.split()[0]), log, json.loads(result) if result else None,
                        int(threads) if threads else None))  # fmt: skip
    assert len(runs) == len(calls), proc.stderr[-3000:]
    return runs


def run_ok(
    run_python: RunPython, calls: list[tuple[str, list[str]]], timeout: float = 300
) -> list[str]:
    """``run_mains`` of runs that must each end normally: their logs."""
    runs = run_mains(run_python, calls, timeout)
    for run in runs:
        assert run.code == 0, run.log[-3000:]
        assert "Traceback" not in run.log, run.log[-3000:]
    return [run.log for run in runs]


def run_ok_results(run_python: RunPython, calls: list[tuple[str, list[str]]]) -> list[dict]:
    """``run_mains`` of runs that must each return a result: each result, with its ``log``."""
    results = []
    for (name, _), run in zip(calls, run_mains(run_python, calls), strict=True):
        assert run.code == 0 and run.result is not None, f"{name}: {run.log[-3000:]}"
        for blemish in ("Traceback", "Exception ignored"):
            assert blemish not in run.log, f"{name}: {run.log[-3000:]}"
        results.append(run.result | {"log": run.log})
    return results


@contextmanager
def imported_example(folder: str, module: str = "train") -> Iterator[ModuleType]:
    """``<folder>/<module>.py`` (``folder`` under ``examples/`` or ``scripts/``) imported into
    this process with its folder first on ``sys.path``. Modules of the same names as the
    folder's files (another example's ``train``, ``agent``, ``model``) are set aside while it is
    imported and put back after; the folder's own modules are forgotten after."""
    path = REPO_ROOT / folder
    own = {file.stem for file in path.glob("*.py")}
    shadowed = {name: sys.modules.pop(name) for name in own if name in sys.modules}
    sys.path.insert(0, str(path))
    try:
        yield importlib.import_module(module)
    finally:
        sys.path.remove(str(path))
        for name, loaded in list(sys.modules.items()):
            if (getattr(loaded, "__file__", None) or "").startswith(str(path) + "/"):
                del sys.modules[name]
        sys.modules.update(shadowed)
