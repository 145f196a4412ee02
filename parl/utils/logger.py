"""PARL's logger: ``logger.info(...)``, ``logger.set_dir(...)`` and friends.

A thin layer over the standard ``logging`` logger named ``"parl"``. Importing this module does
nothing; the first message attaches a console handler to the ``"parl"`` logger (never to the root
logger) and stops propagation, so messages print once whatever the application configured.
``set_dir`` also writes every message to ``<dir>/log.log``; it creates the folder and appends to
an existing file, and no function of this module ever deletes a file.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

__all__ = [
    "CRITICAL",
    "DEBUG",
    "ERROR",
    "INFO",
    "LOGGER_NAME",
    "WARNING",
    "add_stdout_handler",
    "auto_set_dir",
    "critical",
    "debug",
    "default_log_dir",
    "error",
    "exception",
    "get_dir",
    "get_logger",
    "info",
    "remove_handler",
    "set_dir",
    "setLevel",
    "set_level",
    "warn",
    "warning",
]

LOGGER_NAME = "parl"
# the standard levels under PARL's names (``logger.set_level(logger.INFO)``)
DEBUG, INFO, WARNING, ERROR, CRITICAL = (
    logging.DEBUG,
    logging.INFO,
    logging.WARNING,
    logging.ERROR,
    logging.CRITICAL,
)
_LOG_FILE = "log.log"
_FORMAT = "[%(asctime)s %(filename)s:%(lineno)d] %(message)s"
_DATE_FORMAT = "%m-%d %H:%M:%S"

_lock = threading.Lock()
_console_handler: logging.Handler | None = None
_file_handler: logging.FileHandler | None = None
_log_dir: str | None = None


class _Formatter(logging.Formatter):
    """Plain messages for INFO and below, the level name in front of warnings and errors."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.WARNING:
            head, sep, tail = text.partition("] ")
            text = f"{head}{sep}{record.levelname} {tail}"
        return text


def get_logger() -> logging.Logger:
    """The ``"parl"`` logger, with its console handler attached on first use."""
    global _console_handler
    log = logging.getLogger(LOGGER_NAME)
    if _console_handler is None:
        with _lock:
            if _console_handler is None:
                handler = logging.StreamHandler()
                handler.setFormatter(_Formatter(_FORMAT, _DATE_FORMAT))
                log.addHandler(handler)
                if log.level == logging.NOTSET:
                    log.setLevel(logging.INFO)
                log.propagate = False
                _console_handler = handler
    return log


def debug(msg: object, *args: Any, **kwargs: Any) -> None:
    """Log ``msg`` at DEBUG level on the ``"parl"`` logger.

    Args:
        msg: The message; ``%``-style placeholders are filled from ``args``, as in
            the standard ``logging``.
        *args: Values for the placeholders of ``msg``.
        **kwargs: Passed to :meth:`logging.Logger.debug` (``exc_info``, ``extra``, ...); the
            record names the caller's line, not this function's.
    """
    kwargs.setdefault("stacklevel", 2)
    get_logger().debug(msg, *args, **kwargs)


def info(msg: object, *args: Any, **kwargs: Any) -> None:
    """Log ``msg`` at INFO level on the ``"parl"`` logger.

    Args:
        msg: The message; ``%``-style placeholders are filled from ``args``, as in
            the standard ``logging``.
        *args: Values for the placeholders of ``msg``.
        **kwargs: Passed to :meth:`logging.Logger.info` (``exc_info``, ``extra``, ...); the
            record names the caller's line, not this function's.
    """
    kwargs.setdefault("stacklevel", 2)
    get_logger().info(msg, *args, **kwargs)


def warning(msg: object, *args: Any, **kwargs: Any) -> None:
    """Log ``msg`` at WARNING level on the ``"parl"`` logger.

    Args:
        msg: The message; ``%``-style placeholders are filled from ``args``, as in
            the standard ``logging``.
        *args: Values for the placeholders of ``msg``.
        **kwargs: Passed to :meth:`logging.Logger.warning` (``exc_info``, ``extra``, ...); the
            record names the caller's line, not this function's.
    """
    kwargs.setdefault("stacklevel", 2)
    get_logger().warning(msg, *args, **kwargs)


warn = warning


def error(msg: object, *args: Any, **kwargs: Any) -> None:
    """Log ``msg`` at ERROR level on the ``"parl"`` logger.

    Args:
        msg: The message; ``%``-style placeholders are filled from ``args``, as in
            the standard ``logging``.
        *args: Values for the placeholders of ``msg``.
        **kwargs: Passed to :meth:`logging.Logger.error` (``exc_info``, ``extra``, ...); the
            record names the caller's line, not this function's.
    """
    kwargs.setdefault("stacklevel", 2)
    get_logger().error(msg, *args, **kwargs)


