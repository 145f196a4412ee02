"""Worker processes: the fork server, the workers it forks, and their output.

Every carrier that runs actors in processes of ``parl``'s own uses this package: the local
carrier on the caller's machine, a cluster's host agent on each host, and Ray's actors (which
limit their threads the way a worker does). A worker serves one actor over one socket; what
travels on it, and whether buffers go through shared memory (:mod:`parl.shm`) or inline, is
the carrier's choice.

- :class:`ForkServer` starts the fork server process and asks it for workers.
- :class:`OutputForwarder` prints what workers write to their stdout and stderr, line by line
  with a prefix naming the actor; :class:`BackgroundWriter` writes lines that arrived from
  elsewhere (a cluster's hosts) without blocking the thread that received them.
- :func:`worker_death_error` turns a worker's exit status into the error of its actor's calls.
"""

from __future__ import annotations

from parl.workers.afterfork import limit_threads
from parl.workers.exits import (
    DEFAULT_STOP_TIMEOUT_S,
    EXIT_MAX_MEMORY,
    EXIT_OTHER_PARL,
    worker_death_error,
)
from parl.workers.output import (
    LINE_CHARS,
    BackgroundWriter,
    OutputForwarder,
    clip,
    recent_lines,
    write_output,
)
from parl.workers.pool import ForkServer
from parl.workers.worker import ActorClosing

__all__ = [
    "DEFAULT_STOP_TIMEOUT_S",
    "EXIT_MAX_MEMORY",
    "EXIT_OTHER_PARL",
    "LINE_CHARS",
    "ActorClosing",
    "BackgroundWriter",
    "ForkServer",
    "OutputForwarder",
    "clip",
    "limit_threads",
    "recent_lines",
    "worker_death_error",
    "write_output",
]
