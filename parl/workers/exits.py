"""How a worker process ends, and what its exit status tells the caller.

The exit statuses a worker or the fork server choose are defined here, next to
:func:`worker_death_error`, which every carrier uses to turn a worker's end into the error of
the calls still waiting on its actor.
"""

from __future__ import annotations

import signal
from typing import Any

from parl.errors import ActorDiedError, ActorMemoryError, ParlError

EXIT_MAX_MEMORY = 86  # exit status of a worker stopped for exceeding max_memory
EXIT_OTHER_PARL = 3  # the fork server imported another installation of parl than its caller
DEFAULT_STOP_TIMEOUT_S = 5.0  # how long a worker told to stop may take to finish


def worker_death_error(label: str, code: int | None, max_memory: Any) -> ParlError:
    """The error of every call to an actor whose worker ended with exit status ``code``
    (negative: killed by that signal; None: unknown), whatever carrier it was on."""
    if code == EXIT_MAX_MEMORY:
        return ActorMemoryError(
            f"actor {label} exceeded its max_memory of {max_memory} MB and was "
            "stopped; raise max_memory in @parl.remote_class or use less memory"
        )
    if code is None:
        how = "ended (exit status unknown)"
    elif code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with status {code}"
    return ActorDiedError(
        f"the worker process of actor {label} {how}; the actor is gone, create a new one"
    )
