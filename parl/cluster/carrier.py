"""The cluster carrier: actors in workers of a cluster's host agents, reached over TCP.

``parl.connect("host:port")`` builds one per process. It keeps an authenticated connection to
the master (which grants slots) and one control connection to each host agent it uses (the
actors' output lines and exit notices arrive there). Each actor gets a TCP connection of its
own, opened straight to the host agent that holds the slot and handed by it to the worker: calls
then go point to point, with every buffer inline in the frames (no shared memory, also when
caller and worker share a machine).

The control connection to a host also watches the path to it for the actors' connections. An
actor connection may rightly stall for as long as a method runs (its receiver leaves a large
message unread), so it has no timeout of its own for data on its way, and a send into a lost
network would block for the kernel's 15 minutes of retries. The control connection is always
read at once, so it has one (about 4 s, see :mod:`parl.cluster.control`): when it is lost, every
actor connection to that host is shut down, and their pending and later calls raise
:class:`parl.ActorDiedError` naming the host and the lost connection.
"""

from __future__ import annotations

import logging
import secrets
import socket
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from parl.cluster import control, messages
from parl.cluster.auth import load_secret
from parl.cluster.monitor import ACTORS_PERIOD_S, Every, actors_report
from parl.cluster.upload import PROGRESS_PERIOD_S, upload
from parl.deploy import versions
from parl.deploy.packer import Pack, outside_modules, pack_project, project_root
from parl.errors import ActorDiedError, ClusterError, ParlError, ResourceError
from parl.shm.handles import HANDLES
from parl.wire import caller, classes
from parl.wire.caller import Connection
from parl.wire.contract import RemoteOptions
from parl.wire.forking import drop_in_child
from parl.wire.framing import FrameSocket
from parl.wire.protocol import InlineLink
from parl.workers import DEFAULT_STOP_TIMEOUT_S, BackgroundWriter, worker_death_error

DEFAULT_SLOT_TIMEOUT_S = 60.0
_START_TIMEOUT_S = 60.0
_QUIET_WAIT_S = 1.0  # a wait for a slot shorter than this is not logged
# how long an actor whose connection ended waits for its worker's exit notice, or for the
# control connection to its host to end as well (a lost network: see death_error)
_LOST_WAIT_S = control.USER_TIMEOUT_MS / 1000 + 2.0
_KEEP_EXITS = 10_000
log = logging.getLogger("parl.cluster")


