"""``xparl``: start, extend, list and stop this user's clusters.

    xparl start --port P [--cpu_num N] [--host ADDR] [--cache_dir D] [--gpu_cluster --gpu 0,1]
                [--hosts hosts.txt [--ssh_config F] [--known_hosts F]]
                                                          master + a host agent for this
                                                          machine's slots (+ one per SSH host)
    xparl connect --address HOST:PORT [--cpu_num N] [--gpu 0,1] [--host ADDR] [--cache_dir D]
                                                          add this machine
    xparl status                                          each cluster: hosts, slots, clients
    xparl stop [--port P]                                 only that cluster's processes

The processes run in the background (their own session); ``start`` and ``connect`` return
once they serve. The cluster knows nothing of SSH: ``--hosts`` works when the command is run
with a :class:`HostsLauncher` (the ``xparl`` script runs :mod:`parl.ssh.xparl`, which gives the
SSH launcher's). They are found again through state files (:mod:`parl.cluster.state`). The
master owns no slots: those of its machine belong to a host agent process of their own, which
goes on serving its actors when the master is killed and registers again with the master that
``xparl start`` starts next on that port.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psutil

from parl.cluster import control, messages, state
from parl.cluster.auth import SECRET_ENV, load_secret, secret_path
from parl.cluster.monitor import monitor_token
from parl.errors import ClusterError, ParlError

_READY_TIMEOUT_S = 30.0
_CACHE_HELP = (
    "where callers' code is kept (default: ~/.parl/cache); it must be yours and writable by "
    "you alone (made with mode 700 when missing)"
)
_CPU_HELP = "CPU slots (default: the CPU count, or 0 with --gpu)"
_GPU_HELP = "GPU ids this machine offers, e.g. 0,1 (actors of @parl.remote_class(n_gpu=N))"
_STOP_TIMEOUT_S = 15.0
_REJOIN_TIMEOUT_S = 5.0  # a host agent that outlived its master retries every second
_HOSTS_READY_TIMEOUT_S = 180.0  # connecting, checking, uploading and starting every host
DAEMON = "parl.cluster.daemon"  # the module that runs masters and host agents
_AGENT_HOST_HELP = (
    "address to listen on (default: the address of this machine that its connection to the "
    "master leaves from, which the master's machine reaches; 0.0.0.0: every address)"
)


@dataclass(frozen=True)
class HostsLauncher:
    """What ``xparl start --hosts FILE`` needs from a launcher of hosts: ``options`` checks the
    command's arguments (the hosts file, ``--ssh_config`` ...) before anything starts and gives
    the master's options for them; ``daemon`` names the module that runs a master which
    launches the hosts (its arguments are those of :mod:`parl.cluster.daemon`)."""

    options: Callable[[argparse.Namespace], list[str]]
    daemon: str


def make_parser() -> argparse.ArgumentParser:
    """The ``xparl`` command line (also read by the documentation's CLI page)."""
    parser = argparse.ArgumentParser(prog="xparl", description="parl clusters over TCP")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start a master and a local host agent")
    start.add_argument("--port", type=_port, required=True, help="the master's TCP port")
    start.add_argument("--cpu_num", type=int, default=None, help=_CPU_HELP)
    start.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every "
        "address, so that other machines can join and call)",
    )
    start.add_argument("--cache_dir", default="", help=_CACHE_HELP)
    start.add_argument("--gpu_cluster", action="store_true", help="local GPUs, no CPU slots")
    start.add_argument("--gpu", default="", help=_GPU_HELP)
    start.add_argument(
        "--monitor_port", type=int, default=0, help="serve the cluster's web page on this port"
    )
    start.add_argument("--hosts", default="", help="a hosts file: start a host agent on each")
    start.add_argument("--ssh_config", default="", help="(--hosts) default: ~/.ssh/config")
    start.add_argument(
        "--known_hosts", default="", help="(--hosts) default: ~/.ssh/known_hosts and /etc's"
    )
    start.add_argument(
        "--wheels", default="", help="(--hosts) wheel files for hosts with install=venv"
    )
    start.add_argument(
        "--accept_unknown_host_keys",
        action="store_true",
        help="(--hosts) trust hosts whose key no known_hosts file has, for this run",
    )
    connect = commands.add_parser("connect", help="add this machine to a cluster")
    connect.add_argument("--address", type=_address, required=True, help="the master's host:port")
    connect.add_argument("--cpu_num", type=int, default=None, help=_CPU_HELP)
    connect.add_argument("--host", default=control.AUTO_HOST, help=_AGENT_HOST_HELP)
    connect.add_argument("--cache_dir", default="", help=_CACHE_HELP)
    connect.add_argument("--gpu", default="", help=_GPU_HELP)
    status = commands.add_parser("status", help="list the clusters this user started")
    status.add_argument(
        "--json", action="store_true", help="everything the monitor page shows, as JSON"
    )
    stop = commands.add_parser("stop", help="stop a cluster's processes")
    stop.add_argument("--port", type=_port, help="the cluster's port (default: every cluster)")
    return parser


