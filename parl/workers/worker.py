"""The body of a local worker process, run in a child forked by the fork server.

The protocol socket is a descriptor of its own; file descriptors 1 and 2 are pipes to the
caller, which prints their lines with the actor's name. A user ``print`` therefore cannot touch
the protocol stream. The worker ends when the caller closes the connection, when the caller
process dies (watched through a pidfd, so even a descriptor inherited by some other process
cannot keep it alive), when the fork server dies (``PR_SET_PDEATHSIG``), or when it exceeds its
``max_memory``.

It ends like a Python program, within ``stop_timeout`` seconds: the instance is dropped (its
``__del__`` runs, the files it holds are flushed and closed), the handlers registered with
``atexit`` in the worker run (TensorBoard writers of ``parl.utils.summary`` close there), files
still open are flushed, then the process leaves. Closing an actor sends SIGTERM too: a worker
busy in a method gets :class:`ActorClosing` raised there (its ``finally`` blocks run), then
finishes the same way. The fork server kills a worker that has not ended ``stop_timeout``
seconds after it was told to stop. Only a worker over its ``max_memory`` leaves at once.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import io
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from parl.errors import ActorClosing
from parl.workers import afterfork
from parl.workers.exits import DEFAULT_STOP_TIMEOUT_S, EXIT_MAX_MEMORY

if TYPE_CHECKING:  # pragma: no cover
    from parl.wire.framing import FrameSocket

_MEMORY_POLL_S = 0.05
_WRITABLE_FILES = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)


_serving = False  # in _serve's try block, where ActorClosing is caught
_stoppable = False  # True while SIGTERM may raise ActorClosing (once)
_worker_pid = 0
_mask_before_fork: set[int | signal.Signals] = set()


def run(sock_fd: int, out_fd: int, err_fd: int, options: dict[str, Any]) -> int:
    """Serve one actor, then finish; returns the exit status."""
    global _worker_pid
    _worker_pid = os.getpid()
    signal.signal(signal.SIGTERM, _on_stop)
    _keep_unraisable_stops()
    os.register_at_fork(  # processes the actor forks get the default SIGTERM, without a gap
        before=_block_sigterm, after_in_parent=_restore_mask, after_in_child=_default_sigterm
    )
    afterfork.own_exit_handlers()
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)
    sys.stdout = _line_stream(1)
    sys.stderr = _line_stream(2)
    _die_with_parent()
    if options.get("caller_pid") is not None:  # None: a remote caller (the host agent watches)
        _watch_caller(options["caller_pid"], options.get("stop_timeout", DEFAULT_STOP_TIMEOUT_S))
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
    afterfork.fresh_random_streams()
    afterfork.limit_threads(options.get("num_threads"))
    max_memory = options.get("max_memory")
    if max_memory:
        _watch_memory(int(max_memory * 1024 * 1024), options.get("label", "actor"))
    from parl.wire.framing import FrameSocket

    sock = FrameSocket(socket.socket(fileno=sock_fd), options.get("max_frame"))
    code = _serve(sock, options.get("threshold", 1 << 17), options.get("link") == "inline")
    _finish()  # the connection stays open until the process ends: the caller sees one death
    return code


def _serve(sock: FrameSocket, threshold: int, inline: bool = False) -> int:
    """Run the actor until its connection ends or it is told to stop; the exit status.
    ``inline``: share no memory with the caller (a TCP connection: buffers travel in frames).

    The instance is dropped here, after stopping can no longer interrupt its ``__del__``."""
    global _serving, _stoppable
    from parl.shm.handles import HANDLES
    from parl.shm.link import ShmLink
    from parl.shm.segment import segment_table
    from parl.wire.dispatch import serve
    from parl.wire.protocol import InlineLink, Link

    instance: Any = None
    code = 0
    try:
        _serving = _stoppable = True
        # on a host of a cluster: a parl.shm array this actor made is refused on its way back
        link: Link = InlineLink(HANDLES) if inline else ShmLink(segment_table(), threshold)
        instance = serve(sock, link)
    except BaseException as exc:  # noqa: BLE001 - how the worker ends
        _serving = _stoppable = False
        code = _exit_status(exc)
    _serving = _stoppable = False
    instance = None  # noqa: F841 - its __del__ runs now
    return code


def _exit_status(exc: BaseException) -> int:
    if isinstance(exc, (ActorClosing, ConnectionError)):
        return 0  # closed while busy, or the caller went away mid-message
    if isinstance(exc, SystemExit):
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    traceback.print_exception(type(exc), exc, exc.__traceback__)
    return 1


def _on_stop(signum: int, frame: Any) -> None:
    global _stoppable
    if os.getpid() != _worker_pid:  # a child the actor forked, signalled before it reset this
        _default_sigterm()
        os.kill(os.getpid(), signum)
        return
    if _stoppable:
        _stoppable = False  # once: the finish that follows is not interrupted
        raise ActorClosing(f"the actor was closed (signal {signum})")


def _keep_unraisable_stops() -> None:
    """ActorClosing raised inside a finalizer (a weakref callback, a ``__del__``) is dropped
    by Python there. Say nothing, and raise it again once the frame the finalizer interrupted
    runs on: from a profile function, whose exceptions propagate into the profiled code."""
    previous_hook = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        tb = unraisable.exc_traceback
        if unraisable.exc_type is not ActorClosing:
            previous_hook(unraisable)
            return
        if not _serving or tb is None or tb.tb_frame.f_back is None:
            return  # the worker is finishing anyway
        outer = tb.tb_frame.f_back
        previous_profile = sys.getprofile()

        def profile(frame: Any, event: str, arg: Any) -> None:
            if frame.f_code is hook.__code__:
                return  # the events of installing this one
            if not _serving:  # it ended meanwhile (the instance is being dropped, say)
                sys.setprofile(previous_profile)
            elif frame is outer or frame.f_back is outer:  # (a finalizer again: once more)
                sys.setprofile(previous_profile)
                raise ActorClosing("the actor was closed")

        sys.setprofile(profile)

    sys.unraisablehook = hook


def _block_sigterm() -> None:
    """Before a fork: a SIGTERM for the child must wait until the child has the default
    action, else this process's handler would catch it there and lose it."""
    global _mask_before_fork
    _mask_before_fork = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _restore_mask() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, _mask_before_fork)


