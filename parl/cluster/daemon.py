"""The long-running cluster processes that ``xparl`` starts in the background.

``python -m parl.cluster.daemon master HOST PORT 0 READY_FD [--monitor_port=M]``: the master,
with its monitor page on port M; it owns no slots (``xparl start`` gives the slots of the
master's machine to a host agent of their own, so that they outlive a killed master).
``... agent HOST MASTER CPUS READY_FD [--cache_dir=CACHE] [--gpus=0,1]``: a host agent of CPUS
slots (and the GPUs listed) that registers with the master at MASTER, and again whenever a
master answers there after the connection was lost. HOST ``auto``: the agent listens on the
address of this machine that its connection to the master left from, which the master's
machine reaches (loopback for a master on loopback). With ``--master_slots``, it is the agent
of the master's own machine (``xparl start``): on a wildcard HOST it registers the master's
address (callers reach it where they reach the master), as does any agent on a wildcard HOST
whose connection to the master runs over loopback (it is on the master's machine). CACHE:
where host agents keep callers' code (default ``~/.parl/cache``). Each writes one line to
READY_FD (``ok ADDRESS`` or ``error MESSAGE``) once it serves, or fails; it runs until SIGTERM
or SIGINT, then stops its workers, removes its state file and exits. The secret comes from the
environment or the secret file, and is removed from the environment before anything is started
(workers never see it there). With ``--secret-stdin`` (the SSH launcher), the secret is the
first line of stdin instead, and the end of stdin (the SSH session closed) stops the process as
SIGTERM does; with ``--advertise=HOST:PORT``, an agent registers that address instead of its
own (the caller's end of an SSH tunnel to it); with ``--label=NAME``, the master shows it by
that name (its line in a hosts file). A master with ``--hosts=FILE`` (``xparl start --hosts``)
runs as ``python -m parl.ssh.daemon`` with the same arguments: that module gives :func:`main`
the ``launch`` that starts a host agent over SSH on every host of the file; the master holds
what it returns (their SSH connections), so they end with it. A launch that fails is its
``error`` line, with the message ``parl.connect(hosts=...)`` would raise.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Protocol

from parl.cluster import control, messages, state
from parl.cluster.auth import SECRET_ENV, load_secret
from parl.cluster.hostagent import HostAgent
from parl.cluster.master import Master
from parl.cluster.monitor import monitor_token
from parl.cluster.server import Server
from parl.errors import AuthenticationError, ClusterError
from parl.monitoring.server import MonitorServer

log = logging.getLogger("parl.cluster")
_RETRY_MIN_S = 0.1
_RETRY_MAX_S = 1.0


class Launch(Protocol):
    """Host agents a master started elsewhere; closing it ends them."""

    def close(self) -> None: ...


# (master's server, cluster secret, the --key=value options, --accept_unknown_host_keys)
Launcher = Callable[[Server, bytes, dict[str, str], bool], Launch]


def main(argv: list[str], launch: Launcher | None = None) -> int:
    """Run the daemon of ``argv``; ``launch`` starts the hosts of a master's ``--hosts``."""
    role, host, where, cpus, ready_fd = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    # options after the positional arguments: --cache_dir=PATH, --gpus=0,1 (others not ours)
    options = dict(a[2:].split("=", 1) for a in argv[5:] if a.startswith("--") and "=" in a)
    cache_dir = options.get("cache_dir") or None
    gpus = [g for g in options.get("gpus", "").split(",") if g]
    monitor_port = int(options.get("monitor_port") or 0)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        from_stdin = "--secret-stdin" in argv[5:]
        secret = _secret_from_stdin(stop) if from_stdin else load_secret()
        os.environ.pop(SECRET_ENV, None)
        agent: HostAgent | None = None
        if role == "master":
            if cpus or gpus:
                raise ValueError("a master owns no slots: start a host agent for them")
            server, own = _run_master(host, int(where), secret, monitor_port)
            if not options.get("hosts"):
                state.write(own)
        else:
            server, agent, own = _run_agent(
                host,
                where,
                cpus,
                secret,
                stop,
                cache_dir,
                gpus,
                options.get("advertise"),
                options.get("label"),
                "--master_slots" in argv[5:],
            )
    except Exception as exc:  # noqa: BLE001 - reported to the xparl command that waits
        _ready(ready_fd, control.error_line(str(exc)))
        return 1
    launched: Launch | None = None
    if role == "master" and options.get("hosts"):
        try:
            if launch is None:
                raise ValueError("--hosts needs a launcher of hosts: run python -m parl.ssh.daemon")
            launched = launch(server, secret, options, "--accept_unknown_host_keys" in argv)
        except Exception as exc:  # noqa: BLE001 - the same message parl.connect(hosts=) gives
            server.close()
            _ready(ready_fd, control.error_line(str(exc)))
            return 1
        state.write(own)
    _ready(ready_fd, f"ok {own.address}")
    log.info("%s serving at %s (cluster %s)", role, own.address, own.cluster)
    try:
        stop.wait()
    finally:
        log.info("stopping")
        if launched is not None:
            launched.close()  # the launched agents end (and stop their workers)
        server.close()
        if agent is not None:
            agent.close()
        state.remove(own)
    return 0


