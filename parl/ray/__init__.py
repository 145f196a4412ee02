"""Actors on Ray: ``parl.connect("ray")`` or ``parl.connect("ray://head:10001")`` (optional
extra ``ray``: :func:`install_hint` names the command for this copy of parl).

Importing this package imports nothing of Ray; :mod:`parl.ray.carrier` does, and only
``parl.connect`` with a Ray address imports it. See docs/guides/ray.md.
"""

from __future__ import annotations

from parl.extras import install_hint as _install_hint


def install_hint() -> str:
    """How to install Ray for this copy of parl (from a clone or from the index)."""
    return _install_hint("ray", "'ray>=2.60'")