def main(argv: list[str] | None = None, hosts: HostsLauncher | None = None) -> int:
    """Run the ``xparl`` command ``argv`` (default: this process's arguments); ``hosts``
    launches the hosts of ``xparl start --hosts`` (without it, ``--hosts`` is refused)."""
    args = make_parser().parse_args(argv)
    try:
        if args.command in ("start", "connect"):
            gpus = parse_gpus(args.gpu)
            if getattr(args, "gpu_cluster", False) and not gpus:
                raise ValueError("--gpu_cluster needs the GPU ids to offer: --gpu 0,1")
            cpus = args.cpu_num
            if cpus is None:  # a machine that offers GPUs offers no CPU slots unless asked
                cpus = 0 if gpus else os.cpu_count() or 1
            options = _daemon_options(args.cache_dir, gpus)
            if args.command == "start":
                monitor = args.monitor_port
                if not 0 <= monitor < 65536 or monitor == args.port:
                    raise ValueError(
                        f"--monitor_port must be a free port other than --port, got {monitor}"
                    )
                master = [f"--monitor_port={monitor}"] if monitor else []
                master += _hosts_options(args, hosts)
                daemon = hosts.daemon if hosts is not None and args.hosts else DAEMON
                return _start(args.port, cpus, args.host, options, gpus, monitor, master, daemon)
            return _connect(args.address, cpus, args.host, options, gpus)
        if args.command == "status":
            return _status_json() if args.json else _status()
        return _stop(args.port)
    except (ParlError, ValueError) as exc:
        print(f"xparl {args.command}: {exc}", file=sys.stderr)
        return 1


def _port(text: str) -> int:
    """A ``--port`` value, checked while parsing: before a secret or a log is written."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(
            f"a port is a number from 1 to 65535 (e.g. --port 8010), got {text!r}"
        )
    return int(text)


def _address(text: str) -> str:
    """An ``--address`` value (``host:port``), checked while parsing like ``--port``."""
    try:
        control.parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def parse_gpus(text: str) -> list[str]:
    """``"0,1"`` as ["0", "1"]; ValueError naming the bad id."""
    ids = [part.strip() for part in text.split(",") if part.strip()]
    for gpu in ids:
        if not gpu.isdigit():
            raise ValueError(
                f"--gpu takes GPU ids such as 0,1 (as nvidia-smi numbers them), got {gpu!r}"
            )
    if len(set(ids)) != len(ids):
        raise ValueError(f"--gpu lists a GPU twice: {text!r}")
    return ids


def _daemon_options(cache_dir: str, gpus: list[str]) -> list[str]:
    options = [f"--cache_dir={os.path.abspath(cache_dir)}"] if cache_dir else []
    return options + ([f"--gpus={','.join(gpus)}"] if gpus else [])


def _hosts_options(args: argparse.Namespace, hosts: HostsLauncher | None) -> list[str]:
    """The master's options for ``--hosts`` (none without it), checked by ``hosts``."""
    if not args.hosts:
        if args.ssh_config or args.known_hosts or args.wheels or args.accept_unknown_host_keys:
            raise ValueError("--ssh_config, --known_hosts, --wheels and "
                             "--accept_unknown_host_keys go with --hosts hosts.txt")  # fmt: skip
        return []
    if hosts is None:
        raise ValueError(
            "--hosts launches the hosts over SSH, which this command was started without: "
            "run the xparl script (or python -m parl.ssh.xparl)"
        )
    return hosts.options(args)


def _offer(cpus: int, gpus: list[str]) -> str:
    return f"{cpus} CPU slot(s)" + (f" and GPU(s) {','.join(gpus)}" if gpus else "")


