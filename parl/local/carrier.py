"""The local carrier: actors in worker processes on this machine, data through shared memory.

The fork server starts with the first actor and stops ``linger`` seconds (default 1) after the
last one is gone, so nothing of ours runs while no actor exists. Each actor gets a Unix socket
pair for the protocol (shared-memory segments travel on it as descriptors) and two pipes for its
stdout and stderr.

A closed actor's worker finishes on its own (see :mod:`parl.workers.worker`); the fork server kills
it if it is still there ``stop_timeout`` seconds later, and stopping the fork server waits for
its workers, so that at the caller's exit what the actors wrote is complete.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import sys
import threading
from typing import Any

from parl.errors import ParlError
from parl.shm.link import DEFAULT_THRESHOLD, ShmLink
from parl.shm.segment import limit_error, segment_table
from parl.wire.caller import Connection
from parl.wire.contract import RemoteOptions
from parl.wire.framing import FrameSocket, wait_readable
from parl.workers import DEFAULT_STOP_TIMEOUT_S, ForkServer, OutputForwarder, worker_death_error

_EXIT_WAIT_S = 1.0  # how long a dead actor's error waits for the exit status
DEFAULT_LINGER_S = 1.0
_REAP_MARGIN_S = 5.0  # beyond stop_timeout, how long stopping the fork server may take


class LocalCarrier:
    """Creates actors in local worker processes.

    ``forward_output``: print actors' stdout/stderr here with a prefix (else discard them).
    ``preload``: modules the fork server imports once for every worker (e.g. ``("torch",)``).
    ``threshold``: buffers of at least this many bytes cross through shared memory.
    ``linger``: seconds the fork server stays after the last actor ends, so that a program that
    creates actors one after another does not restart it each time (0: stop at once).
    ``stop_timeout``: seconds a closed actor's worker may take to finish before it is killed.
    """

    def __init__(
        self,
        forward_output: bool = True,
        preload: tuple[str, ...] = (),
        threshold: int = DEFAULT_THRESHOLD,
        linger: float = DEFAULT_LINGER_S,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT_S,
    ) -> None:
        self.forward_output = forward_output
        self.preload = tuple(preload)
        self.threshold = threshold
        self.linger = linger
        self.stop_timeout = stop_timeout
        self._lock = threading.RLock()
        self._server: ForkServer | None = None
        self._forwarder: OutputForwarder | None = None
        self._stopping: set[ForkServer] = set()  # being stopped by another thread
        self._live = 0
        self._stop_timer: threading.Timer | None = None

    def create(self, class_name: str, options: RemoteOptions) -> Connection:
        """Start a worker for an actor of ``class_name``; returns its connection (no INIT sent)."""
        with self._lock:
            if self._stop_timer is not None:
                self._stop_timer.cancel()
                self._stop_timer = None
            if self._server is None or not self._server.alive:
                _raise_fd_limit()
                self._server = ForkServer(self.preload)
            if self._forwarder is None:
                self._forwarder = OutputForwarder()
            server, forwarder = self._server, self._forwarder
            self._live += 1
        try:
            return self._start(server, forwarder, class_name, options)
        except OSError as exc:
            self._actor_gone()
            raise limit_error(exc, f"start a worker for {class_name}") from exc
        except BaseException:
            self._actor_gone()
            raise

    def _start(
        self,
        server: ForkServer,
        forwarder: OutputForwarder,
        class_name: str,
        options: RemoteOptions,
    ) -> Connection:
        opened: list[int] = []  # closed again if starting fails half-way
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.forward_output:
                out_r, out_w = os.pipe()
                opened += (out_r, out_w)
                err_r, err_w = os.pipe()
                opened += (err_r, err_w)
            else:
                out_r, out_w = -1, os.open(os.devnull, os.O_WRONLY)
                opened.append(out_w)
                err_r, err_w = -1, os.open(os.devnull, os.O_WRONLY)
                opened.append(err_w)
        except OSError:
            ours.close()
            theirs.close()
            for fd in opened:
                os.close(fd)
            raise
        try:
            worker_options = {
                "caller_pid": os.getpid(),
                "sys_path": [os.path.abspath(p) if p else os.getcwd() for p in sys.path],
                "cwd": os.getcwd(),
                "env": dict(os.environ),
                "max_memory": options.max_memory,
                "num_threads": options.num_threads,
                "stop_timeout": self.stop_timeout,
                "label": class_name,
                "threshold": self.threshold,
            }
            pid = server.spawn([theirs.fileno(), out_w, err_w], worker_options)
        except BaseException:
            ours.close()
            for fd in (out_r, err_r):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:
            theirs.close()
            os.close(out_w)
            os.close(err_w)
        label = f"{class_name} pid={pid}"
        if self.forward_output:
            forwarder.add(out_r, "stdout", f"({label}) ")
            forwarder.add(err_r, "stderr", f"({label}) ")
        liveness = _WorkerLiveness(self, server, pid, label, options.max_memory)
        return Connection(
            FrameSocket(ours),
            ShmLink(segment_table(), self.threshold, ProcessGone(pid)),
            liveness,
            label,
        )

    def _actor_gone(self) -> None:
        with self._lock:
            self._live -= 1
            if self._live > 0 or self._server is None:
                return
            if self.linger > 0:
                timer = threading.Timer(self.linger, self._stop_if_idle)
                timer.daemon = True
                timer.name = "parl-linger"
                self._stop_timer = timer
                timer.start()
                return
        self._stop_if_idle()

    def _stop_if_idle(self) -> None:
        with self._lock:
            if self._live > 0:
                return
            server, self._server = self._server, None
            forwarder, self._forwarder = self._forwarder, None
            self._stop_timer = None
            if server is not None:
                self._stopping.add(server)
        if server is not None:
            try:
                server.close(self.stop_timeout + _REAP_MARGIN_S)
            finally:
                with self._lock:
                    self._stopping.discard(server)
        if forwarder is not None:
            forwarder.close()

    def close(self) -> None:
        """Stop the fork server now (actors still alive lose their workers), and wait for its
        workers to finish, also when the linger timer is stopping it at the same time."""
        with self._lock:
            if self._stop_timer is not None:
                self._stop_timer.cancel()
            self._live = 0
            stopping = list(self._stopping)
        self._stop_if_idle()
        for server in stopping:
            server.close(self.stop_timeout + _REAP_MARGIN_S)

    @property
    def live_actors(self) -> int:
        return self._live

    @property
    def server_pid(self) -> int | None:
        server = self._server
        return server.pid if server is not None else None


class ProcessGone:
    """True once process ``pid`` has ended (its pidfd is readable); for a link's lent memory."""

    def __init__(self, pid: int) -> None:
        self._gone = False
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except OSError:  # already gone
            self._pidfd, self._gone = None, True

    def fileno(self) -> int | None:
        """Readable once the process has ended (None when that is known already)."""
        return self._pidfd

    def __call__(self) -> bool:
        if not self._gone and self._pidfd is not None and wait_readable([self._pidfd], 0):
            self._gone = True
        if self._gone and self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return self._gone

    def __del__(self) -> None:
        pidfd = getattr(self, "_pidfd", None)
        if pidfd is not None and os is not None:  # at exit, module globals may be gone already
            os.close(pidfd)


