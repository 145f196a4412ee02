"""The package's layers hold: the import-linter contracts in setup.cfg pass, and no folder of
``parl`` imports a folder that imports it back, counting imports inside functions (which the
linter's layers also count, but a loop through them is the easiest to add unnoticed).
"""

from __future__ import annotations

import ast
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARL = ROOT / "parl"


def _lint_imports() -> list[str]:
    """The command that checks the contracts: the console script beside this interpreter (or
    on PATH), else the module."""
    beside = Path(sys.executable).with_name("lint-imports")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("lint-imports")
    command = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return [found] if found else [sys.executable, "-c", command]


def test_import_contracts_hold() -> None:
    """The contracts of setup.cfg; a broken one fails with import-linter's report, which names
    each import against the layers and its line. Without import-linter (the ``test`` extra) the
    test skips, except under ``CI=true``, where it fails."""
    if os.environ.get("CI") != "true":
        pytest.importorskip("importlinter", reason="pip install -e '.[test]' brings import-linter")
    result = subprocess.run(
        [*_lint_imports(), "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if result.returncode != 0:
        pytest.fail(f"lint-imports failed:\n{result.stdout}{result.stderr}", pytrace=False)


# the folders below parl.remote (the runtime's carriers and what they stand on)
RUNTIME = (
    "parl.wire",
    "parl.shm",
    "parl.workers",
    "parl.deploy",
    "parl.local",
    "parl.cluster",
    "parl.ssh",
    "parl.ray",
    "parl.monitoring",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path, name: str) -> Iterator[tuple[str, int]]:
    """Every module the module ``name`` (source file ``path``) imports, wherever the statement
    is (module level, a function, a ``TYPE_CHECKING`` block), with its line; ``from a import b``
    yields ``a`` and ``a.b`` (``b`` may be a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base, node.lineno
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def folder_of(module: str) -> str | None:
    """The folder of ``parl`` a module belongs to (``parl.shm.link`` -> ``parl.shm``); a module
    directly in ``parl/`` is one of its own (``parl.errors``); the package itself, and names
    imported from it (``parl.remote_class``), are ``parl``; None outside parl."""
    parts = module.split(".")
    if parts[0] != "parl":
        return None
    if len(parts) == 1:
        return "parl"
    if (PARL / parts[1]).is_dir() or (PARL / f"{parts[1]}.py").exists():
        return f"parl.{parts[1]}"
    return "parl"


def folder_imports() -> dict[tuple[str, str], list[str]]:
    """(importing folder, imported folder) -> where, for every import between two folders."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PARL.rglob("*.py")):
        name = _module_name(path)
        source = folder_of(name)
        for target_module, line in imported(path, name):
            target = folder_of(target_module)
            if source is None or target is None or target == source:
                continue
            edges.setdefault((source, target), []).append(f"{path.relative_to(ROOT)}:{line}")
    return edges


def loops(edges: dict[tuple[str, str], list[str]] | set[tuple[str, str]]) -> list[list[str]]:
    """Each loop between folders once, as the list of folders along it (first one last too)."""
    graph: dict[str, set[str]] = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                found.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each loop once, from its smallest folder
                walk([*path, nxt])

    for start in sorted(graph):
        walk([start])
    return found


def test_no_folder_imports_a_folder_that_imports_it() -> None:
    """``parl`` itself is left out: its ``__init__`` names every folder's public face (lazily),
    and the RL folders use that face as user code does (``parl.remote_class``); below
    ``parl.remote``, nothing imports it (the next test)."""
    edges = {k: v for k, v in folder_imports().items() if "parl" not in k}
    found = loops(edges)
    report = [
        " -> ".join(loop)
        + "".join(
            f"\n    {a} -> {b}: {', '.join(edges[(a, b)][:3])}" for a, b in itertools.pairwise(loop)
        )
        for loop in found
    ]
    assert not found, "imports between folders form loops:\n" + "\n".join(report)


def test_the_runtime_below_the_user_face_never_imports_the_package_itself() -> None:
    """``import parl`` from the runtime would make every carrier depend on the top of the
    package (and, through its lazy names, on everything): the runtime finds parl's folder from
    its own ``__file__`` and its version in ``parl._version``."""
    edges = folder_imports()
    found = {source: edges[(source, "parl")] for source in RUNTIME if (source, "parl") in edges}
    assert not found, f"the runtime imports the package parl itself: {found}"


def test_imports_inside_functions_count(tmp_path: Path) -> None:
    module = tmp_path / "mod.py"
    module.write_text("def f():\n    from ..ssh import hosts\n    return hosts\n")
    assert ("parl.ssh.hosts", 2) in set(imported(module, "parl.cluster.mod"))
    assert folder_of("parl.ssh.hosts") == "parl.ssh"
    assert folder_of("parl.errors") == "parl.errors"
    assert folder_of("parl.remote_class") == "parl"


def test_a_loop_through_three_folders_is_found_once() -> None:
    edges = {("parl.a", "parl.b"), ("parl.b", "parl.c"), ("parl.c", "parl.a"), ("parl.c", "x")}
    assert loops(edges) == [["parl.a", "parl.b", "parl.c", "parl.a"]]
