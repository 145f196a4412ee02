"""Where :class:`ActorClosing` was first documented; the worker process itself is
:mod:`parl.workers.worker`. ``parl.shm.worker.ActorClosing`` stays importable for code that
catches it by this name."""

from __future__ import annotations

from parl.errors import ActorClosing

__all__ = ["ActorClosing"]