def _start(
    port: int,
    cpus: int,
    host: str,
    options: list[str] | None = None,
    gpus: Sequence[str] = (),
    monitor_port: int = 0,
    master_options: list[str] | None = None,
    master_daemon: str = DAEMON,
) -> int:
    """Start the master (``master_options``, run by the module ``master_daemon``), then the
    host agent of this machine's ``cpus`` slots and ``gpus`` (``options``), unless one outlived
    an earlier master on ``port``."""
    if cpus < 0:
        raise ValueError(f"--cpu_num must be >= 0 (0: a master without local slots), got {cpus}")
    load_secret(create=True)  # refuses a secret file that others can read
    records = state.read_all()
    for other in records:
        if other.role == "master" and other.cluster_port == port:
            raise ParlError(
                f"a cluster of yours already runs on port {port} ({other.address}); stop it "
                f"with `xparl stop --port {port}` or choose another port"
            )
    kept = [s for s in records if s.master_slots and s.cluster_port == port]
    master_options = master_options or []
    launches = any(o.startswith("--hosts=") for o in master_options)
    timeout = _HOSTS_READY_TIMEOUT_S if launches else _READY_TIMEOUT_S
    log = f"xparl-{port}.log"
    address, process = _spawn(
        "master", host, str(port), 0, log, master_options, timeout, master_daemon
    )
    listen, port_number = control.parse_address(address)
    if (cpus or gpus) and not kept:
        where = address
        if control.is_wildcard(listen):  # the agent dials the master on loopback
            where = f"[::1]:{port_number}" if ":" in listen else f"127.0.0.1:{port_number}"
        agent_options = [*(options or []), "--master_slots"]
        try:
            _spawn("agent", host, where, cpus, f"xparl-agent-{port}.log", agent_options)
        except BaseException:
            _end(process)
            raise
    addresses = _addresses(listen) if control.is_wildcard(listen) else [listen]
    shown = [f"[{a}]:{port_number}" if ":" in a else f"{a}:{port_number}" for a in addresses]
    slots = f"{_offer(cpus, list(gpus))} here"
    if kept:
        back = _registered_again(address, kept[0])
        if back is None:
            print(
                f"xparl start: the master at {address} serves, but the host agent of this "
                f"machine's slots that outlived the earlier master (pid {kept[0].pid}) did not "
                f"register with it within {_REJOIN_TIMEOUT_S:g} s (does it hold another "
                f"cluster secret? its log: {kept[0].log or 'see ~/.parl/logs'}): `xparl stop "
                f"--port {port}`, then `xparl start` again",
                file=sys.stderr,
            )
            return 1
        gpu_text = f" and {back.get('gpus', 0)} GPU(s)" if back.get("gpus") else ""
        slots = (
            f"the host agent that outlived the earlier master (pid {kept[0].pid}) has its "
            f"{back.get('slots', 0)} CPU slot(s){gpu_text} here (to change them: `xparl stop "
            f"--port {port}`, then start again)"
        )
    print(f"parl cluster started: master at {shown[0]}, {slots}")
    if launches:
        for h in _ask_master(address, {"op": "status"})["hosts"]:
            if h.get("label"):
                print(f"SSH host {h['label']}: host agent at {h['address']}, {h['slots']} slot(s)")
    if control.is_loopback(listen):
        print(f"add slots here:  xparl connect --address {shown[0]} [--cpu_num N]")
        named = "" if _is_ip(host) else f" (--host {host} is {listen} on this machine)"
        print(
            f"other machines:  cannot join, the master listens on {listen} only{named}; to let "
            f"them, `xparl stop --port {port_number}` and `xparl start --port {port_number} "
            "--host 0.0.0.0` (or this machine's address)"
        )
    else:
        for i, line in enumerate(shown):
            lead = "add a machine:  " if i == 0 else "            or: "
            print(f"{lead} xparl connect --address {line} [--cpu_num N]")
        print(f"                 ({_secret_how()})")
    print(f"in your script:  parl.connect({shown[0]!r})")
    if monitor_port:
        page_host = addresses[0]
        page_host = f"[{page_host}]" if ":" in page_host else page_host
        print(f"monitor:         http://{page_host}:{monitor_port}/")
        if not control.is_loopback(listen):
            token = monitor_token(load_secret())
            print(f"                 (asks for this token, or the cluster secret: {token})")
    return 0


def _registered_again(address: str, agent: state.ProcessState) -> dict | None:
    """The master at ``address``'s entry of the host agent ``agent`` (one that outlived an
    earlier master, and registers again by itself within a second), once it is there; None
    when it is not within ``_REJOIN_TIMEOUT_S`` (it cannot authenticate, for one)."""
    port = agent.address.rpartition(":")[2]
    deadline = time.monotonic() + _REJOIN_TIMEOUT_S
    while True:
        for host in _ask_master(address, {"op": "status"})["hosts"]:
            if str(host.get("address", "")).rpartition(":")[2] == port:
                return host
        if time.monotonic() >= deadline or not agent.alive():
            return None
        time.sleep(0.1)


