"""Every keyword PARL 2.2.1 gives a public method of its algorithms and of its core classes is
accepted here, at the same position.

The method signatures are read from the published wheel's source with ``ast`` (nothing of it is
imported), so a method PARL names with a keyword this package spells differently is caught,
whether ours takes it as a parameter or as one of its ``keyword_aliases``.
"""

from __future__ import annotations

import ast
import inspect
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import parl
from parl import algorithms

from . import test_parl_parity as parity

parl_wheel = parity.parl_wheel

# the wheel's modules whose classes are checked, and where this package keeps them
CORE = {
    "parl/core/torch/model.py": parl,
    "parl/core/torch/algorithm.py": parl,
    "parl/core/torch/agent.py": parl,
}
ALGORITHMS_FOLDER = "parl/algorithms/torch/"

# (class, method, PARL's parameter) -> why ours takes it by keyword only, not at its position
POSITION_DEVIATIONS: dict[tuple[str, str, str], str] = {
    ("IQL", "sync_target", "alpha"): "the first parameter is decay, as for every other "
    "algorithm's sync_target; PARL's IQL alone takes alpha = 1 - decay there (keyword alpha "
    "keeps PARL's meaning)",
}
# (class, method, PARL's parameter) -> why ours has no default where PARL's has one
DEFAULT_DEVIATIONS: dict[tuple[str, str, str], str] = {
    ("Algorithm", "__init__", "model"): "PARL's default None is refused by its own "
    "assert isinstance(model, Model) in the same method",
}


@dataclass(frozen=True)
class PublishedMethod:
    cls: str
    method: str
    positional: tuple[str, ...]  # after self
    keyword_only: tuple[str, ...]
    optional: frozenset[str]  # those with a default


def _published(source: str) -> Iterator[PublishedMethod]:
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for fn in node.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            if fn.name.startswith("_") and fn.name != "__init__":
                continue
            args = fn.args
            positional = [a.arg for a in args.posonlyargs + args.args][1:]
            with_default = positional[len(positional) - len(args.defaults) :]
            keyword_only = [a.arg for a in args.kwonlyargs]
            kw_defaults = [
                a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d
            ]
            yield PublishedMethod(
                node.name,
                fn.name,
                tuple(positional),
                tuple(keyword_only),
                frozenset(with_default + kw_defaults),
            )


@pytest.fixture(scope="module")
def published_methods(parl_wheel: Path) -> list[PublishedMethod]:
    methods = []
    with zipfile.ZipFile(parl_wheel) as archive:
        for member in archive.namelist():
            if member in CORE or (
                member.startswith(ALGORITHMS_FOLDER) and not member.endswith("__init__.py")
            ):
                methods.extend(_published(archive.read(member).decode()))
    assert len(methods) > 80  # the wheel's files were read
    return methods


def _ours(cls: str) -> Any:
    for home in (algorithms, parl):
        if hasattr(home, cls):
            return getattr(home, cls)
    return None


def _accepts(method: Callable[..., Any]) -> tuple[inspect.Signature, dict[str, str]]:
    """Our signature and the PARL names it takes through ``keyword_aliases``."""
    return inspect.signature(method), dict(getattr(method, "keyword_aliases", {}))


def test_every_parl_class_and_public_method_exists_here(
    published_methods: list[PublishedMethod],
) -> None:
    missing = sorted(
        {f"{m.cls}.{m.method}" for m in published_methods if _ours(m.cls) is None}
        | {
            f"{m.cls}.{m.method}"
            for m in published_methods
            if _ours(m.cls) is not None and not hasattr(_ours(m.cls), m.method)
        }
    )
    assert not missing


