"""The code of the documentation runs as a reader would run it.

Python: the fenced ``python`` blocks of each page under ``docs/`` run in order in one fresh
process (a page's blocks share their names, as when a reader pastes them one after another), in
an empty folder. The script keeps each block at its line of the page, so a traceback names the
page's line. Two HTML comments, which the built pages do not show, adapt a page to this check:

- ``<!-- no-run: why -->`` on the line before a fence skips that block (a second machine, a
  running cluster, a GPU); :data:`MAX_NO_RUN` keeps such blocks few;
- ``<!-- setup: ... -->`` holds code that runs where it stands, before the blocks below it,
  to make the names a fragment uses (an ``agent``, a remote class).

Shell: every ``python examples/<name>/<script>.py ...`` and ``xparl ...`` line of a ``bash``
block is parsed by the script's (or xparl's) own argument parser, without running it.

Text: the exception tree of ``docs/reference/errors.md`` is checked against the classes.

The README's two Python blocks are run by ``tests/test_readme.py``, through the same
:func:`run_cleanly`: exit status 0, and no traceback or "Exception ignored" on stderr.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MAX_NO_RUN = 6  # blocks that need what a test machine lacks; keep it small

FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
NO_RUN = re.compile(r"<!--\s*no-run:\s*(.+?)\s*-->\s*$")
SETUP = re.compile(r"^<!--\s*setup:[ \t]*\n(.*?)^-->[ \t]*$", re.S | re.M)


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _blocks(page: Path, language: str) -> list[tuple[int, str, str | None]]:
    """``(first line of the code, code, reason it does not run or None)`` for each block."""
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) != language:
            continue
        fence_line = _line_of(text, match.start())
        before = lines[fence_line - 2] if fence_line >= 2 else ""
        skip = NO_RUN.search(before)
        found.append((fence_line + 1, match.group(2), skip.group(1) if skip else None))
    return found


def _script(page: Path) -> str | None:
    """The page's runnable code (setup comments and blocks) at their lines of the page; None
    when the page has no block to run."""
    text = page.read_text(encoding="utf-8")
    pieces = [(_line_of(text, m.start(1)), m.group(1)) for m in SETUP.finditer(text)]
    blocks = [(line, code) for line, code, skip in _blocks(page, "python") if skip is None]
    if not blocks:
        return None
    out: list[str] = []
    for line, code in sorted(pieces + blocks):
        out.extend([""] * (line - 1 - len(out)))
        out.extend(code.splitlines())
    return "\n".join(out) + "\n"


# pages with a block to run (a page whose every block is marked no-run has nothing to test)
PYTHON_PAGES = [p for p in _pages() if any(skip is None for *_, skip in _blocks(p, "python"))]


def test_few_blocks_are_marked_not_to_run() -> None:
    skipped = [
        f"{page.relative_to(ROOT)}:{line}: {why}"
        for page in _pages()
        for line, _, why in _blocks(page, "python")
        if why is not None
    ]
    ran = sum(1 for page in _pages() for *_, why in _blocks(page, "python") if why is None)
    assert len(skipped) <= MAX_NO_RUN, "\n".join(skipped)
    assert ran >= 3 * len(skipped), f"{ran} blocks run, {len(skipped)} do not:\n" + "\n".join(
        skipped
    )


@pytest.mark.slow  # each page starts a process, most of them actors: seconds per page
@pytest.mark.parametrize("page", PYTHON_PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_the_python_blocks_of_a_page_run_in_order(page: Path, tmp_path: Path) -> None:
    code = _script(page)
    assert code is not None
    where = f"{page.relative_to(ROOT)} (traceback lines are the page's lines)"
    run_cleanly(code, tmp_path / f"{page.stem}_page.py", where, timeout=120)


def run_cleanly(code: str, script: Path, where: str, timeout: float) -> str:
    """Run ``code`` as the file ``script`` in a fresh interpreter, in the script's folder, as
    a reader would; it must exit 0 and leave stderr free of what a reader would take for a
    failure (a traceback, or an "Exception ignored" at exit). Returns its stdout."""
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    report = f"{where}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, report
    for blemish in ("Traceback", "Exception ignored"):
        assert blemish not in done.stderr, report
    return done.stdout


# --- shell lines ------------------------------------------------------------------------------

_COMMAND = re.compile(r"^(?:\.venv/bin/)?(python3?|xparl)\s")

# Run in a fresh process: imports each example's train.py (its folder first on sys.path, as
# `python examples/X/train.py` has it) and parses the arguments with its make_parser().
_PARSE_ALL = r"""
import importlib.util, json, sys
from parl.cluster.cli import make_parser as xparl_parser
failures = []
for where, argv in json.loads(sys.argv[1]):
    try:
        if argv[0] == "xparl":
            parser = xparl_parser()
        else:
            path = argv[0]
            folder = path.rsplit("/", 1)[0]
            for name in [n for n, m in sys.modules.items()
                         if (getattr(m, "__file__", "") or "").startswith(sys.argv[2] + "/examples/")]:
                del sys.modules[name]  # every example has its own model.py, agent.py, ...
            sys.path.insert(0, sys.argv[2] + "/" + folder)
            try:
                spec = importlib.util.spec_from_file_location("doc_example", sys.argv[2] + "/" + path)
                module = importlib.util.module_from_spec(spec)
                sys.modules["doc_example"] = module  # dataclasses look their module up
                spec.loader.exec_module(module)
            finally:
                sys.path.pop(0)
            parser = module.make_parser()
        try:
            parser.parse_args(argv[1:])
        except SystemExit as exc:
            if exc.code not in (0, None):
                failures.append(f"{where}: {' '.join(argv)}: exit {exc.code}")
    except Exception as exc:
        failures.append(f"{where}: {' '.join(argv)}: {type(exc).__name__}: {exc}")