def _addresses(wildcard: str) -> list[str]:
    """This machine's addresses that other machines may reach a listener on ``wildcard`` at
    (on interfaces that are up; not loopback, not IPv6 link-local); its hostname
    when it has none (a hostname may not resolve on other machines: addresses first)."""
    import ipaddress
    import socket

    families = {socket.AF_INET} if wildcard == "0.0.0.0" else {socket.AF_INET, socket.AF_INET6}
    found: list[str] = []
    up = {name for name, stats in psutil.net_if_stats().items() if stats.isup}
    for name, entries in psutil.net_if_addrs().items():
        if name not in up:
            continue
        for entry in entries:
            if entry.family not in families:
                continue
            address = entry.address.split("%", 1)[0]
            ip = ipaddress.ip_address(address)
            if not (ip.is_loopback or ip.is_link_local) and address not in found:
                found.append(address)
    return found or [_hostname()]


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _secret_how() -> str:
    """How another machine gets this cluster's secret."""
    if os.environ.get(SECRET_ENV):
        return f"first set {SECRET_ENV} there as it is here: the cluster's secret"
    return (
        f"first copy {secret_path()} to ~/.parl/cluster_secret there, mode 0600: the "
        "cluster's secret"
    )


def _end(process: subprocess.Popen) -> None:
    """Stop a daemon this command started (the rest of a start that failed)."""
    process.terminate()
    try:
        process.wait(_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _connect(
    address: str, cpus: int, host: str, options: list[str] | None = None, gpus: Sequence[str] = ()
) -> int:
    if cpus < 0 or cpus + len(gpus) < 1:
        raise ValueError(f"--cpu_num must be >= 1 (or >= 0 with --gpu), got {cpus}")
    control.parse_address(address)
    load_secret()
    _, port = control.parse_address(address)
    log_name = f"xparl-agent-{port}-{os.getpid()}.log"
    listening, _ = _spawn("agent", host, address, cpus, log_name, options or [])
    print(
        f"host agent at {listening} with {_offer(cpus, list(gpus))} joined the cluster at {address}"
    )
    if control.is_wildcard(host):
        print("(it listens on every address of this machine: callers of every machine use it)")
    elif control.is_loopback(control.parse_address(listening)[0]):
        print(
            "(it listens on loopback: only callers on this machine are placed on it; "
            "`--host 0.0.0.0` lets callers of other machines use it)"
        )
    return 0


def _spawn(
    role: str,
    host: str,
    where: str,
    cpus: int,
    log_name: str,
    options: list[str],
    timeout: float = _READY_TIMEOUT_S,
    module: str = DAEMON,
) -> tuple[str, subprocess.Popen]:
    """Start a daemon (``python -m module``) in its own session; its address once it serves,
    and its process."""
    os.makedirs(os.path.join(state.parl_dir(), "logs"), mode=0o700, exist_ok=True)
    log_path = os.path.join(state.parl_dir(), "logs", log_name)
    ready_r, ready_w = os.pipe()
    env = dict(os.environ, PARL_XPARL_LOG=log_path)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                module,
                role,
                host,
                where,
                str(cpus),
                str(ready_w),
                *options,
            ],
            pass_fds=(ready_w,),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=env,
        )
    os.close(ready_w)
    line = _read_line(ready_r, timeout)
    if line.startswith("ok "):
        return line[3:], process
    if process.poll() is None:
        process.kill()
    process.wait()
    said = control.ready_error(line[6:]) if line.startswith("error ") else "no answer"
    raise ParlError(f"the {role} did not start: {said} (log: {log_path})")


def _read_line(fd: int, timeout: float) -> str:
    from parl.wire.framing import wait_readable

    data = b""
    deadline = time.monotonic() + timeout
    try:
        while not data.endswith(b"\n") and wait_readable([fd], deadline - time.monotonic()):
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return data.decode(errors="replace").strip()


