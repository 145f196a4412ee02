"""Ctrl-C held back while files that belong together are written.

Each of a training run's files is written atomically, but a checkpoint and the replay memory
beside it are two files: a Ctrl-C between them would leave a checkpoint of one step and a
memory of an earlier one, and a run resumed from them would not continue the run that wrote
them. ``ctrl_c_deferred`` makes the pair one unit: the Ctrl-C comes when both are written.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["ctrl_c_deferred"]


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back until the block ends, then deliver it to the handler that
    was there before (by default: ``KeyboardInterrupt`` at the block's end).

    Outside the main thread, which alone receives signals in Python, the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    # a handler, not a blocked signal mask: the signal may reach any thread (torch's, tqdm's)
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:  # the held Ctrl-C comes now
        if callable(previous):
            previous(signal.SIGINT, None)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt
