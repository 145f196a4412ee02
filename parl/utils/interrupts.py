"""Ctrl-C held back while files that belong together are written.

Each of a training run's files is written atomically, but a checkpoint and the replay memory
beside it are two files: a Ctrl-C between them would leave a checkpoint of one step and a
memory of an earlier one, and a run resumed from them would not continue the run that wrote
them. ``ctrl_c_deferred`` makes the pair one unit: the Ctrl-C comes when both are written.

A long loop that can only stop cleanly between two of its steps (a training stage kept on disk
at the end of an episode) uses ``stop_requests`` instead: Ctrl-C or SIGTERM becomes a request
the loop reads when it can act on it, and a second one stops at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ctrl_c_deferred", "stop_requests"]


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


@contextlib.contextmanager
def stop_requests(
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
    announce: str | None = None,
) -> Iterator[Callable[[], signal.Signals | None]]:
    """Within the block, the first of ``signals`` is a request to stop: the function the block
    gets returns that signal from then on (``None`` before), and the loop stops where it can.
    A second signal while a request waits acts at once, as it would without the block (Ctrl-C:
    ``KeyboardInterrupt``; SIGTERM by default: the process ends).

    ``announce``, if given, is written to stderr when the first signal comes (what will happen).
    A signal the process ignores (a job started in the background ignores Ctrl-C) stays
    ignored. Outside the main thread, which alone receives signals in Python, nothing is
    requested.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    requested: list[signal.Signals] = []
    previous: dict[signal.Signals, Any] = {}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        previous.clear()

    def on_signal(signum: int, frame: Any) -> None:
        if not requested:
            requested.append(signal.Signals(signum))
            if announce:
                sys.stderr.write(f"{signal.Signals(signum).name}: {announce}\n")
            return
        handler = previous.get(signal.Signals(signum), signal.SIG_DFL)
        restore()  # the second one: as if the block were not there
        if callable(handler):
            handler(signum, frame)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            os.kill(os.getpid(), signum)  # the default action, now that it is back

    for signum in signals:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, on_signal)
    try:
        yield lambda: requested[0] if requested else None
    finally:
        restore()
