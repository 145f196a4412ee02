"""The command that installs one of the package's optional extras, as this copy was installed.

A copy installed from a clone in editable mode (``pip install -e .``, the usual way today) gets
an extra with ``pip install -e '<clone>[extra]'``; a copy installed from a package index gets
``pip install 'parl-torch[extra]'``. Every hint about a missing optional dependency (Ray, the
Atari and MuJoCo envs, the multi-agent scenarios, offline datasets) names its command through
:func:`install_command`, so that no hint sends a clone's user to the index.
"""

from __future__ import annotations

import functools
import json
import os
from importlib import metadata
from urllib.parse import unquote, urlsplit

DISTRIBUTION = "parl-torch"


@functools.lru_cache(maxsize=1)
def editable_source() -> str | None:
    """The folder of the clone this package runs from, or None when it was installed from an
    index (or a wheel).

    The installed distribution's ``direct_url.json`` (PEP 610) says whether it is an editable
    install and of which folder; without an installed distribution (the source tree on
    ``PYTHONPATH``), the folder above ``parl/`` is a clone when it holds ``setup.py``."""
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        text = None
    if text:
        try:
            record = json.loads(text)
        except ValueError:
            record = {}
        url = str(record.get("url", ""))
        if record.get("dir_info", {}).get("editable") and url.startswith("file:"):
            return unquote(urlsplit(url).path)
    return _source_tree()


def _source_tree() -> str | None:
    """The folder above ``parl/`` when it is a clone (it holds ``setup.py``), else None."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return here if os.path.isfile(os.path.join(here, "setup.py")) else None


def install_command(extra: str) -> str:
    """``pip install -e '<clone>[extra]'`` for a copy installed from a clone, else
    ``pip install 'parl-torch[extra]'``."""
    source = editable_source()
    if source is not None:
        return f"pip install -e '{source}[{extra}]'"
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def install_hint(extra: str, packages: str = "") -> str:
    """ "install the <extra> extra: <command>", with ``packages`` (what the extra brings, e.g.
    ``"ray>=2.60"``) as the alternative of installing them alone."""
    hint = f"install the {extra} extra: {install_command(extra)}"
    if packages:
        hint += f" (or: pip install {packages})"
    return hint


__all__ = ["DISTRIBUTION", "editable_source", "install_command", "install_hint"]
