"""Every public name of parl says what it does: a walk over the public surface finds no class,
function, method or property without a docstring.

The public surface is what the package ``__init__`` files export (their ``__all__``), followed
into the modules and classes they name, plus every name the API reference page
(``docs/reference/api.md``) lists. A class's public methods are those whose names do not start
with ``_``, defined in a parl class of its MRO (what torch, gymnasium or the standard library
define is theirs to document). A docstring that ``dataclass`` or ``NamedTuple`` writes (the
signature) does not count.
"""

from __future__ import annotations

import importlib
import inspect
import re
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
API_PAGE = ROOT / "docs" / "reference" / "api.md"
PACKAGES = (
    "parl",
    "parl.core",
    "parl.algorithms",
    "parl.utils",
    "parl.env",
    "parl.shm",
    "parl.remote",
    "parl.errors",
)


def _api_page_names() -> list[str]:
    """The dotted names the ``autosummary`` lists of the API page document."""
    names, module, listing = [], "parl", False
    for line in API_PAGE.read_text(encoding="utf-8").splitlines():
        if found := re.match(r"\.\. currentmodule:: (\S+)", line):
            module = found.group(1)
        elif line.startswith(".. autosummary::"):
            listing = True
        elif listing and line.startswith("   ") and not line.strip().startswith(":"):
            names.append(f"{module}.{line.strip()}")
        elif listing and line.strip() and not line.startswith("   "):
            listing = False
    return names


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    for part in parts[cut:]:
        obj = getattr(obj, part)
    return obj


def _ours(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "") or "").split(".")[0] == "parl"


def _own_doc(cls: type) -> str | None:
    doc = cls.__dict__.get("__doc__")
    generated = doc is not None and doc.startswith(f"{cls.__name__}(") and "\n" not in doc
    return None if generated else doc


def _function_of(member: Any) -> Any:
    if isinstance(member, (classmethod, staticmethod)):
        return member.__func__
    if isinstance(member, property):
        return member.fget
    return member


class _Walk:
    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.docs: dict[str, str | None] = {}

    def visit(self, name: str, obj: Any) -> None:
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        if isinstance(obj, types.ModuleType):
            self._module(obj)
        elif inspect.isclass(obj):
            self._class(obj)
        elif callable(obj) and _ours(obj):
            self.docs[f"{obj.__module__}.{getattr(obj, '__qualname__', name)}"] = obj.__doc__

    def _module(self, module: types.ModuleType) -> None:
        if not module.__name__.startswith("parl"):
            return
        self.docs[module.__name__] = module.__doc__
        names = getattr(module, "__all__", None)
        if names is None:  # a module without __all__: what it defines itself
            names = [
                name
                for name, value in vars(module).items()
                if not name.startswith("_")
                and getattr(value, "__module__", None) == module.__name__
            ]
        for name in names:
            self.visit(f"{module.__name__}.{name}", getattr(module, name))

    def _class(self, cls: type) -> None:
        if not _ours(cls):
            return
        self.docs[f"{cls.__module__}.{cls.__qualname__}"] = _own_doc(cls)
        for klass in cls.__mro__:
            if not _ours(klass):
                continue
            for name, member in vars(klass).items():
                function = _function_of(member)
                if name.startswith("_") or not inspect.isfunction(function):
                    continue
                if id(function) not in self.seen:
                    self.seen.add(id(function))
                    self.docs[f"{klass.__module__}.{klass.__qualname__}.{name}"] = function.__doc__


def _public_docs() -> dict[str, str | None]:
    walk = _Walk()
    for package in PACKAGES:
        walk.visit(package, importlib.import_module(package))
    for dotted in _api_page_names():
        walk.visit(dotted, _resolve(dotted))
    return walk.docs


def test_the_api_page_lists_names_that_exist() -> None:
    names = _api_page_names()
    assert len(names) > 50, names
    for dotted in names:
        _resolve(dotted)  # raises AttributeError or ImportError for a stale entry


def test_every_public_class_function_and_method_has_a_docstring() -> None:
    docs = _public_docs()
    assert len(docs) > 250, f"the walk found only {len(docs)} public names"
    for expected in ("parl.remote.context.connect", "parl.core.agent.Agent.save_checkpoint"):
        assert expected in docs
    missing = sorted(name for name, doc in docs.items() if not (doc and doc.strip()))
    assert not missing, f"{len(missing)} public names without a docstring:\n" + "\n".join(missing)


def test_the_runtime_entry_points_document_their_arguments_google_style() -> None:
    """What users call to run actors says, argument by argument, what each one does."""
    import parl

    for function in (parl.connect, parl.remote_class, parl.get, parl.wait):
        doc = inspect.getdoc(function) or ""
        assert "Args:" in doc and "Raises:" in doc, function.__name__
    connect_doc = inspect.getdoc(parl.connect) or ""
    signature = inspect.signature(parl.connect)
    for name in signature.parameters:
        assert re.search(rf"^\s+{name}:", connect_doc, re.M), f"connect's docstring lacks {name}"
    for group in ("Every carrier", "Local workers only", "SSH hosts only"):
        assert group in connect_doc
