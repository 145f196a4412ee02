"""Prints what actors write to their stdout and stderr on the caller's, line by line.

One daemon thread serves every worker's pipes with a selector. Each line gets a prefix naming
the actor (``(Sampler pid=1234) ``) and goes to the caller's current ``sys.stdout`` or
``sys.stderr``, or to a ``sink`` given for that pipe (a cluster's host agent sends them to the
caller); a partial line waits for its newline, or for the end of the pipe. A cluster's caller
writes the lines it receives with a :class:`BackgroundWriter`.
"""

from __future__ import annotations

import os
import selectors
import sys
import threading
from collections import deque
from collections.abc import Callable

Sink = Callable[[str, str], None]  # (stream name, text of whole lines)


class OutputForwarder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._partial: dict[int, bytes] = {}
        self._thread: threading.Thread | None = None
        self._closing = False

    def add(self, fd: int, stream: str, prefix: str, sink: Sink | None = None) -> None:
        """Forward pipe ``fd`` to ``sys.<stream>`` (or to ``sink``); the forwarder closes
        ``fd`` at its end."""
        with self._lock:
            self._selector.register(fd, selectors.EVENT_READ, (stream, prefix.encode(), sink))
            self._partial[fd] = b""
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="parl-output", daemon=True)
                self._thread.start()
        os.write(self._wake_w, b"x")

    def close(self, timeout: float = 2.0) -> None:
        """Forward what is left on every pipe (their writers have exited) and stop."""
        with self._lock:
            self._closing = True
            thread = self._thread
        os.write(self._wake_w, b"x")
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            for key in list(self._selector.get_map().values()):
                if key.fd != self._wake_r:
                    self._selector.unregister(key.fd)
                    os.close(key.fd)
            self._selector.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _run(self) -> None:
        try:
            self._loop()
        except (OSError, ValueError, KeyError):
            pass  # closed under us by close() after its timeout

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closing and len(self._selector.get_map()) <= 1:
                    return
            events = self._selector.select(timeout=0.5 if self._closing else None)
            if not events and self._closing:
                return
            for key, _ in events:
                if key.data is None:
                    os.read(self._wake_r, 4096)
                    continue
                self._pump(key.fd, *key.data)

    def _pump(self, fd: int, stream: str, prefix: bytes, sink: Sink | None) -> None:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        data = self._partial.get(fd, b"") + chunk
        if chunk:
            lines = data.split(b"\n")
            self._partial[fd] = lines.pop()
        else:
            lines = [data] if data else []
            with self._lock:
                self._selector.unregister(fd)
                self._partial.pop(fd, None)
            os.close(fd)
        if lines:
            text = "".join(
                (prefix + line + b"\n").decode("utf-8", "backslashreplace") for line in lines
            )
            _keep(prefix, lines)
            (sink or write_output)(stream, text)


TAIL_LINES = 20  # the last lines kept per actor, for monitors
LINE_CHARS = 1000  # a longer kept line is cut: a monitor shows it, 20 lines a second per actor
_MAX_ACTORS = 1000
_tails: dict[bytes, deque[str]] = {}


def clip(line: str) -> str:
    """``line`` cut to ``LINE_CHARS`` for a monitor (the terminal gets it whole): an actor
    printing a long array must not make every status answer megabytes long."""
    if len(line) <= LINE_CHARS:
        return line
    return f"{line[:LINE_CHARS]}… ({len(line) - LINE_CHARS} more characters)"


def _keep(prefix: bytes, lines: list[bytes]) -> None:
    tail = _tails.get(prefix)
    if tail is None:
        if len(_tails) >= _MAX_ACTORS:
            del _tails[next(iter(_tails))]  # the oldest actor's
        tail = _tails[prefix] = deque(maxlen=TAIL_LINES)
    tail.extend(clip(line.decode("utf-8", "backslashreplace")) for line in lines[-TAIL_LINES:])


def recent_lines(label: str) -> list[str]:
    """The last lines the actor labelled ``label`` wrote (stdout and stderr), oldest first."""
    tail = _tails.get(f"({label}) ".encode())
    return list(tail) if tail is not None else []


def write_output(stream: str, text: str) -> None:
    """Write an actor's lines to this process's ``stream`` ("stdout" or "stderr"); a closed
    or broken terminal loses them rather than failing the program."""
    target = sys.stderr if stream == "stderr" else sys.stdout
    try:
        target.write(text)
        target.flush()
    except (OSError, ValueError):
        pass


class BackgroundWriter:
    """Writes actors' output with :func:`write_output` on a thread of its own, so that the
    thread that receives it never waits for the terminal (a cluster's control connection must
    be read at once: one left unread for a few seconds counts as lost). A terminal that stops
    taking lines (Ctrl-S, a paused pager) lets up to ``backlog`` bytes wait; lines beyond
    that are dropped, and a note on stderr says how much was."""

    def __init__(self, backlog: int = 8 << 20) -> None:
        self.backlog = backlog
        self._lines: deque[tuple[str, str]] = deque()
        self._size = 0
        self._dropped = 0
        self._closed = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def put(self, stream: str, text: str) -> None:
        with self._changed:
            if self._closed:
                return
            if self._size + len(text) > self.backlog:
                self._dropped += len(text)
                return
            self._lines.append((stream, text))
            self._size += len(text)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="parl-output-writer", daemon=True
                )
                self._thread.start()
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._lines or self._closed)
                if not self._lines:
                    return  # closed, and everything written
                stream, text = self._lines.popleft()
                self._size -= len(text)
                dropped = 0
                if not self._lines:  # the terminal caught up: say what it missed
                    dropped, self._dropped = self._dropped, 0
            write_output(stream, text)
            if dropped:
                write_output(
                    "stderr",
                    f"(parl: {dropped} characters of actors' output were dropped while this "
                    "process's stdout or stderr did not take them)\n",
                )

    def close(self) -> None:
        """Write what waits (on the writer's thread), take nothing more."""
        with self._changed:
            self._closed = True
            self._changed.notify()
