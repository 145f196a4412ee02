"""The body of a local worker process, run in a child forked by the fork server.

The protocol socket is a descriptor of its own; file descriptors 1 and 2 are pipes to the
caller, which prints their lines with the actor's name. A user ``print`` therefore cannot touch
the protocol stream. The worker ends when the caller closes the connection, when the caller
process dies (watched through a pidfd, so even a descriptor inherited by some other process
cannot keep it alive), when the fork server dies (``PR_SET_PDEATHSIG``), or when it exceeds its
``max_memory``.
"""

from __future__ import annotations

import ctypes
import io
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

EXIT_MAX_MEMORY = 86  # exit status of a worker stopped for exceeding max_memory
_MEMORY_POLL_S = 0.05


def run(sock_fd: int, out_fd: int, err_fd: int, options: dict[str, Any]) -> int:
    """Serve one actor; returns the exit status."""
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)
    sys.stdout = _line_stream(1)
    sys.stderr = _line_stream(2)
    _die_with_parent()
    caller_pid = options["caller_pid"]
    _watch_caller(caller_pid)
    if "env" in options:  # the caller's environment now, not when the fork server started
        os.environ.clear()
        os.environ.update(options["env"])
    for entry in reversed(options.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        os.chdir(options.get("cwd") or "/")
    except OSError:
        pass
    max_memory = options.get("max_memory")
    if max_memory:
        _watch_memory(int(max_memory * 1024 * 1024), options.get("label", "actor"))

    from parl.shm.link import ShmLink
    from parl.shm.segment import segment_table
    from parl.wire.dispatch import serve
    from parl.wire.framing import FrameSocket

    sock = FrameSocket(socket.socket(fileno=sock_fd))
    try:
        serve(sock, ShmLink(segment_table(), options.get("threshold", 1 << 17)))
    except (ConnectionError, BrokenPipeError):
        pass  # the caller went away mid-message
    finally:
        sock.close()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    return 0


def _line_stream(fd: int) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", line_buffering=True)


def _die_with_parent() -> None:
    """SIGKILL this process when the fork server (its parent) dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        os._exit(1)


def _watch_caller(caller_pid: int) -> None:
    try:
        pidfd = os.pidfd_open(caller_pid)
    except ProcessLookupError:
        os._exit(0)
    except OSError:
        return

    def watch() -> None:
        from parl.wire.framing import wait_readable

        wait_readable([pidfd], None)
        os._exit(0)

    threading.Thread(target=watch, name="parl-caller-watch", daemon=True).start()


def _rss_anon_bytes() -> int:
    with open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(b"RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def _watch_memory(limit: int, label: str) -> None:
    def watch() -> None:
        while True:
            used = _rss_anon_bytes()
            if used > limit:
                message = (
                    f"{label} uses {used / 2**20:.0f} MB, more than its max_memory of "
                    f"{limit / 2**20:.0f} MB: stopping the worker\n"
                )
                try:
                    os.write(2, message.encode())
                finally:
                    os._exit(EXIT_MAX_MEMORY)
            time.sleep(_MEMORY_POLL_S)

    threading.Thread(target=watch, name="parl-memory-watch", daemon=True).start()