class ClusterCarrier:
    """Creates actors on the cluster whose master listens at ``address``.

    Connects to the master at once, so that a wrong address or secret, or hosts with other
    versions of Python, parl, numpy, torch or cloudpickle, show at ``parl.connect``.
    ``slot_timeout``: how long creating an actor waits for a free slot. ``max_frame``: the
    largest message on an actor's connection, in bytes. ``distributed_files``: globs of files
    (relative to the project folder) to deploy besides the project's own (see
    :func:`parl.deploy.packer.pack_project`).
    ``secret``: the cluster's secret (default: :func:`parl.cluster.auth.load_secret`; the SSH
    launcher gives its own).
    """

    def __init__(
        self,
        address: str,
        forward_output: bool = True,
        slot_timeout: float = DEFAULT_SLOT_TIMEOUT_S,
        max_frame: int = control.ACTOR_MAX_FRAME,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT_S,
        distributed_files: Sequence[str] = (),
        secret: bytes | None = None,
    ) -> None:
        self.address = address
        self.forward_output = forward_output
        self.slot_timeout = slot_timeout
        self.max_frame = max_frame
        self.stop_timeout = stop_timeout
        self._secret = secret or load_secret()
        self._client_id = secrets.token_hex(8)
        self._what = f"the master at {address}"
        self._master_host, self._master_port = control.parse_address(address)
        self._versions = versions.local_versions()
        self._root = project_root()
        self._pack: Pack = pack_project(self._root, distributed_files)
        self._modules_seen: set[str] = set()
        self._monitored = False  # the master serves a monitor page: report our actors to it
        self._master = self._dial_master()
        self._master_lock = threading.Lock()
        self._lock = threading.Lock()
        self._channels: dict[tuple[str, int], _HostChannel] = {}
        self._opening: dict[tuple[str, int], threading.Lock] = {}  # one opener per host
        self._connections: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._live = 0
        self._closed = False
        self._reporter: Every | None = None
        self._names: caller.NameRecordingHold | None = None
        if self._monitored:
            self._names = caller.NAMES.hold()  # calls note their method names: "busy in step()"
            self._reporter = Every(ACTORS_PERIOD_S, self._report_actors, "parl-actor-report")
        drop_in_child(self)  # a forked child closes its copies of our connections

    def _dial_master(self) -> FrameSocket:
        """A client connection to the master, after checking the versions of its hosts."""
        sock = control.dial((self._master_host, self._master_port), self._secret, self._what)
        try:
            welcome = control.request(sock, {"op": "client"}, self._what, 10.0)
            if welcome["op"] != "welcome":
                raise ClusterError(f"{self._what} answered {welcome['op']!r}, not 'welcome'")
            self._monitored = bool(welcome.get("monitor"))
            for host in welcome.get("hosts") or ():
                where = f"the host agent at {host.get('address')} ({host.get('hostname')})"
                versions.check(self._versions, host.get("versions"), where)
        except BaseException:
            sock.close()
            raise
        return sock

    def create(self, class_name: str, options: RemoteOptions) -> Connection:
        """Place an actor of ``class_name`` on a free slot; its connection (no INIT sent)."""
        self._outside_by_value()
        grant = self._place(options.n_gpu)
        try:
            return self._start(class_name, options, grant)
        except BaseException:
            self._release(grant["token"])  # the slot is free again at once
            raise

    def _outside_by_value(self) -> None:
        """Modules imported from outside the deployed folder (and not installed) are not on the
        hosts: what is defined there travels by value from now on."""
        new = set(sys.modules.copy()) - self._modules_seen
        if new:
            for name in outside_modules(self._root, sorted(new)):
                classes.send_by_value(name)
            self._modules_seen |= new

    def _start(self, class_name: str, options: RemoteOptions, grant: messages.Placed) -> Connection:
        # "": the master's own host agent, reached at the master's address
        where = (str(grant["host"]) or self._master_host, int(grant["port"]))
        # an SSH host's name in its hosts file: its agent's address may be a tunnel's end here
        of = f" of {grant['label']}" if grant.get("label") else ""
        what = f"the host agent{of} at {where[0]}:{where[1]} ({grant.get('hostname')})"
        channel = self._channel(where, what, grant["token"])
        sock = control.dial(where, self._secret, what, self.max_frame)
        request = messages.Actor(
            op="actor",
            client=self._client_id,
            token=grant["token"],
            label=class_name,
            code=self._pack.digest,
            max_frame=self.max_frame,
            options={
                "max_memory": options.max_memory,
                "num_threads": options.num_threads,
                "n_gpu": options.n_gpu,
                "stop_timeout": self.stop_timeout,
            },
        )
        try:
            answer = control.request(sock, request, what, _START_TIMEOUT_S)
            if answer["op"] != "started":
                raise ClusterError(f"{what} answered {answer['op']!r}, not 'started'")
        except BaseException:
            sock.close()
            raise
        control.allow_zero_window(sock.sock)  # an actor's connection from here on
        channel.watch(sock)
        pid = answer["pid"]
        label = f"{class_name} pid={pid} on {answer.get('host')}"
        with self._lock:
            self._live += 1
        liveness = _RemoteWorker(self, channel, pid, label, options.max_memory)
        connection = Connection(sock, InlineLink(HANDLES), liveness, label)
        self._connections.add(connection)
        return connection

    def _report_actors(self) -> None:
        """Our actors as we see them, for the master's monitor page; skipped while the
        connection to the master is busy (a placement waiting for a slot)."""
        if self._closed or not self._master_lock.acquire(blocking=False):
            return
        try:
            report = actors_report(self._client_id, list(self._connections))
            control.send(self._master, report)
        except (OSError, ValueError):
            pass  # a lost master: the next placement reconnects
        finally:
            self._master_lock.release()

    def _place(self, n_gpu: int = 0) -> messages.Placed:
        """A grant of a free slot from the master, waiting up to ``slot_timeout`` for one. A
        master that went away (and maybe came back: a restart) is connected to once more; one
        that stopped answering (its machine or the network to it is gone) is an error at once,
        and the next placement connects again."""
        with self._master_lock:
            if self._closed:
                raise ClusterError(f"the connection to {self._what} is closed")
            try:
                return self._ask_for_slot(n_gpu)
            except _MasterLost as exc:
                _shutdown(self._master)
                if isinstance(exc.__cause__, TimeoutError):
                    raise ClusterError(
                        f"lost the connection to {self._what}: no answer within "
                        f"{control.USER_TIMEOUT_MS / 1000:g} s (its machine is down or the "
                        "network to it failed); check the master (`xparl status` there) and "
                        "the network, then try again"
                    ) from None
            log.warning("lost the connection to %s: connecting again", self._what)
            self._master = self._dial_master()  # "cannot reach the master ...": a clear end
            try:
                return self._ask_for_slot(n_gpu)
            except _MasterLost as exc:
                raise ClusterError(str(exc)) from None

    def _ask_for_slot(self, n_gpu: int) -> messages.Placed:
        try:
            ask = messages.Place(op="place", timeout=self.slot_timeout, n_gpu=n_gpu)
            control.send(self._master, ask)
            while True:
                answer = control.recv(self._master, self.slot_timeout + 10.0)
                if answer is None:
                    raise _MasterLost(
                        f"{self._what} closed the connection or did not answer; is the "
                        "cluster still running (`xparl status`)?"
                    )
                if answer["op"] == "waiting":
                    # a slot that an actor closed a moment ago comes back within milliseconds
                    # (its worker ends, its host agent tells the master): say nothing for that
                    quiet = min(_QUIET_WAIT_S, self.slot_timeout / 4)
                    answer = control.recv(self._master, quiet) or answer
                    if answer["op"] != "waiting":
                        return self._granted(answer)
                    log.warning(
                        "no free %s in the cluster at %s (%s in all, %s used): waiting up to %g s",
                        f"host with {n_gpu} GPU(s)" if n_gpu else "slot",
                        self.address,
                        answer.get("slots"),
                        answer.get("used"),
                        self.slot_timeout,
                    )
                    continue
                return self._granted(answer)
        except OSError as exc:
            raise _MasterLost(f"lost the connection to {self._what}: {exc}") from exc

    def _granted(self, answer: messages.ControlMessage) -> messages.Placed:
        if answer["op"] == "error":
            if answer.get("reason") == "no_slot":
                raise ResourceError(str(answer.get("message")))
            raise ClusterError(str(answer.get("message")))
        if answer["op"] != "placed":
            raise ClusterError(f"{self._what} answered {answer['op']!r}, not 'placed'")
        return answer

    def _release(self, token: object) -> None:
        """Tell the master that the slot of grant ``token`` was not taken (best effort)."""
        if not self._master_lock.acquire(timeout=5.0):
            return
        try:
            if not self._closed:
                control.send(self._master, {"op": "release", "token": token})
        except OSError:
            pass
        finally:
            self._master_lock.release()

    def _extend(self, token: object) -> None:
        """Renew grant ``token`` at the master (an upload to its host is under way); skipped
        when the connection to the master is busy (the next chunk tries again)."""
        if self._closed or not self._master_lock.acquire(blocking=False):
            return
        try:
            control.send(self._master, {"op": "extend", "token": token})
        except (OSError, ValueError):
            pass
        finally:
            self._master_lock.release()

    def _channel(self, where: tuple[str, int], what: str, token: object) -> _HostChannel:
        """The control connection to the host agent at ``where``, made (and the code uploaded)
        by one thread at a time: the agent takes one connection per caller id, so a second
        thread that made its own was refused. A thread waiting here renews its grant."""
        with self._lock:
            opening = self._opening.setdefault(where, threading.Lock())
        while not opening.acquire(timeout=PROGRESS_PERIOD_S):
            self._extend(token)  # another thread is uploading our code to that host
        try:
            return self._open_channel(where, what, token)
        finally:
            opening.release()

    def _open_channel(self, where: tuple[str, int], what: str, token: object) -> _HostChannel:
        with self._lock:
            channel = self._channels.get(where)
            if channel is not None and not channel.closed:
                return channel
        channel = _HostChannel(
            control.dial(where, self._secret, what),
            {
                "op": "caller",
                "client": self._client_id,
                "forward": self.forward_output,
                "code": self._pack.digest,
            },
            what,
        )
        try:
            versions.check(self._versions, channel.welcome.get("versions"), what)
            if not channel.welcome.get("has_code"):
                upload(
                    where,
                    self._secret,
                    what,
                    self._pack,
                    "project code",
                    progress=lambda: self._extend(token),
                )
        except BaseException:
            channel.close()
            raise
        with self._lock:
            old = self._channels.get(where)
            if old is not None and not old.closed:
                channel.close()
                return old
            self._channels[where] = channel
        return channel

    def _actor_gone(self) -> None:
        with self._lock:
            self._live -= 1

    def close(self) -> None:
        """Drop the connections to the master and the host agents (their actors end)."""
        with self._lock:
            self._closed = True
            channels = list(self._channels.values())
            self._channels.clear()
        reporter, self._reporter = self._reporter, None
        if reporter is not None:
            reporter.close()
        if self._names is not None:
            self._names.release()
        for channel in channels:
            channel.close()
        _shutdown(self._master)

    def _drop_in_child(self) -> None:
        """In a forked child: close this process's copies of the parent's connections, so
        that the host agents see the parent's end when it comes (the child makes its own)."""
        self._closed = True
        for sock in [self._master, *(c._sock for c in self._channels.values())]:
            sock.close()

    @property
    def live_actors(self) -> int:
        return self._live

    @property
    def server_pid(self) -> int | None:
        return None  # no local process of ours


