"""Preloaded by a fork server in a test: registers an exit handler that logs its process."""

from __future__ import annotations

import atexit
import os

_LOG = os.environ.get("PARL_TEST_EXIT_LOG")


def _log_exit() -> None:
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(f"{os.getpid()}\n")


atexit.register(_log_exit)