print(json.dumps(failures))
"""


def _command_lines() -> list[tuple[str, list[str]]]:
    found = []
    readmes = sorted((ROOT / "examples").glob("*/README.md"))  # the algorithm pages include them
    for page in [*_pages(), *readmes]:
        for line, code, _ in _blocks(page, "bash"):
            for number, text in enumerate(code.splitlines(), line):
                if not _COMMAND.match(text.strip()):
                    continue
                words = shlex.split(text, comments=True)
                program = words[0].rsplit("/", 1)[-1]
                if program == "xparl":
                    argv = ["xparl", *words[1:]]
                elif len(words) > 1 and words[1].startswith("examples/"):
                    argv = words[1:]
                else:
                    continue  # python -m pytest, python -c ...: not an example or xparl
                found.append((f"{page.relative_to(ROOT)}:{number}", argv))
    return found + _quality_command_lines()


def _quality_command_lines() -> list[tuple[str, list[str]]]:
    """The example command line of every experiment of ``scripts/quality.py``."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import quality
    finally:
        sys.path.pop(0)
    return [
        (f"scripts/quality.py: {name}", experiment.command(0, "/tmp/logdir", experiment.steps)[1:])
        for name, experiment in quality.EXPERIMENTS.items()
    ]


def test_the_example_scripts_named_in_shell_blocks_exist() -> None:
    lines = _command_lines()
    assert len(lines) > 20, lines
    missing = [f"{w}: {argv[0]}" for w, argv in lines if argv[0] != "xparl"]
    missing = [m for m in missing if not (ROOT / m.rsplit(": ", 1)[1]).is_file()]
    assert not missing, "\n".join(missing)


@pytest.mark.slow  # imports every example (torch, gymnasium): about ten seconds
def test_every_example_and_xparl_command_line_of_the_docs_parses() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PARSE_ALL, json.dumps(_command_lines()), str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failures, "command lines that do not parse:\n" + "\n".join(failures)


def _error_classes() -> dict[str, type]:
    """parl's own exceptions by name: those of ``parl``, ``parl.errors`` and the futures."""
    import parl
    import parl.errors
    import parl.remote.future

    found = {}
    for module, names in (
        (parl, parl.__all__),  # names parl imports on first use are not in its vars() yet
        (parl.errors, dir(parl.errors)),
        (parl.remote.future, dir(parl.remote.future)),
    ):
        for name in names:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, parl.ParlError):
                if module is parl or value.__module__ == module.__name__:
                    found[name] = value
    return found


def test_the_tree_of_the_errors_page_is_the_packages_exception_tree() -> None:
    """Each class of the tree in ``docs/reference/errors.md`` has the parent the tree gives it
    and the built-in bases its ``(also ...)`` names, and every exception of parl is in it."""
    page = DOCS / "reference" / "errors.md"
    tree = re.search(
        r"^```text\n(ParlError\n.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M
    )
    assert tree, "errors.md has no ```text block with the tree"
    classes = _error_classes()
    parents: list[str] = []  # the ancestors of the current line, by depth
    wrong, seen = [], set()
    for line in tree.group(1).splitlines():
        match = re.match(r"^([│├└─ ]*)(\w+)(?: \(also ([\w, ]+)\))?$", line)
        assert match, f"not a line of the tree: {line!r}"
        depth, name = len(match.group(1)) // 4, match.group(2)
        parents[depth:] = [name]
        seen.add(name)
        if name not in classes:
            wrong.append(f"{name}: no such exception in parl")
            continue
        cls = classes[name]
        if depth and classes.get(parents[depth - 1]) not in cls.__bases__:
            wrong.append(f"{name}: its bases are {[b.__name__ for b in cls.__bases__]}")
        for also in (match.group(3) or "").split(", "):
            if also and also not in {base.__name__ for base in cls.__mro__}:
                wrong.append(f"{name}: not also a {also}")
    missing = sorted(set(classes) - seen)
    assert not wrong and not missing, "\n".join(wrong + [f"not in the tree: {missing}"])