class _MasterLost(ClusterError):
    """The connection to the master ended (the master was stopped, killed or restarted)."""


class _HostChannel:
    """The control connection to one host agent: output lines and exit notices arrive here.
    When it ends without ``close`` (the agent was stopped or killed, its machine went down,
    the network to it failed) it is ``lost``, and it shuts down the actor connections it
    watches."""

    def __init__(self, sock: FrameSocket, hello: control.Message, what: str) -> None:
        self.what = what
        self.closed = False
        self.lost: BaseException | None = None  # why the connection ended (None: closed)
        self._closing = False
        self._sock = sock
        self._send_lock = threading.Lock()
        self._exits: dict[int, int | None] = {}
        self._changed = threading.Condition()
        self._watched: weakref.WeakSet[FrameSocket] = weakref.WeakSet()
        # the terminal never holds up the reader (an unread connection counts as lost)
        self._output = BackgroundWriter()
        try:
            self.welcome = control.request(sock, hello, what, 10.0)
        except BaseException:
            sock.close()
            raise
        self._reader = threading.Thread(target=self._read, name="parl-cluster-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        ended: BaseException = EOFError("the host agent closed the connection")
        try:
            while True:
                message = control.recv(self._sock)
                if message is None:
                    break
                if message["op"] == "output":
                    self._output.put(str(message.get("stream")), str(message.get("text", "")))
                elif message["op"] == "exited":
                    with self._changed:
                        self._exits[int(message["pid"])] = message.get("code")
                        if len(self._exits) > _KEEP_EXITS:  # of actors closed long ago
                            del self._exits[next(iter(self._exits))]
                        self._changed.notify_all()
        except (OSError, ValueError, KeyError) as exc:
            ended = exc
        finally:
            with self._changed:
                if not self._closing:
                    self.lost = ended
                self.closed = True
                watched = list(self._watched)
                self._changed.notify_all()
            self._sock.close()
            self._output.close()
            for sock in watched:
                _shutdown_only(sock)

    def watch(self, sock: FrameSocket) -> None:
        """Shut ``sock`` (an actor connection to this host) down when this connection is
        lost; at once if it is already."""
        with self._changed:
            if not self.closed:
                self._watched.add(sock)
                return
            lost = self.lost is not None
        if lost:
            _shutdown_only(sock)

    def exited(self, pid: int) -> bool:
        return pid in self._exits or self.closed

    def exit_notice(self, pid: int, timeout: float) -> tuple[bool, int | None]:
        """``(True, exit status)`` once the agent's notice that worker ``pid`` ended is here
        (the status None when the agent could not read it); ``(False, None)`` when this
        connection ended first or ``timeout`` seconds passed."""
        with self._changed:
            self._changed.wait_for(lambda: self.exited(pid), timeout)
            if pid in self._exits:
                return True, self._exits.pop(pid)
            return False, None

    def stop(self, pid: int) -> None:
        """Have the host agent stop worker ``pid`` (SIGTERM: a busy method is interrupted).
        Runs from finalizers too: it never waits long for the lock."""
        if self.closed or not self._send_lock.acquire(timeout=1.0):
            return
        try:
            control.send(self._sock, {"op": "stop", "pid": pid})
        except OSError:
            pass
        finally:
            self._send_lock.release()

    def close(self) -> None:
        with self._changed:
            self._closing = True
        _shutdown(self._sock)
        if self._reader is not threading.current_thread():
            self._reader.join(5.0)


class _RemoteWorker:
    """The liveness of a worker on a host agent: its end comes as a closed connection, and
    its exit status as a notice on the host's control connection."""

    def __init__(
        self,
        carrier: ClusterCarrier,
        channel: _HostChannel,
        pid: int,
        label: str,
        max_memory: Any,
    ) -> None:
        self._carrier = carrier
        self._channel = channel
        self.pid = pid
        self._label = label
        self._max_memory = max_memory
        self._closed = False

    def fileno(self) -> int | None:
        return None

    def is_alive(self) -> bool:
        return not self._channel.exited(self.pid)

    def death_error(self) -> ParlError:
        """The worker's exit as its host agent reported it; else, when the control connection
        to the agent ended first, the lost connection. The notice of a worker that ended comes
        within milliseconds of its connection's end; a connection that ended because the
        network failed is followed by the control connection's end within its own timeout
        (the longer wait here is only for that case)."""
        channel = self._channel
        noticed, code = channel.exit_notice(self.pid, _LOST_WAIT_S)
        if noticed:
            return worker_death_error(self._label, code, self._max_memory)
        if channel.lost is not None:
            return ActorDiedError(
                f"actor {self._label} is gone: the connection to {channel.what} was lost "
                f"({_reason(channel.lost)}): the host agent was stopped or killed, its machine "
                "went down or the network to it failed (not an exit of the worker); check the "
                "host and the network to it, then create a new actor"
            )
        return worker_death_error(self._label, None, self._max_memory)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._channel.stop(self.pid)
        self._carrier._actor_gone()


def _reason(exc: BaseException) -> str:
    """How a control connection ended, in a few words."""
    if isinstance(exc, TimeoutError):
        return "no answer from the host within the connection's timeout"
    if isinstance(exc, EOFError):
        return "closed from the host's side"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def _shutdown_only(sock: FrameSocket) -> None:
    """Wake every thread blocked on ``sock`` (it errors out), without closing it: its owner
    closes it."""
    try:
        sock.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _shutdown(sock: FrameSocket) -> None:
    try:
        sock.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
