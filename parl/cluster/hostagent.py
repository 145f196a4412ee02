"""The host agent: owns this machine's CPU slots and starts an actor's worker per request.

A caller first opens a *control* connection (op ``caller``): output lines of its actors and
their exit notices come back on it, and its end (the caller exited or was killed) stops every
worker it had. Then, for each actor, the caller opens a connection of its own (op ``actor``):
the agent has the local fork server (:class:`parl.workers.ForkServer`) fork a worker that
receives *that* socket, answers ``started``, and drops its own copy. From then on the socket
is the actor's connection, straight between caller and worker, with inline buffers.

A slot is taken when a worker starts and comes back when its process ends (watched through
its pidfd). The agent reports both to the master (``report``), and keeps the last lines each
actor wrote.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from parl.cluster import control, messages
from parl.cluster.monitor import STATS_PERIOD_S, Every, host_stats
from parl.cluster.server import Handler, Route, by_op
from parl.cluster.upload import CodeCache
from parl.deploy.versions import local_versions
from parl.wire.contract import (
    check_max_frame,
    check_max_memory,
    check_num_threads,
    check_stop_timeout,
)
from parl.wire.framing import FrameSocket, wait_readable
from parl.workers import DEFAULT_STOP_TIMEOUT_S, ForkServer, OutputForwarder, clip

LAST_LINES = 100  # lines of output kept per actor
Report = Callable[[messages.Used | messages.Stats], None]  # where the agent's reports go


@dataclass
class _Worker:
    pid: int
    label: str
    client: str
    pidfd: int
    gpus: list[str] = field(default_factory=list)  # none: the worker holds a CPU slot
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=LAST_LINES))


class _Client:
    """A caller's control connection: what its actors write and how they end go there."""

    def __init__(self, cid: str, sock: FrameSocket, forward: bool) -> None:
        self.cid = cid
        self.sock = sock
        self.forward = forward
        self.lock = threading.Lock()
        self.gone = False

    def send(self, message: messages.ControlMessage) -> None:
        with self.lock:
            if self.gone:
                return
            try:
                control.send(self.sock, message)
            except OSError:
                self.gone = True


