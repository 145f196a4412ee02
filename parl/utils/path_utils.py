"""PARL's ``format_uniform_path``: a path written with ``/`` or ``\\`` in this OS's separator."""

from __future__ import annotations

import os

__all__ = ["format_uniform_path"]


def format_uniform_path(path: str) -> str:
    """``path`` with each ``//``, then each ``/`` and each ``\\``, replaced by ``os.sep``.

    A doubled ``//`` counts as one separator (``"a//b"`` -> ``"a/b"`` on Linux), as in PARL;
    nothing else of the path changes (it is neither resolved nor normalised).
    """
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, got {path!r} ({type(path).__name__})")
    for separator in ("//", "/", "\\"):
        path = path.replace(separator, os.sep)
    return path
