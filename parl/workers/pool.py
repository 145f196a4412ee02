"""The caller's handle on the fork server (see :mod:`parl.workers.forkserver`)."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

from parl.errors import ParlError
from parl.wire.framing import FrameSocket, wait_readable
from parl.workers import afterfork
from parl.workers.exits import EXIT_OTHER_PARL
from parl.workers.forkserver import STOP_RECORD

_START_TIMEOUT_S = 60.0
# the folder of the parl package this module belongs to (parl/workers/pool.py: two up)
_PARL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def keep_niceness(pid: int) -> None:
    """Give process ``pid``, the leader of a new session, the caller's niceness as its
    scheduling group's.

    Where the kernel groups processes by session (``/proc/<pid>/autogroup``, Linux's autogroup),
    CPU time is shared between the groups first, and a process's own niceness only ranks it
    within its group. The fork server starts a session of its own, so without this its workers
    would compete with the caller's whole session at the default niceness whatever the caller
    asked for: ``nice -n 10 python train.py`` would leave its actors at full priority. The
    group gets the larger of the caller's group niceness and its own (never more priority than
    the caller has). Nothing happens where there are no such groups.
    """
    try:
        nice = max(_group_nice("self"), os.getpriority(os.PRIO_PROCESS, 0))
        if nice > 0:
            with open(f"/proc/{pid}/autogroup", "w") as group:
                group.write(str(nice))
    except (OSError, ValueError):
        pass  # no autogroups here (or the server already gone): nothing to keep


def _group_nice(pid: str) -> int:
    """The niceness of process ``pid``'s scheduling group. The file reads
    ``/autogroup-<id> nice <n>``, or nothing at all for a process still in the root group
    (one whose session began before autogroups, as under some CI runners and containers):
    that group runs at niceness 0."""
    with open(f"/proc/{pid}/autogroup") as group:
        fields = group.read().split()
    return int(fields[-1]) if fields else 0


class ForkServer:
    """Starts the fork server process and asks it for workers.

    ``preload`` names extra modules the server imports once so that every worker has them
    (``["torch"]`` saves each torch-using actor the import).
    """

    def __init__(self, preload: tuple[str, ...] = (), parl_dir: str | None = None) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        stop_r, self._stop_w = os.pipe()
        os.set_blocking(self._stop_w, False)
        # closed when nobody can write to it any more (never at exit, where stops are sent)
        weakref.finalize(self, os.close, self._stop_w).atexit = False
        self.parl_dir = parl_dir or _PARL_DIR
        package_root = os.path.dirname(self.parl_dir)
        env = afterfork.server_environment(dict(os.environ))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p
        )
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from parl.workers.forkserver import main; main()",
                    str(child.fileno()),
                    self.parl_dir,
                    str(stop_r),
                    *preload,
                ],
                pass_fds=(child.fileno(), stop_r),
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in the terminal reaches the caller only
                env=env,
            )
        finally:
            child.close()
            os.close(stop_r)
        self.pid = self._proc.pid
        keep_niceness(self.pid)
        self._ctrl = FrameSocket(parent)
        self._lock = threading.Lock()
        self._tokens = 0
        self._exits: dict[int, int] = {}
        self._closed = False

    def spawn(self, fds: list[int], options: dict[str, Any]) -> int:
        """Fork a worker that receives ``fds`` (protocol socket, stdout, stderr); its pid."""
        with self._lock:
            if self._closed:
                raise ParlError("the local worker pool is closed")
            self._tokens += 1
            token = self._tokens
            try:
                self._ctrl.send(pickle.dumps(("spawn", token, options)), (), fds)
            except OSError as exc:
                raise self._server_gone() from exc
            deadline = time.monotonic() + _START_TIMEOUT_S
            while True:
                message = self._read(deadline - time.monotonic())
                if message is None:
                    raise self._server_gone()
                if message[0] == "spawned" and message[1] == token:
                    return int(message[2])
                if message[0] == "failed" and message[1] == token:
                    raise ParlError(f"the fork server could not start a worker: {message[2]}")

    def stop(self, pid: int) -> None:
        """Worker ``pid`` was sent SIGTERM: have the server SIGKILL it should it still be there
        after its ``stop_timeout``. Takes no lock and never blocks (it runs from finalizers);
        the pipe's write end stays open as long as this object, so the descriptor is ours."""
        try:
            os.write(self._stop_w, STOP_RECORD.pack(pid))
        except OSError:
            pass  # the server is gone (its workers with it) or, absurdly, 512 stops behind

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """The exit status of worker ``pid`` (negative: killed by that signal), if known."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while pid not in self._exits and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._read(remaining) is None:
                    break
            return self._exits.pop(pid, None)

    def _read(self, timeout: float) -> tuple | None:
        """One control message, exit notices filed on the way; None on timeout or EOF."""
        if not self._ctrl.has_buffered_frame():
            if not wait_readable([self._ctrl.fileno()], max(0.0, timeout)):
                return None
        try:
            frame = self._ctrl.recv()
        except OSError:
            frame = None
        if frame is None:
            self._closed = True
            return None
        message = pickle.loads(frame.meta)
        if message[0] == "exited":
            self._exits[message[1]] = message[2]
            if len(self._exits) > 10_000:
                self._exits.pop(next(iter(self._exits)))
        return message

    def _server_gone(self) -> ParlError:
        self._closed = True
        try:
            code = self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        if code == EXIT_OTHER_PARL:
            return ParlError(
                "the local fork server imported another installation of parl than this process "
                f"(which runs {self.parl_dir}); see its message on stderr"
            )
        return ParlError(
            f"the local fork server (pid {self.pid}) exited unexpectedly (code {code})"
        )

    def close(self, timeout: float = 10.0) -> None:
        """Stop the server; its remaining workers are stopped with it, and this waits up to
        ``timeout`` for them to finish (then kills the server, and the workers die with it).
        Idempotent; another thread may wait at the same time."""
        with self._lock:
            self._closed = True
            self._ctrl.close()
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    @property
    def alive(self) -> bool:
        return not self._closed and self._proc.poll() is None