class HostAgent:
    """``slots`` CPU slots on this machine; ``hostname`` names it in actors' labels; callers'
    code is cached under ``cache_dir`` (default ``~/.parl/cache``)."""

    def __init__(
        self,
        slots: int,
        hostname: str | None = None,
        report: Report | None = None,
        cache_dir: str | None = None,
        gpus: list[str] | None = None,
    ) -> None:
        self.slots = slots
        self.gpus = list(gpus or [])
        self._free_gpus = list(self.gpus)
        self.hostname = hostname or socket.gethostname()
        self.report: Report = report or (lambda message: None)
        self.versions = local_versions()
        self.cache = CodeCache(cache_dir)
        self.cache.evict()  # what SSH launches unpacked, and uploads of earlier runs
        self._lock = threading.Lock()
        self._report_lock = threading.Lock()
        self._used = 0
        self._workers: dict[int, _Worker] = {}
        self._clients: dict[str, _Client] = {}
        self._server: ForkServer | None = None
        self._forwarder = OutputForwarder()
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False
        self._watcher = threading.Thread(target=self._watch, name="parl-workers", daemon=True)
        self._watcher.start()
        psutil.cpu_percent(interval=None)  # starts the measurement the reports read
        self._stats = Every(STATS_PERIOD_S, self._report_stats, "parl-host-stats")

    @property
    def handlers(self) -> dict[str, Handler]:
        return by_op(
            Route(messages.Caller, self._serve_caller),
            Route(messages.Actor, self._start_actor),
            Route(messages.Host, self._status),
            Route(messages.Code, self.cache.receive),
        )

    @property
    def used(self) -> int:
        return self._used

    def usage(self) -> messages.Used:
        """Used CPU slots and GPUs: the master's ``used`` report (with no grant token)."""
        return messages.Used(
            op="used", used=self._used, gpu_used=len(self.gpus) - len(self._free_gpus)
        )

    # -- callers ------------------------------------------------------------------------------

    def _serve_caller(self, sock: FrameSocket, hello: messages.Caller) -> None:
        """A caller's control connection, until it ends; then its workers are stopped."""
        cid = str(hello.get("client", ""))
        client = _Client(cid, sock, bool(hello.get("forward", True)))
        with self._lock:
            taken = cid in self._clients
            if not taken:
                self._clients[cid] = client
        if taken:  # another connection's id: its actors are not this one's to stop
            _answer(sock, {"op": "error", "message": f"caller id {cid!r} is already connected"})
            sock.close()
            return
        code = hello.get("code")
        client.send(
            messages.Welcome(
                op="welcome",
                host=self.hostname,
                slots=self.slots,
                versions=self.versions,
                has_code=code is None or self.cache.prepare(cid, str(code)),
            )
        )
        try:
            while True:
                message = control.recv(sock)
                if message is None:
                    break
                if message["op"] == "stop":
                    self._stop_worker(int(message["pid"]), cid)
        finally:
            with self._lock:
                if self._clients.get(cid) is client:
                    del self._clients[cid]
                mine = [w.pid for w in self._workers.values() if w.client == cid]
            with client.lock:
                client.gone = True
                sock.close()
            for pid in mine:  # the caller is gone: so are its actors
                self._stop_worker(pid, cid)
            self.cache.job_done(cid)

    def _start_actor(self, sock: FrameSocket, request: messages.Actor) -> None:
        """Fork a worker that takes over ``sock`` as its actor connection."""
        try:
            with self._lock:
                client = self._clients.get(str(request.get("client")))
                if client is None:
                    raise ValueError("open a control connection (op 'caller') first")
                settings = _actor_settings(request)
                gpus = self._take(request)
            # an actor's connection from here on: its worker may leave a request unread for as
            # long as a method runs (see parl.cluster.control)
            control.allow_zero_window(sock.sock)
            try:
                pid = self._spawn(sock, client, request, settings, gpus)
            except BaseException:
                self._give_back(gpus)
                raise
        except Exception as exc:  # noqa: BLE001 - e.g. the fork server failed: say so
            _answer(sock, {"op": "error", "message": f"cannot start an actor: {exc}"})
            sock.close()
            return
        self._report_used(request.get("token"))
        _answer(sock, {"op": "started", "pid": pid, "host": self.hostname})
        sock.close()  # the worker holds the connection now

    def _take(self, request: messages.Actor) -> list[str]:
        """Take a CPU slot, or the GPUs the request asks for (their ids); lock held."""
        n_gpu = (request.get("options") or {}).get("n_gpu") or 0
        if not isinstance(n_gpu, int) or n_gpu < 0:
            raise ValueError(f"n_gpu must be an int >= 0, got {n_gpu!r}")
        if self._closed:
            raise ValueError(f"host {self.hostname} is stopping")
        if n_gpu:
            if len(self._free_gpus) < n_gpu:
                raise ValueError(
                    f"host {self.hostname} has {len(self._free_gpus)} free GPU(s) of "
                    f"{len(self.gpus)}, not {n_gpu}"
                )
            taken, self._free_gpus = self._free_gpus[:n_gpu], self._free_gpus[n_gpu:]
            return taken
        if self._used >= self.slots:
            raise ValueError(
                f"host {self.hostname} has no free slot ({self._used} of {self.slots} used)"
            )
        self._used += 1
        return []

    def _give_back(self, gpus: list[str]) -> None:
        with self._lock:
            if gpus:
                self._free_gpus = sorted(self._free_gpus + gpus, key=self.gpus.index)
            else:
                self._used -= 1

    def _spawn(
        self,
        sock: FrameSocket,
        client: _Client,
        request: messages.Actor,
        settings: dict[str, Any],
        gpus: list[str],
    ) -> int:
        label = str(request.get("label", "actor"))
        cwd, sys_path = os.getcwd(), []
        if request.get("code") is not None:
            folder = self.cache.job_folder(client.cid, str(request["code"]))
            cwd, sys_path = str(folder), [str(folder)]
        worker_options = {
            "caller_pid": None,
            "link": "inline",
            "cwd": cwd,
            "sys_path": sys_path,
            "label": label,
            **settings,
        }
        if self.gpus:  # a GPU actor sees its GPUs, a CPU actor none
            worker_options["env"] = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(gpus))
        with self._lock:
            if self._server is None or not self._server.alive:
                self._server = ForkServer()
            server = self._server
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            pid = server.spawn([sock.fileno(), out_w, err_w], worker_options)
            pidfd = os.pidfd_open(pid)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        worker = _Worker(pid, label, client.cid, pidfd, gpus)
        with self._lock:
            self._workers[pid] = worker
        prefix = f"({label} pid={pid} on {self.hostname}) "
        sink = self._sink(worker, client)
        self._forwarder.add(out_r, "stdout", prefix, sink)
        self._forwarder.add(err_r, "stderr", prefix, sink)
        os.write(self._wake_w, b"w")
        return pid

    def _sink(self, worker: _Worker, client: _Client) -> Callable[[str, str], None]:
        def sink(stream: str, text: str) -> None:
            worker.lines.extend(map(clip, text.splitlines()))
            if client.forward:
                client.send({"op": "output", "stream": stream, "text": text})

        return sink

    def _stop_worker(self, pid: int, cid: str) -> None:
        """SIGTERM a worker of client ``cid`` (a busy method is interrupted, as locally); the
        fork server kills it if it has not finished within its stop timeout."""
        with self._lock:
            worker = self._workers.get(pid)
            server = self._server
            if worker is None or worker.client != cid:
                return
            try:
                signal.pidfd_send_signal(worker.pidfd, signal.SIGTERM)
            except OSError:
                return  # already gone
        if server is not None:
            server.stop(pid)

    def _report_stats(self) -> None:
        """The machine and its workers, for the master's monitor."""
        with self._lock:
            workers = list(self._workers.values())
        self.report(host_stats(workers, self.hostname))

    def _status(self, sock: FrameSocket, request: messages.Host) -> None:
        with self._lock:
            actors = [
                {"pid": w.pid, "label": w.label, "client": w.client, "lines": list(w.lines)}
                for w in self._workers.values()
            ]
        _answer(
            sock,
            {
                "op": "status",
                "slots": self.slots,
                "used": self._used,
                "gpus": self.gpus,
                "gpu_used": len(self.gpus) - len(self._free_gpus),
                "actors": actors,
                "uploads": self.cache.uploads,
                "versions": self.versions,
            },
        )
        sock.close()

    # -- workers ending -----------------------------------------------------------------------

    def _watch(self) -> None:
        """Frees the slot of each worker whose process ended, and tells its caller how."""
        while True:
            with self._lock:
                if self._closed:
                    return
                by_fd = {w.pidfd: w for w in self._workers.values()}
            ready = wait_readable([self._wake_r, *by_fd], None)
            if self._wake_r in ready:
                os.read(self._wake_r, 4096)
            for fd in ready:
                worker = by_fd.get(fd)
                if worker is not None:
                    self._ended(worker)

    def _ended(self, worker: _Worker) -> None:
        self._give_back(worker.gpus)
        with self._lock:
            self._workers.pop(worker.pid, None)
            client = self._clients.get(worker.client)
            server = self._server
        os.close(worker.pidfd)
        code = server.exit_code(worker.pid, 1.0) if server is not None else None
        if client is not None:
            client.send({"op": "exited", "pid": worker.pid, "code": code})
        self._report_used(None)

    def _report_used(self, token: str | None) -> None:
        """Tell the master how many slots are used. The count is read under the report lock,
        so that of two reports racing, the one sent last carries the count as it is now."""
        with self._report_lock:
            self.report({**self.usage(), "token": token})

    def close(self) -> None:
        """Stop every worker (the fork server waits for them) and the agent's threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            server, self._server = self._server, None
            clients = list(self._clients.values())
        self._stats.close()
        if server is not None:
            server.close()
        for client in clients:
            with client.lock:
                client.gone = True
                try:
                    client.sock.sock.shutdown(socket.SHUT_RDWR)  # wakes its reader
                except OSError:
                    pass
        os.write(self._wake_w, b"x")
        self._watcher.join(5.0)
        self._forwarder.close()
        with self._lock:
            for worker in self._workers.values():
                os.close(worker.pidfd)
            self._workers.clear()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self.cache.close()


def _actor_settings(request: messages.Actor) -> dict[str, Any]:
    """The worker settings an actor request asks for, checked as ``@parl.remote_class`` and
    ``parl.connect`` check them on the caller's side: a client of another version, or one that
    skipped those checks, gets an error that names the setting instead of a worker started
    with it."""
    options = request.get("options") or {}
    if not isinstance(options, dict):
        raise ValueError(f"options must be a dict, got {type(options).__name__}")
    return {
        "max_frame": check_max_frame(request.get("max_frame", control.ACTOR_MAX_FRAME)),
        "stop_timeout": check_stop_timeout(options.get("stop_timeout", DEFAULT_STOP_TIMEOUT_S)),
        "max_memory": check_max_memory(options.get("max_memory")),
        "num_threads": check_num_threads(options.get("num_threads")),
    }  # fmt: skip


def _answer(sock: FrameSocket, message: control.Message) -> None:
    try:
        control.send(sock, message)
    except OSError:
        pass
