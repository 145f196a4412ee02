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
End of stream from the caller stops every child and the server.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import socket
import sys
import time
import traceback

from parl.wire.framing import FrameSocket, wait_readable

_PRELOAD = ("numpy", "parl.wire.dispatch", "parl.shm.link", "parl.shm.worker")
# imported while idle, so that the first spawn requests need not wait for them (a worker forked
# before then imports what it needs itself)
_WHEN_IDLE = ("cloudpickle",)
_STOP_GRACE_S = 1.0


EXIT_OTHER_PARL = 3  # the server imported another installation of parl than its caller


def main() -> None:
    ctrl_fd, caller_parl = int(sys.argv[1]), sys.argv[2]
    import parl

    ours = os.path.dirname(os.path.abspath(parl.__file__))
    if ours != caller_parl:  # e.g. an editable install of another checkout takes precedence
        print(
            f"parl fork server: this interpreter imports parl from {ours}, but the caller runs "
            f"parl from {caller_parl}; the two would not understand each other. Use one "
            "installation (check `pip show parl-torch` and PYTHONPATH).",
            file=sys.stderr,
        )
        sys.exit(EXIT_OTHER_PARL)
    for name in (*_PRELOAD, *sys.argv[3:]):
        _preload(name)
    ctrl = FrameSocket(socket.socket(fileno=ctrl_fd))
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    children: set[int] = set()
    when_idle = list(_WHEN_IDLE)
    try:
        while True:
            if not ctrl.has_buffered_frame():
                readable = wait_readable([ctrl.fileno(), wake_r], 0.0 if when_idle else None)
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
                    os.close(wake_r)
                    os.close(wake_w)
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    from parl.shm import worker

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
            children.add(pid)
            _send(ctrl, ("spawned", token, pid))
    except (ConnectionError, OSError):
        pass
    finally:
        _stop_children(children)


def _preload(name: str) -> None:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        print(f"parl fork server: cannot preload {name}: {exc}", file=sys.stderr)


def _send(ctrl: FrameSocket, message: tuple) -> None:
    try:
        ctrl.send(pickle.dumps(message))
    except OSError:
        pass


def _reap(ctrl: FrameSocket | None, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        if ctrl is not None:
            _send(ctrl, ("exited", pid, os.waitstatus_to_exitcode(status)))


def _stop_children(children: set[int]) -> None:
    """Children normally leave on their own (their caller is gone too): wait a moment, then
    SIGTERM, then SIGKILL."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _wait_children(children, _STOP_GRACE_S)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in children:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        _wait_children(children, _STOP_GRACE_S)


def _wait_children(children: set[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        _reap(None, children)
        if not children or time.monotonic() >= deadline:
            return
        time.sleep(0.005)


if __name__ == "__main__":
    main()