def _default_sigterm() -> None:
    global _stoppable
    _stoppable = False
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _restore_mask()


def _finish() -> None:
    """What the end of a Python program does for objects, exit handlers and files (not its
    wait for non-daemon threads); the fork server's deadline bounds it all."""
    gc.collect()  # instances caught in reference cycles
    atexit._run_exitfuncs()
    _flush_open_files()


def _flush_open_files() -> None:
    """Files still open (say in a module's globals) are flushed, as at interpreter exit; the
    fork server's own standard streams are not (their buffers hold the server's output)."""
    inherited = {id(sys.__stdout__), id(sys.__stderr__)}
    for stream in (sys.__stdout__, sys.__stderr__):
        inherited.add(id(getattr(stream, "buffer", None)))
    files = [
        obj
        for obj in gc.get_objects()
        if issubclass(type(obj), _WRITABLE_FILES) and id(obj) not in inherited
    ]
    files.sort(key=lambda f: not isinstance(f, io.TextIOWrapper))  # text into its buffer first
    for file in files:
        try:
            if not file.closed:
                file.flush()
        except (OSError, ValueError):
            pass


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


def _watch_caller(caller_pid: int, stop_timeout: float) -> None:
    """When the caller dies, finish as if closed (the connection ends too) within the bound."""
    try:
        pidfd = os.pidfd_open(caller_pid)
    except ProcessLookupError:
        os._exit(0)
    except OSError:
        return

    def watch() -> None:
        from parl.wire.framing import wait_readable

        wait_readable([pidfd], None)
        os.kill(os.getpid(), signal.SIGTERM)  # interrupts a busy method
        time.sleep(stop_timeout)
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
