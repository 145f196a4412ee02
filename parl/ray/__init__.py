"""Actors on Ray: ``parl.connect("ray")`` or ``parl.connect("ray://head:10001")`` (optional
extra ``pip install parl-torch[ray]``).

Importing this package imports nothing of Ray; :mod:`parl.ray.carrier` does, and only
``parl.connect`` with a Ray address imports it. See docs/guides/ray.md.
"""

from __future__ import annotations

INSTALL_HINT = "pip install 'parl-torch[ray]' (or pip install 'ray>=2.60')"