def test_every_parl_keyword_is_accepted_at_its_position(
    published_methods: list[PublishedMethod],
) -> None:
    problems = []
    for m in published_methods:
        method = getattr(_ours(m.cls), m.method, None)
        if method is None:
            continue
        signature, aliases = _accepts(method)
        params = [p for p in signature.parameters.values()][1:]  # self
        by_name = {p.name: p for p in params}
        positional = [
            p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        takes_any_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
        where = f"{m.cls}.{m.method}"
        for i, name in enumerate((*m.positional, *m.keyword_only)):
            ours = aliases.get(name, name)
            param = by_name.get(ours)
            if param is None and not takes_any_keyword:
                problems.append(f"{where} does not take PARL's keyword {name!r}")
                continue
            if param is not None and param.kind is param.POSITIONAL_ONLY:
                problems.append(f"{where} takes {ours!r} by position only")
            if (
                name in m.optional
                and param is not None
                and param.default is param.empty
                and (m.cls, m.method, name) not in DEFAULT_DEVIATIONS
            ):
                problems.append(f"{where} requires {ours!r}, which PARL's {name!r} defaults")
            deviation = POSITION_DEVIATIONS.get((m.cls, m.method, name))
            if i < len(m.positional) and deviation is None:
                at = positional[i] if i < len(positional) else None
                if at != ours:
                    problems.append(f"{where}: PARL's argument {i + 1} is {name!r}, ours is {at!r}")
    assert not problems, "\n".join(problems)


def test_no_required_parameter_is_added_to_a_parl_method(
    published_methods: list[PublishedMethod],
) -> None:
    """A call that gives what PARL's method needs binds to ours."""
    problems = []
    for m in published_methods:
        method = getattr(_ours(m.cls), m.method, None)
        if method is None:
            continue
        signature, aliases = _accepts(method)
        theirs = {aliases.get(n, n) for n in (*m.positional, *m.keyword_only)}
        required = [
            p.name
            for p in list(signature.parameters.values())[1:]
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        extra = [name for name in required if name not in theirs]
        if extra:
            problems.append(f"{m.cls}.{m.method} requires {extra}, which PARL's does not take")
    assert not problems, "\n".join(problems)


def test_the_declared_position_deviations_are_still_real(
    published_methods: list[PublishedMethod],
) -> None:
    """A deviation listed above names a parameter PARL has (a stale entry is taken out)."""
    found = {(m.cls, m.method, name) for m in published_methods for name in m.positional}
    assert set(POSITION_DEVIATIONS) <= found
    assert set(DEFAULT_DEVIATIONS) <= {
        (m.cls, m.method, name) for m in published_methods for name in m.optional
    }
    for cls, method, name in POSITION_DEVIATIONS:
        signature = inspect.signature(getattr(_ours(cls), method))
        assert signature.parameters[name].kind is inspect.Parameter.KEYWORD_ONLY


def test_parls_keyword_names_reach_the_same_parameters() -> None:
    """PopArt's ``input_vector`` and ``Algorithm.set_weights(params=...)`` as PARL's scripts pass
    them; a name given twice is refused, naming both (MAPPO's and IQL's are in their files)."""
    import torch
    from torch import nn

    layer = nn.Linear(3, 1)
    popart = algorithms.PopArt(layer.weight, layer.bias)
    targets = torch.arange(4.0).reshape(4, 1)
    popart.update(input_vector=targets)
    normalized = popart.normalize(input_vector=targets)
    assert torch.allclose(popart.normalize(targets), normalized)
    assert torch.allclose(popart.denormalize(input_vector=normalized), targets, atol=1e-4)
    with pytest.raises(TypeError, match=r"'values' and its other name 'input_vector'"):
        popart.normalize(targets, input_vector=targets)

    class Tiny(parl.Model):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)

    source, target = parl.Algorithm(Tiny()), parl.Algorithm(Tiny())
    target.set_weights(params=source.get_weights())
    assert torch.equal(target.model.fc.weight, source.model.fc.weight)
    with pytest.raises(TypeError, match=r"'weights' and its other name 'params'"):
        target.set_weights(weights={}, params={})