class _WorkerLiveness:
    """A worker's pidfd, readable once the process has ended, and its cause of death."""

    def __init__(
        self, carrier: LocalCarrier, server: ForkServer, pid: int, label: str, max_memory: Any
    ) -> None:
        self._carrier = carrier
        self._server = server
        self.pid = pid
        self._label = label
        self._max_memory = max_memory
        self._closed = False
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except OSError:
            self._pidfd = None

    def fileno(self) -> int | None:
        return self._pidfd

    def is_alive(self) -> bool:
        if self._pidfd is not None:
            return not wait_readable([self._pidfd], 0)
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def death_error(self) -> ParlError:
        return worker_death_error(
            self._label, self._server.exit_code(self.pid, _EXIT_WAIT_S), self._max_memory
        )

    def close(self) -> None:
        """The connection is closed: nobody can see this worker any more. It finishes (an
        idle one on end of stream; SIGTERM interrupts a busy one) and the fork server kills it
        if it takes longer than ``stop_timeout``. The stop request takes no lock, as this runs
        from finalizers."""
        if self._closed:
            return
        self._closed = True
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGTERM)
            except OSError:
                pass  # already gone
            else:
                self._server.stop(self.pid)
            os.close(self._pidfd)
            self._pidfd = None
        self._carrier._actor_gone()


def _raise_fd_limit() -> None:
    """Each shared segment holds a descriptor: allow as many as the hard limit does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
