"""The versions a caller and the hosts of its cluster must share, and the error when they differ.

Actors' classes and arguments travel pickled (by reference, or by value with cloudpickle), so
both ends need the same Python (major.minor) and the same parl, numpy, torch and cloudpickle.
A torch build tag (``+cpu``, ``+cu121``) may differ: a GPU host and a CPU-only caller are
normal. Versions are read from package metadata, without importing the packages.

Test hook: a process started with ``PARL_TEST_FAKE_VERSIONS="numpy=0.0.1,torch=1.0"`` reports
those versions instead of its own (the tests start a host agent so, to check the error).
"""

from __future__ import annotations

import os
import sys
from importlib import metadata

from parl._version import __version__
from parl.errors import VersionMismatchError

FAKE_ENV = "PARL_TEST_FAKE_VERSIONS"
CHECKED = ("python", "parl", "numpy", "torch", "cloudpickle")
MISSING = "(not installed)"


def local_versions() -> dict[str, str]:
    """This process's versions of everything in ``CHECKED``."""
    found = {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "parl": __version__,
    }
    for name in CHECKED[2:]:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = MISSING
    found.update(_fakes(os.environ.get(FAKE_ENV, "")))
    return found


def _fakes(spec: str) -> dict[str, str]:
    fakes = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, version = item.partition("=")
        if sep and name.strip() in CHECKED:
            fakes[name.strip()] = version.strip()
    return fakes


def _comparable(name: str, version: str) -> str:
    return version.split("+", 1)[0] if name == "torch" else version


def mismatches(ours: dict[str, str], theirs: object) -> list[tuple[str, str, str]]:
    """(name, ours, theirs) for every checked name whose versions differ; a peer that sent no
    versions (an older parl) differs in every one."""
    other = theirs if isinstance(theirs, dict) else {}
    found = []
    for name in CHECKED:
        here, there = ours.get(name, MISSING), str(other.get(name, "(unknown)"))
        if _comparable(name, here) != _comparable(name, there):
            found.append((name, here, there))
    return found


def check(ours: dict[str, str], theirs: object, where: str) -> None:
    """Raise VersionMismatchError showing both sides when ``theirs`` (the versions reported by
    ``where``, e.g. "the host agent at 10.0.0.2:4567") differs from ``ours``."""
    differ = mismatches(ours, theirs)
    if not differ:
        return
    there = "there"
    width = max(len(name) for name, _, _ in differ + [("package", "", "")])
    here_width = max(len(here) for _, here, _ in differ + [("", "this machine", "")])
    rows = [f"  {'package':<{width}}  {'this machine':<{here_width}}  {there}"]
    rows += [f"  {name:<{width}}  {here:<{here_width}}  {other}" for name, here, other in differ]
    fixes = ", ".join(
        f"{name}=={here}" for name, here, _ in differ if name not in ("python", "parl")
    )
    hint = f" (e.g. `pip install {fixes}` there)" if fixes else ""
    raise VersionMismatchError(
        f"versions differ between this machine and {where}:\n" + "\n".join(rows) + "\n"
        f"Actors' code and data are pickled on one side and unpickled on the other: install "
        f"the same versions on both{hint}, then connect again."
    )