def _run_master(
    host: str, port: int, secret: bytes, monitor_port: int = 0
) -> tuple[Server, state.ProcessState]:
    master = Master()
    server = Server(host, port, secret, master.handlers)
    if monitor_port:  # the page, bound like the master; its token derives from the secret
        try:
            secret_text = secret.decode()
        except UnicodeDecodeError:
            secret_text = ""
        server.monitor = MonitorServer(
            master.monitor_snapshot,
            host,
            monitor_port,
            token=monitor_token(secret),
            also=(secret_text,),
        )
        master.monitoring = True
    server.start()
    return server, _state("master", server.address, server.address, server.port)


def _run_agent(
    host: str,
    master_address: str,
    cpus: int,
    secret: bytes,
    stop: threading.Event,
    cache_dir: str | None = None,
    gpus: list[str] | None = None,
    advertise: str | None = None,
    label: str | None = None,
    master_slots: bool = False,
) -> tuple[Server, HostAgent, state.ProcessState]:
    where = control.parse_address(master_address)
    link = _dial_master(where, secret, master_address)
    if host == control.AUTO_HOST:  # the link's local end: an address the master's machine reaches
        host = link.sock.getsockname()[0]
    agent: HostAgent | None = None
    server: Server | None = None
    try:
        agent = HostAgent(cpus, cache_dir=cache_dir, gpus=gpus)
        server = Server(host, 0, secret, agent.handlers)
        advertised = listening = server.host
        if control.is_wildcard(server.host):
            listening = link.sock.getsockname()[0]
            # on every address of the master's machine (the master's own agent, or one that
            # reached the master over loopback): callers reach it where they reach the
            # master; another, where the master's machine reached us from
            local = master_slots or control.is_loopback(listening)
            advertised = "" if local else listening
        port = server.port
        if advertise is not None:
            advertised, port = control.parse_address(advertise)
        hello = messages.Register(
            op="register",
            host=advertised,
            port=port,
            hostname=agent.hostname,
            slots=cpus,
            gpus=len(agent.gpus),
            versions=agent.versions,
        )
        if label:
            hello["label"] = label
        master = MasterLink(where, secret, hello, agent, stop)
        server.start()  # serving before registering: the master may try the address first
        master.registered(link)
    except BaseException:
        link.close()
        if server is not None:
            server.close()
        if agent is not None:
            agent.close()
        raise
    agent.report = master.report
    threading.Thread(target=master.run, name="parl-master-link", daemon=True).start()
    own = _state("agent", f"{listening}:{server.port}", master_address, where[1])
    own.master_slots = master_slots
    state.write(own)
    return server, agent, own