def exception(msg: object, *args: Any, **kwargs: Any) -> None:
    """Log ``msg`` at ERROR level with the current exception's traceback."""
    kwargs.setdefault("stacklevel", 2)
    get_logger().exception(msg, *args, **kwargs)


def critical(msg: object, *args: Any, **kwargs: Any) -> None:
    """Log ``msg`` at CRITICAL level on the ``"parl"`` logger.

    Args:
        msg: The message; ``%``-style placeholders are filled from ``args``, as in
            the standard ``logging``.
        *args: Values for the placeholders of ``msg``.
        **kwargs: Passed to :meth:`logging.Logger.critical` (``exc_info``, ``extra``, ...); the
            record names the caller's line, not this function's.
    """
    kwargs.setdefault("stacklevel", 2)
    get_logger().critical(msg, *args, **kwargs)


def set_level(level: int | str) -> None:
    """Set the level of the ``"parl"`` logger: ``logging.DEBUG`` or ``"DEBUG"``, ``"INFO"``..."""
    if isinstance(level, str):
        resolved = logging.getLevelName(level.upper())
        if not isinstance(resolved, int):
            raise ValueError(
                f"level must be a logging level such as 'DEBUG', 'INFO', 'WARNING' or 'ERROR', "
                f"got {level!r}"
            )
        level = resolved
    elif isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"level must be an int or a level name, got {type(level).__name__}")
    get_logger().setLevel(level)


setLevel = set_level  # PARL's name, after logging.Logger.setLevel


def add_stdout_handler() -> logging.Handler:
    """Also print the ``"parl"`` logger's messages to ``sys.stdout``, formatted as on the
    console; returns the handler, for :func:`remove_handler`."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_Formatter(_FORMAT, _DATE_FORMAT))
    get_logger().addHandler(handler)
    return handler


def remove_handler(handler: logging.Handler) -> None:
    """Detach ``handler`` (from :func:`add_stdout_handler`) from the ``"parl"`` logger."""
    get_logger().removeHandler(handler)


def set_dir(dirname: str | os.PathLike[str]) -> str:
    """Also write log messages to ``<dirname>/log.log`` (appending); returns ``dirname``.

    The folder is created if needed; files already in it are kept.
    """
    global _file_handler, _log_dir
    if not isinstance(dirname, (str, os.PathLike)):
        raise TypeError(f"dirname must be a str or os.PathLike, got {type(dirname).__name__}")
    path = os.fspath(dirname)
    os.makedirs(path, exist_ok=True)
    log = get_logger()
    handler = logging.FileHandler(os.path.join(path, _LOG_FILE), mode="a", encoding="utf-8")
    handler.setFormatter(_Formatter(_FORMAT, _DATE_FORMAT))
    with _lock:
        if _file_handler is not None:
            log.removeHandler(_file_handler)
            _file_handler.close()
        log.addHandler(handler)
        _file_handler = handler
        _log_dir = path
    return path


def get_dir() -> str | None:
    """The folder given to ``set_dir``/``auto_set_dir``, or ``None``."""
    return _log_dir


def default_log_dir() -> str:
    """``train_log/<name of the running script without .py>`` (``train_log/interactive`` in a
    REPL)."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else "")
    name = os.path.splitext(os.path.basename(script))[0]
    if not name or name == "-c":
        name = "interactive"
    return os.path.join("train_log", name)


def auto_set_dir(action: str | None = None) -> str:
    """``set_dir(default_log_dir())``; returns the folder.

    If that folder already exists, ``action`` says what to do: ``None`` or ``"k"`` keep it and
    append, ``"n"`` use a new timestamped folder beside it, ``"b"`` (or PARL's ``"d"``) move the
    old folder aside to a timestamped name and start an empty one. Nothing is ever deleted.
    """
    if action not in (None, "k", "n", "b", "d"):
        raise ValueError(f"action must be None, 'k', 'n', 'b' or 'd', got {action!r}")
    dirname = default_log_dir()
    if os.path.isdir(dirname) and action in ("n", "b", "d"):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        if action == "n":
            dirname = f"{dirname}-{stamp}"
        else:
            backup = f"{dirname}-{stamp}"
            os.rename(dirname, backup)
            info("moved the previous log folder %s to %s", dirname, backup)
    return set_dir(dirname)
