"""Every example folder has a README.md that a user can copy from: each ``python examples/X/...``
command in its shell blocks parses with that script's own ``make_parser()`` (so it names only
flags the script has, with values they accept), its relative links lead to files of the
repository, and it carries no development history.

The scripts are imported by file path with their folder first on ``sys.path``, as ``python
examples/X/train.py`` runs them; the folders share module names (``agent``, ``model``), so the
modules of one folder are put aside while another's script loads.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote, urlsplit

import pytest

from tests.test_readme import FENCE, HISTORY, LINK, WORK_LOG, _anchors

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FOLDERS = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith("_"))
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.S | re.M)


@contextlib.contextmanager
def _own_folder_first(folder: Path) -> Iterator[None]:
    """``folder`` first on ``sys.path`` and none of another folder's same-named modules in
    ``sys.modules``; both as they were afterwards."""
    names = {p.stem for p in folder.glob("*.py")}
    aside = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(aside)


def load_script(path: Path) -> ModuleType:
    """The example script at ``path`` imported as a module (its ``main`` is not run)."""
    name = f"example_{path.parent.name}_{path.stem}"
    with _own_folder_first(path.parent):
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is made
        try:
            spec.loader.exec_module(module)
        finally:
            del sys.modules[name]
    return module


def readme_commands(readme: Path) -> list[list[str]]:
    """The ``python examples/...`` command lines of the README's shell blocks, split as a shell
    splits them, comments dropped and ``\\`` continuations joined."""
    commands = []
    for block in SHELL_BLOCK.findall(readme.read_text(encoding="utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["python"] and len(words) > 1 and words[1].startswith("examples/"):
                commands.append(words[1:])
    return commands


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


@pytest.mark.parametrize("name", FOLDERS)
def test_every_example_has_a_readme_with_its_command(name: str) -> None:
    readme = EXAMPLES / name / "README.md"
    assert readme.is_file(), f"examples/{name} has no README.md"
    scripts = {words[0] for words in readme_commands(readme)}
    assert any(s.startswith(f"examples/{name}/") for s in scripts), (
        f"examples/{name}/README.md shows no 'python examples/{name}/...' command: {scripts}"
    )


@pytest.mark.parametrize("name", FOLDERS)
def test_readme_commands_parse_with_the_scripts_parser(name: str) -> None:
    readme = EXAMPLES / name / "README.md"
    problems = []
    for script, *args in readme_commands(readme):
        path = ROOT / script
        if not path.is_file():
            problems.append(f"{script}: no such script")
            continue
        parser = load_script(path).make_parser()
        parser.exit_on_error = False
        unknown = [a.split("=")[0] for a in args if a.startswith("-") and a.split("=")[0]
                   not in _flags(parser)]  # fmt: skip
        if unknown:
            problems.append(f"{shlex.join([script, *args])}: no flag {unknown}")
            continue
        if {"-h", "--help"} & set(args):
            continue
        try:
            parser.parse_args(args)
        except (argparse.ArgumentError, SystemExit) as error:
            problems.append(f"{shlex.join([script, *args])}: {error}")
    assert not problems, f"examples/{name}/README.md:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", FOLDERS)
def test_readme_relative_links_lead_to_files_of_the_repository(name: str) -> None:
    readme = EXAMPLES / name / "README.md"
    text = FENCE.sub("", readme.read_text(encoding="utf-8"))
    broken = []
    for link in LINK.findall(text):
        parts = urlsplit(link)
        if parts.scheme or link.startswith("//"):
            continue  # another site
        target = (readme.parent / unquote(parts.path)).resolve() if parts.path else readme
        if not target.is_file():
            broken.append(f"{link}: no such file")
        elif not target.is_relative_to(ROOT):
            broken.append(f"{link}: outside the repository")
        elif parts.fragment and target.suffix == ".md":
            if parts.fragment not in _anchors(target):
                broken.append(f"{link}: no heading #{parts.fragment}")
    assert not broken, f"broken links in examples/{name}/README.md:\n" + "\n".join(broken)


@pytest.mark.parametrize("name", FOLDERS)
def test_readme_carries_no_development_history(name: str) -> None:
    readme = EXAMPLES / name / "README.md"
    found = [
        f"{number}: {line.strip()}"
        for number, line in enumerate(readme.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line) or WORK_LOG.search(line)
    ]
    assert not found, f"examples/{name}/README.md:\n" + "\n".join(found)


def test_a_misspelt_flag_in_a_command_is_caught(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        "```bash\npython examples/DQN/train.py --algo DDQN \\\n    --train_steps 5  # note\n```\n"
    )
    ((script, *args),) = readme_commands(readme)
    assert script == "examples/DQN/train.py" and args == ["--algo", "DDQN", "--train_steps", "5"]
    parser = load_script(ROOT / script).make_parser()
    assert "--train_steps" not in _flags(parser) and "--train_total_steps" in _flags(parser)
