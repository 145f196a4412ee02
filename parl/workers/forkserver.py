"""The fork server: a clean, single-threaded process that forks local workers on request.

The caller never forks (its threads, locks and torch state would be inherited half-way);
instead this process, started with ``subprocess`` and holding nothing but the interpreter, numpy
and parl's runtime modules, forks one child per actor. A fork costs a few milliseconds and the
child shares the already-imported modules, so actor creation is cheap and an idle worker small.

Control messages (pickled tuples on a socket pair shared only with the caller):
  caller -> server  ("spawn", token, options) with three descriptors: protocol socket, stdout
                    and stderr pipes
  server -> caller  ("spawned", token, pid) or ("failed", token, reason), and
                    ("exited", pid, exit_code) for every child
Stop requests travel on a pipe of their own, as 8-byte pids (writes that small are atomic, so
the caller sends them from any thread, a garbage collector's finalizer included, without a
lock): the caller has sent the worker SIGTERM; the server kills it with SIGKILL if it is still
there ``stop_timeout`` seconds later. End of stream from the caller stops every child the same
way, then the server.
"""

from __future__ import annotations

import gc
import importlib
import os
import pickle
import signal
import socket
import struct
import sys
import time
import traceback

from parl.wire.framing import FrameSocket, wait_readable
from parl.workers.exits import DEFAULT_STOP_TIMEOUT_S, EXIT_OTHER_PARL

_PRELOAD = ("numpy", "parl.wire.dispatch", "parl.shm.link", "parl.workers.worker")
# imported while idle, so that the first spawn requests need not wait for them (a worker forked
# before then imports what it needs itself)
_WHEN_IDLE = ("cloudpickle",)
_KILL_WAIT_S = 1.0  # how long a SIGKILLed child may take to be reaped
STOP_RECORD = struct.Struct("<q")  # one pid on the stop pipe


def main() -> None:
    ctrl_fd, caller_parl = int(sys.argv[1]), sys.argv[2]
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # parl/workers/..
    if ours != caller_parl:  # e.g. an editable install of another checkout takes precedence
        print(
            f"parl fork server: this interpreter imports parl from {ours}, but the caller runs "
            f"parl from {caller_parl}; the two would not understand each other. Use one "
            "installation (check `pip show parl-torch` and PYTHONPATH).",
            file=sys.stderr,
        )
        sys.exit(EXIT_OTHER_PARL)
    stop_fd = int(sys.argv[3])  # (after the check: a caller of another version may lack it)
    for name in (*_PRELOAD, *sys.argv[4:]):
        _preload(name)
    ctrl = FrameSocket(socket.socket(fileno=ctrl_fd))
    os.set_blocking(stop_fd, False)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    children = _Children()
    when_idle = list(_WHEN_IDLE)
    try:
        while True:
            if not ctrl.has_buffered_frame():
                timeout = 0.0 if when_idle else children.next_deadline_in()
                readable = wait_readable([ctrl.fileno(), wake_r, stop_fd], timeout)
                if stop_fd in readable:
                    _read_stops(stop_fd, children)
                children.kill_overdue()
                if not readable and when_idle:
                    _preload(when_idle.pop(0))
                    continue
                if wake_r in readable:
                    os.read(wake_r, 4096)
                    _reap(ctrl, children)
                if ctrl.fileno() not in readable:
                    continue
            frame = ctrl.recv()
            if frame is None:
                break
            _, token, options = pickle.loads(frame.meta)
            try:
                pid = os.fork()
            except OSError as exc:  # e.g. out of memory or processes: the others live on
                for fd in frame.fds:
                    os.close(fd)
                _send(ctrl, ("failed", token, f"{type(exc).__name__}: {exc}"))
                continue
            if pid == 0:
                code = 1
                try:
                    ctrl.sock.close()
                    for fd in (wake_r, wake_w, stop_fd):
                        os.close(fd)
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    from parl.workers import worker

                    sock_fd, out_fd, err_fd = frame.fds
                    code = worker.run(sock_fd, out_fd, err_fd, options)
                except BaseException as exc:  # noqa: BLE001 - last words of the child
                    if isinstance(exc, SystemExit) and isinstance(exc.code, int):
                        code = exc.code
                    else:
                        traceback.print_exc()
                finally:
                    os._exit(code)
            for fd in frame.fds:
                os.close(fd)
            children.add(pid, float(options.get("stop_timeout", DEFAULT_STOP_TIMEOUT_S)))
            _send(ctrl, ("spawned", token, pid))
    except (ConnectionError, OSError):
        pass
    finally:
        _stop_children(children)


class _Children:
    """The server's live children, and when those told to stop get SIGKILL."""

    def __init__(self) -> None:
        self.grace: dict[int, float] = {}  # pid -> seconds it may take to finish once stopped
        self.deadline: dict[int, float] = {}  # pid -> monotonic time of its SIGKILL

    def __bool__(self) -> bool:
        return bool(self.grace)

    def __contains__(self, pid: int) -> bool:
        return pid in self.grace

    def add(self, pid: int, grace: float) -> None:
        self.grace[pid] = grace

    def discard(self, pid: int) -> None:
        self.grace.pop(pid, None)
        self.deadline.pop(pid, None)

    def stopping(self, pid: int) -> None:
        """``pid`` was sent SIGTERM: it has its grace to end."""
        if pid in self.grace and pid not in self.deadline:
            self.deadline[pid] = time.monotonic() + self.grace[pid]

    def next_deadline_in(self) -> float | None:
        if not self.deadline:
            return None
        return max(0.0, min(self.deadline.values()) - time.monotonic())

    def kill_overdue(self) -> None:
        now = time.monotonic()
        for pid, deadline in list(self.deadline.items()):
            if deadline <= now:
                _signal(pid, signal.SIGKILL)
                self.deadline[pid] = now + _KILL_WAIT_S  # (again, should it still be there)


def _preload(name: str) -> None:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        print(f"parl fork server: cannot preload {name}: {exc}", file=sys.stderr)
    # The server's objects are never garbage: a worker's collections (the one at its end too)
    # then skip them, and do not copy the pages they live on.
    gc.freeze()


def _send(ctrl: FrameSocket, message: tuple) -> None:
    try:
        ctrl.send(pickle.dumps(message))
    except OSError:
        pass


def _read_stops(stop_fd: int, children: _Children) -> None:
    try:
        data = os.read(stop_fd, STOP_RECORD.size * 512)
    except BlockingIOError:
        return
    for (pid,) in STOP_RECORD.iter_unpack(data):
        children.stopping(pid)


def _reap(ctrl: FrameSocket | None, children: _Children) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.grace.clear()
            children.deadline.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        if ctrl is not None:
            _send(ctrl, ("exited", pid, os.waitstatus_to_exitcode(status)))


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _stop_children(children: _Children) -> None:
    """The caller is gone or done: every child gets SIGTERM (a worker finishes as when its
    actor is closed), and SIGKILL when its grace is over."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    give_up = time.monotonic() + max(children.grace.values(), default=0.0) + 3 * _KILL_WAIT_S
    for pid in list(children.grace):
        if pid not in children.deadline:
            _signal(pid, signal.SIGTERM)
            children.stopping(pid)
    while time.monotonic() < give_up:
        _reap(None, children)
        if not children:
            return
        children.kill_overdue()
        time.sleep(0.005)


if __name__ == "__main__":
    main()