def _status() -> int:
    records = state.read_all()
    masters = [s for s in records if s.role == "master"]
    # host agents of this user whose master is not one of those (an agent-only machine, or
    # one that joined another machine's cluster on the port of a cluster it runs itself)
    agents = [s for s in records if s.role == "agent" and not any(_serves(m, s) for m in masters)]
    if not masters and not agents:
        print("no cluster of yours is running (start one with `xparl start --port P`)")
        return 0
    for agent in agents:
        if agent.master_slots:
            print(
                f"host agent at {agent.address} (pid {agent.pid}) of this machine's slots; its "
                f"master is not running (`xparl start --port {agent.cluster_port}` starts one it "
                f"registers with again; `xparl stop --port {agent.cluster_port}` stops the agent)"
            )
            continue
        print(
            f"host agent at {agent.address} (pid {agent.pid}) in the cluster at {agent.cluster} "
            f"(`xparl status` on that machine lists the cluster; `xparl stop --port "
            f"{agent.cluster_port}` here stops this agent)"
        )
    secret = load_secret() if masters else b""
    for master in masters:
        try:
            info = _ask_master(master.address, {"op": "status"}, secret)
        except ParlError as exc:
            print(f"cluster {master.address} (pid {master.pid}): not answering: {exc}")
            continue
        hosts = info["hosts"]
        slots = sum(h["slots"] for h in hosts)
        used = sum(h["used"] for h in hosts)
        print(
            f"cluster {master.address} (pid {master.pid}): {len(hosts)} host(s), {used} of "
            f"{slots} slot(s) used, {slots - used} free, {info['clients']} client(s)"
        )
        for h in hosts:
            gpus = f"; GPUs: {h['gpu_used']} of {h['gpus']} used" if h.get("gpus") else ""
            ssh = f", SSH host {h['label']}" if h.get("label") else ""
            print(
                f"  {h['address']} ({h['hostname']}{ssh}): {h['used']} used, "
                f"{h['slots'] - h['used']} free of {h['slots']}{gpus}"
            )
    return 0


def _serves(master: state.ProcessState, agent: state.ProcessState) -> bool:
    """Whether ``agent`` is registered with ``master`` (both of this machine): the agent of its
    slots, or one that dialed the master's port at an address or name of this machine."""
    if agent.cluster_port != master.cluster_port:
        return False
    if agent.master_slots or agent.cluster == master.address:
        return True
    host = control.parse_address(agent.cluster)[0]
    return control.is_loopback(host) or host in _addresses("::") or host == _hostname()


def _status_json() -> int:
    """Each running cluster of this user with what its monitor page shows, as one JSON list."""
    secret = load_secret() if state.read_all() else b""
    clusters = []
    for master in (s for s in state.read_all() if s.role == "master"):
        entry: dict = {"address": master.address, "pid": master.pid}
        try:
            info = _ask_master(master.address, {"op": "status", "full": True}, secret)
            entry["hosts"] = info.get("hosts")  # each with its slots (and an SSH host's label)
            entry["status"] = info.get("monitor")
        except ParlError as exc:
            entry["error"] = f"not answering: {exc}"
        clusters.append(entry)
    print(json.dumps(clusters, indent=2))
    return 0


def _ask_master(
    address: str, request: messages.Status, secret: bytes | None = None
) -> messages.Status:
    """One ``status`` request to the master at ``address``, and its answer."""
    secret = secret if secret is not None else load_secret()
    sock = control.dial(control.parse_address(address), secret, address)
    try:
        answer = control.request(sock, request, address, 5.0)
    finally:
        sock.close()
    if answer["op"] != "status":
        raise ClusterError(f"the master at {address} answered {answer['op']!r}, not 'status'")
    return answer


def _stop(port: int | None) -> int:
    targets = [s for s in state.read_all() if port is None or s.cluster_port == port]
    if not targets:
        where = f"on port {port}" if port is not None else "at all"
        print(f"no cluster of yours is running {where}")
        return 1 if port is not None else 0
    here = [s for s in targets if s.role == "master" or s.master_slots]
    if port is not None and here:
        # the cluster of this machine on that port; an agent that joined another machine's
        # cluster on the same port number is left to a second `xparl stop --port`
        masters = [s for s in here if s.role == "master"]
        ours = [s for s in targets if s in here or any(_serves(m, s) for m in masters)]
        for agent in (s for s in targets if s not in ours):
            print(
                f"left running: the host agent at {agent.address} (pid {agent.pid}) in the "
                f"cluster at {agent.cluster}, another machine's cluster on port {port} "
                f"(`xparl stop --port {port}` again stops it)"
            )
        targets = ours
    targets.sort(key=lambda s: s.role != "agent")  # host agents first, then masters
    processes = []
    for target in targets:
        try:
            process = psutil.Process(target.pid)
            if state.same_process(process, target.started):  # not a reused pid
                process.send_signal(signal.SIGTERM)
                processes.append((target, process))
        except psutil.Error:
            state.remove(target)
    _, alive = psutil.wait_procs([p for _, p in processes], timeout=_STOP_TIMEOUT_S)
    for process in alive:
        process.kill()
    for target, _ in processes:
        state.remove(target)
        print(f"stopped the {target.role} at {target.address} (pid {target.pid})")
    return 0


def _hostname() -> str:
    import socket

    return socket.gethostname()


if __name__ == "__main__":
    sys.exit(main())
