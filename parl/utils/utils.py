"""PARL's ``parl.utils.utils``: the small helpers PARL 2.x code imports from there.

PARL's algorithm modules and its tutorial on writing an algorithm call
``check_model_method(model, "policy", self.__class__.__name__)``; the rest are the module's
other public names that user scripts read (``MAX_INT32``, ``to_str``, the platform flags,
``kill_process``, ``isnotebook``).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

__all__ = [
    "MAX_INT32",
    "check_model_method",
    "has_func",
    "isnotebook",
    "kill_process",
    "to_byte",
    "to_str",
]

MAX_INT32 = 0x7FFFFFFF

_IS_WINDOWS = sys.platform == "win32"
_IS_MAC = sys.platform == "darwin"
_HAS_TORCH = True  # this package is PARL on torch; the Paddle backends do not exist here
_HAS_PADDLE = False
_HAS_FLUID = False


def has_func(obj: object, fun: str) -> bool:
    """Whether ``obj`` has a callable attribute ``fun``."""
    if not isinstance(fun, str):
        raise TypeError(f"fun must be a method name (str), got {fun!r}")
    return callable(getattr(obj, fun, None))


def check_model_method(model: Any, method: str, algo: str) -> None:
    """Raise if ``model`` lacks the method ``method`` that the algorithm ``algo`` calls.

    PARL raised an ``AssertionError``; this raises ``TypeError`` naming the model class and what
    to add. A ``torch.nn.Module`` is checked as this package's algorithms check their models
    (:func:`parl.core.require_model_methods`: ``nn.Module``'s placeholder ``forward`` does not
    count); any other object needs a callable attribute of that name, as in PARL.
    """
    if not isinstance(method, str):
        raise TypeError(f"method must be a method name (str), got {method!r}")
    if "torch" in sys.modules:  # an nn.Module can only exist once torch is imported
        from torch import nn

        if isinstance(model, nn.Module):
            from parl.core.algorithm import require_model_methods

            require_model_methods(model, (method,), str(algo))
            return
    if not callable(getattr(model, method, None)):
        raise TypeError(
            f"{algo} needs model to define {method}(), but {type(model).__name__} does not; "
            f"add it to {type(model).__name__}"
        )


def to_str(byte: bytes | str) -> str:
    """``byte`` decoded as UTF-8 (a ``str`` is returned as it is)."""
    return byte if isinstance(byte, str) else byte.decode("utf-8")


def to_byte(string: str | bytes) -> bytes:
    """``string`` encoded as UTF-8 (``bytes`` are returned as they are)."""
    return string if isinstance(string, bytes) else string.encode("utf-8")


def isnotebook() -> bool:
    """Whether the code runs in a Jupyter notebook or qtconsole (an IPython ZMQ shell)."""
    shell = sys.modules.get("IPython")
    get_ipython = getattr(shell, "get_ipython", None) if shell is not None else None
    if get_ipython is None:
        return False
    ipython = get_ipython()
    return ipython is not None and type(ipython).__name__ == "ZMQInteractiveShell"


def kill_process(regex_pattern: str) -> list[int]:
    """Kill (``SIGKILL``) every process whose command line matches ``regex_pattern``.

    The command line is the process's arguments joined by spaces, searched with ``re.search``
    (PARL matched ``ps aux`` lines with ``grep``). This process is never killed, nor are
    processes this user may not signal. On Windows a ``/`` in the pattern also matches ``\\``.

    Returns:
        The ids of the processes killed.
    """
    if not isinstance(regex_pattern, str) or not regex_pattern:
        raise TypeError(
            f"regex_pattern must be a non-empty str (a regular expression matched against "
            f"command lines), got {regex_pattern!r}"
        )
    if _IS_WINDOWS:
        regex_pattern = regex_pattern.replace("/", r"[/\\]")
    try:
        pattern = re.compile(regex_pattern)
    except re.error as exc:
        raise ValueError(
            f"regex_pattern {regex_pattern!r} is not a regular expression: {exc}"
        ) from None
    import psutil

    killed = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = process.info["cmdline"]
        if process.info["pid"] == os.getpid() or not cmdline:
            continue
        if pattern.search(" ".join(cmdline)) is None:
            continue
        try:
            process.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # it ended on its own, or belongs to someone else
        killed.append(process.info["pid"])
    return killed
