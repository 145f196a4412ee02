"""Objects a forked child must disarm: sockets, pipes and processes that belong to the parent.

``drop_in_child(obj)`` keeps a weak reference to ``obj``; in every child forked afterwards,
``obj._drop_in_child()`` runs before the child does anything else (closing the child's copies
of the parent's connections, so that the parent's end is seen when it comes).
"""

from __future__ import annotations

import os
import weakref
from typing import Any

_tracked: weakref.WeakSet[Any] | None = None


def drop_in_child(obj: Any) -> None:
    global _tracked
    if _tracked is None:
        _tracked = weakref.WeakSet()
        os.register_at_fork(after_in_child=_drop_all)
    _tracked.add(obj)


def _drop_all() -> None:
    for obj in list(_tracked or ()):
        obj._drop_in_child()
