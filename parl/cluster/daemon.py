"""The long-running cluster processes that ``xparl`` starts in the background.

``python -m parl.cluster.daemon master HOST PORT CPUS READY_FD``: the master, with a local host
agent of CPUS slots on the same port (none when CPUS is 0). ``... agent HOST MASTER CPUS
READY_FD``: a host agent that registers with the master at MASTER and ends when that
connection does. Each writes one line to READY_FD (``ok ADDRESS`` or ``error MESSAGE``) once
it serves, or fails; it runs until SIGTERM or SIGINT, then stops its workers, removes its
state file and exits. The secret comes from the environment or the secret file, and is removed
from the environment before anything is started (workers never see it there). With a last
argument ``--secret-stdin`` (the SSH launcher), the secret is the first line of stdin instead,
and the end of stdin (the SSH session closed) stops the process as SIGTERM does; with
``--advertise=HOST:PORT`` too, an agent registers that address instead of its own (the
caller's end of an SSH tunnel to it).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading

from parl.cluster import control, state
from parl.cluster.auth import SECRET_ENV, load_secret
from parl.cluster.hostagent import HostAgent
from parl.cluster.master import Master
from parl.cluster.server import Server

log = logging.getLogger("parl.cluster")


def main(argv: list[str]) -> int:
    role, host, where, cpus, ready_fd = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        flags = argv[5:]
        secret = _secret_from_stdin(stop) if "--secret-stdin" in flags else load_secret()
        advertise = [f.split("=", 1)[1] for f in flags if f.startswith("--advertise=")]
        os.environ.pop(SECRET_ENV, None)
        if role == "master":
            parts = _run_master(host, int(where), cpus, secret, stop)
        else:
            parts = _run_agent(host, where, cpus, secret, stop, *advertise[:1])
    except Exception as exc:  # noqa: BLE001 - reported to the xparl command that waits
        _ready(ready_fd, f"error {exc}")
        return 1
    server, agent, own = parts
    _ready(ready_fd, f"ok {own.address}")
    log.info("%s serving at %s (cluster %s)", role, own.address, own.cluster)
    try:
        stop.wait()
    finally:
        log.info("stopping")
        server.close()
        if agent is not None:
            agent.close()
        state.remove(own)
    return 0


def _run_master(
    host: str, port: int, cpus: int, secret: bytes, stop: threading.Event
) -> tuple[Server, HostAgent | None, state.ProcessState]:
    master = Master()
    server = Server(host, port, secret, master.handlers)
    agent = None
    if cpus > 0:
        agent = HostAgent(cpus)
        # listening on every address: callers reach it where they reach the master ("")
        local = "" if control.is_wildcard(server.host) else server.host
        _, agent.report = master.add_host(local, server.port, agent.hostname, cpus)
        server.handlers.update(agent.handlers)
    server.start()
    own = _state("master", server.address, server.address, server.port)
    state.write(own)
    return server, agent, own


def _run_agent(
    host: str,
    master_address: str,
    cpus: int,
    secret: bytes,
    stop: threading.Event,
    advertise: str | None = None,
) -> tuple[Server, HostAgent, state.ProcessState]:
    where = control.parse_address(master_address)
    link = control.dial(where, secret, f"the master at {master_address}")
    agent = HostAgent(cpus)
    server = Server(host, 0, secret, agent.handlers)
    advertised = server.host
    if control.is_wildcard(advertised):  # reachable where the master reached us from
        advertised = link.sock.getsockname()[0]
    port, listening = server.port, advertised
    if advertise is not None:
        advertised, port = control.parse_address(advertise)
    control.request(
        link,
        {
            "op": "register",
            "host": advertised,
            "port": port,
            "hostname": agent.hostname,
            "slots": cpus,
        },
        f"the master at {master_address}",
        10.0,
    )
    lock = threading.Lock()

    def report(message: control.Message) -> None:
        with lock:
            try:
                control.send(link, message)
            except OSError:
                pass

    agent.report = report
    server.start()

    def watch_master() -> None:  # the cluster is gone: so is this agent
        try:
            while control.recv(link) is not None:
                pass
        except (OSError, ValueError):
            pass
        log.warning("the master at %s went away: stopping", master_address)
        stop.set()

    threading.Thread(target=watch_master, name="parl-master-link", daemon=True).start()
    own = _state("agent", f"{listening}:{server.port}", master_address, where[1])
    state.write(own)
    return server, agent, own


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