def _dial_master(where: tuple[str, int], secret: bytes, address: str) -> control.FrameSocket:
    """The first connection to the master; a refused or unanswered one says what to check."""
    try:
        return control.dial(where, secret, f"the master at {address}")
    except AuthenticationError:
        raise
    except ClusterError as exc:
        if control.is_loopback(where[0]):
            raise
        raise ClusterError(
            f"{exc} A master listens on 127.0.0.1 unless told otherwise: on its machine, "
            f"start it with `xparl start --port {where[1]} --host 0.0.0.0` (or that machine's "
            "address), and check that no firewall blocks the port"
        ) from None


class MasterLink:
    """A host agent's registration with its master. When the master goes away (killed,
    restarted) the agent keeps its workers and registers again as soon as a master answers
    at the same address; ``xparl stop`` is what ends an agent."""

    def __init__(
        self,
        where: tuple[str, int],
        secret: bytes,
        hello: messages.Register,
        agent: HostAgent,
        stop: threading.Event,
    ) -> None:
        self.where, self.secret, self.hello = where, secret, hello
        self.what = f"the master at {where[0]}:{where[1]}"
        self.agent, self.stop = agent, stop
        self._lock = threading.Lock()
        self._link: control.FrameSocket | None = None

    def registered(self, link: control.FrameSocket) -> None:
        """Register on ``link`` (a fresh authenticated connection) and report the used slots."""
        try:
            # the slots in use go with the registration, so that a restarted master never
            # counts them free before the first report
            usage = self.agent.usage()
            hello = messages.Register(**self.hello)
            hello["used"] = usage.get("used", 0)
            hello["gpu_used"] = usage.get("gpu_used", 0)
            control.request(link, hello, self.what, 10.0)
            with self._lock:
                self._link = link
            self.report({**self.agent.usage(), "token": None})
        except BaseException:
            link.close()
            raise

    def report(self, message: messages.Used | messages.Stats) -> None:
        """Send a report to the master; dropped while there is none (re-sent at registering)."""
        with self._lock:
            if self._link is None:
                return
            try:
                control.send(self._link, message)
            except OSError:
                pass

    def run(self) -> None:
        delay = _RETRY_MIN_S
        while not self.stop.is_set():
            with self._lock:
                link = self._link
            if link is not None:
                _read_until_closed(link)
                with self._lock:
                    self._link = None
                link.close()
                if self.stop.is_set():
                    return
                log.warning("%s went away: registering again when it is back", self.what)
                delay = _RETRY_MIN_S
            if self.stop.wait(delay):
                return
            try:
                self.registered(control.dial(self.where, self.secret, self.what))
                log.info("registered again with %s", self.what)
            except (ClusterError, OSError, ValueError):
                delay = min(2 * delay, _RETRY_MAX_S)


def _read_until_closed(link: control.FrameSocket) -> None:
    try:
        while control.recv(link) is not None:
            pass
    except (OSError, ValueError):
        pass


def _state(role: str, address: str, cluster: str, port: int) -> state.ProcessState:
    own = state.own()
    own.role, own.address, own.cluster, own.cluster_port = role, address, cluster, port
    own.log = os.environ.get("PARL_XPARL_LOG", "")
    return own


def _secret_from_stdin(stop: threading.Event) -> bytes:
    """The first line of stdin; a thread then sets ``stop`` when stdin ends."""
    secret = b""
    while not secret.endswith(b"\n"):  # unbuffered: nothing past the line is taken from fd 0
        byte = os.read(0, 1)
        if not byte:
            break
        secret += byte
    secret = secret.strip()
    if len(secret) < 16:
        raise ValueError("no secret (of at least 16 bytes) came on stdin")

    def watch() -> None:
        while os.read(0, 4096):
            pass
        log.info("stdin closed (the SSH session ended): stopping")
        stop.set()

    threading.Thread(target=watch, name="parl-stdin", daemon=True).start()
    return secret


def _ready(fd: int, line: str) -> None:
    try:
        os.write(fd, (line.replace("\n", " ") + "\n").encode())
        os.close(fd)
    except OSError:
        pass


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    sys.exit(main(sys.argv[1:]))
