"""The cluster's TCP carrier against baselines of the same run: small calls, futures on two
actors, a 128 MiB array, 128 MiB to a host agent on another network namespace, and what an
idle cluster costs.

    python scripts/bench_cluster.py            # starts a throwaway cluster on loopback
    python scripts/bench_cluster.py --calls 2000
    python scripts/bench_cluster.py --veth_only  # only the row of the other namespace

Baselines: a ``multiprocessing.connection`` Client/Listener round trip over loopback TCP (the
floor for a call to another process over TCP, with its HMAC authentication done once), and
this project's local carrier (a Unix socket with shared memory). The cluster runs in its own
``HOME`` with a secret in ``PARL_CLUSTER_SECRET``, and is stopped at the end. The idle cluster
(master plus a host agent with 2 slots, no actor yet) is measured right after ``xparl start``:
its processes and their total resident memory.

The other namespace (root only; without root the row says it is skipped, and why): a network
namespace joined to this one by a veth pair, a host agent in it and a master here (a cluster of
its own); a call whose argument is 128 MiB against a plain socket that sends 128 MiB to a
process in the same namespace over the same link, each waiting for a one-byte answer.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Client, Listener

import numpy as np
import psutil
from benchrecord import Report, add_record_flag

import parl

BIG = 128 << 20


@parl.remote_class
class Echo:
    def noop(self, x: int) -> int:
        return x

    def echo(self, a: np.ndarray) -> np.ndarray:
        return a

    def size(self, a: np.ndarray) -> int:
        return int(a.nbytes)


@parl.remote_class(wait=False)
class AsyncEcho:
    def noop(self, x: int) -> int:
        return x


def _serve(address: tuple[str, int], authkey: bytes, ready: mp.Event) -> None:
    with Listener(address, authkey=authkey) as listener:
        ready.set()
        with listener.accept() as conn:
            while True:
                try:
                    conn.send(conn.recv())
                except EOFError:
                    return


def _raw_echo(address: tuple[str, int], ready: mp.Event) -> None:
    with socket.create_server(address) as server:
        ready.set()
        conn, _ = server.accept()
        with conn:
            buf = memoryview(bytearray(BIG))
            while True:
                have = 0
                while have < BIG:
                    got = conn.recv_into(buf[have:])
                    if not got:
                        return
                    have += got
                conn.sendall(buf)


@contextlib.contextmanager
def raw_echo() -> Iterator[Callable[[], object]]:
    """128 MiB to a process and back over a plain loopback socket: sendall and recv_into."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = probe.getsockname()
    ready = mp.get_context("spawn").Event()
    child = mp.get_context("spawn").Process(target=_raw_echo, args=(address, ready))
    child.start()
    ready.wait(30)
    data = np.ones(BIG, np.uint8)
    back = memoryview(bytearray(BIG))

    def call() -> None:
        sock.sendall(data)
        have = 0
        while have < BIG:
            have += sock.recv_into(back[have:])

    try:
        with socket.create_connection(address) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            yield call
    finally:
        child.join(10)


@contextlib.contextmanager
def mp_echo() -> Iterator[Callable[[], object]]:
    """A small round trip over a multiprocessing.connection on loopback TCP."""
    authkey = secrets.token_bytes(32)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = probe.getsockname()
    ready = mp.get_context("spawn").Event()
    child = mp.get_context("spawn").Process(target=_serve, args=(address, authkey, ready))
    child.start()
    ready.wait(30)
    try:
        with Client(address, authkey=authkey) as conn:
            yield lambda: (conn.send(1), conn.recv())
    finally:
        child.join(10)


def _pong(family: int, address: object, ready: mp.Event) -> None:
    with socket.socket(family) as server:
        server.bind(address)
        server.listen()
        ready.set()
        conn, _ = server.accept()
        with conn:
            if family == socket.AF_INET:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while data := conn.recv(64):
                conn.sendall(data)


@contextlib.contextmanager
def ping(family: int) -> Iterator[Callable[[], object]]:
    """A 40-byte ping-pong with a process over a plain socket (TCP on loopback, or a Unix
    socket): what the kernel alone costs per round trip, without Python work on either side
    beyond one send and one recv."""
    folder = tempfile.mkdtemp(prefix="parl-bench-")
    if family == socket.AF_INET:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            address: object = probe.getsockname()
    else:
        address = os.path.join(folder, "pong.sock")
    ready = mp.get_context("spawn").Event()
    child = mp.get_context("spawn").Process(target=_pong, args=(family, address, ready))
    child.start()
    ready.wait(30)
    try:
        with socket.socket(family) as sock:
            sock.connect(address)
            if family == socket.AF_INET:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            message = b"x" * 40
            yield lambda: (sock.sendall(message), sock.recv(64))
    finally:
        child.join(10)
        shutil.rmtree(folder, ignore_errors=True)


def timings(
    calls: dict[str, Callable[[], object]], n: int, rounds: int, warmup: int = 200
) -> dict[str, float]:
    """Seconds per call of each, the median of ``rounds`` rounds of ``n`` calls after
    ``warmup`` calls; the rounds of all of them are interleaved, so that a change in the
    machine's load hits each alike."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(n):
                call()
            times[name].append((time.perf_counter() - start) / n)
    return {name: statistics.median(values) for name, values in times.items()}


def _seconds(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _xparl(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "parl.cluster.cli", *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


_SINK = """
import socket, sys
size = int(sys.argv[2])
with socket.create_server((sys.argv[1], 0)) as server:
    print(server.getsockname()[1], flush=True)
    conn, _ = server.accept()
    buf = memoryview(bytearray(size))
    while True:
        have = 0
        while have < size:
            got = conn.recv_into(buf[have:])
            if not got:
                sys.exit(0)
            have += got
        conn.sendall(b"k")
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextlib.contextmanager
def other_namespace() -> Iterator[tuple[list[str], str, str]]:
    """A network namespace joined to this one by a veth pair (no shaping): the argv prefix
    that runs a command in it, this side's address and its address. Everything in it is
    killed and it is deleted at the end."""
    tag = os.getpid()
    name, near, far = f"parl-bench-{tag}", f"pbh{tag}", f"pbn{tag}"
    here, there = f"10.201.{tag % 250}.1", f"10.201.{tag % 250}.2"
    _ip("netns", "add", name)
    try:
        _ip("link", "add", near, "type", "veth", "peer", "name", far)
        _ip("link", "set", far, "netns", name)
        _ip("addr", "add", f"{here}/24", "dev", near)
        _ip("link", "set", near, "up")
        _ip("-n", name, "addr", "add", f"{there}/24", "dev", far)
        _ip("-n", name, "link", "set", far, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield ["ip", "netns", "exec", name], here, there
    finally:
        listed = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
        for pid in listed.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), 9)
        subprocess.run(["ip", "link", "del", near], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def veth_rows(report: Report, rounds: int) -> None:
    """The other namespace's table: 128 MiB to a host agent there against a plain socket, or a
    note saying why it is skipped."""
    if os.geteuid() != 0:
        report.note("128 MiB to another network namespace: skipped (a namespace needs root).")
        return
    if shutil.which("ip") is None:
        report.note("128 MiB to another network namespace: skipped (no `ip` command, iproute2).")
        return
    home = tempfile.mkdtemp(prefix="parl-bench-veth-")
    secret = os.environ["PARL_CLUSTER_SECRET"]
    env = dict(os.environ, HOME=home, PARL_CLUSTER_SECRET=secret)
    array = np.ones(BIG, np.uint8)
    with other_namespace() as (inside, here, there):
        sink = subprocess.Popen(
            [*inside, sys.executable, "-c", _SINK, there, str(BIG)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        with socket.socket() as probe:
            probe.bind((here, 0))
            master = probe.getsockname()[1]
        _xparl(env, "start", "--port", str(master), "--host", here, "--cpu_num", "0")
        try:
            agent_env = dict(env, HOME=os.path.join(home, "agent"))
            subprocess.run(
                [*inside, sys.executable, "-m", "parl.cluster.cli", "connect"]
                + ["--address", f"{here}:{master}", "--host", there, "--cpu_num", "1"],
                env=agent_env,
                check=True,
                capture_output=True,
            )
            parl.connect(f"{here}:{master}")
            far = Echo()
            with socket.create_connection((there, port)) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

                def raw() -> None:
                    sock.sendall(array)
                    sock.recv(1)

                got = timings({"raw": raw, "far": lambda: far.size(array)}, 1, rounds, warmup=2)
            parl.close_actor(far)
            parl.disconnect()
        finally:
            _xparl(env, "stop", "--port", str(master))
            sink.kill()
            sink.wait()
            shutil.rmtree(home, ignore_errors=True)
    table = report.table(
        f"128 MiB to another network namespace (veth pair), medians of {rounds}",
        ["", "GB/s", "/ plain socket"],
        [42, 8, 14],
    )
    for name, label in (("raw", "plain socket, sendall"), ("far", "cluster actor, one call")):
        table.row(label, f"{BIG / got[name] / 1e9:.2f}", f"{got['raw'] / got[name]:.2f}x")


def _idle_cluster(home: str) -> tuple[int, int]:
    """(processes, total RSS in bytes) of the cluster's daemons and their children."""
    folder = os.path.join(home, ".parl", "clusters")
    found: list[psutil.Process] = []
    for name in os.listdir(folder):
        pid = int(name.rsplit("-", 1)[1].split(".")[0])
        daemon = psutil.Process(pid)
        found += [daemon, *daemon.children(recursive=True)]
    return len(found), sum(p.memory_info().rss for p in found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--veth_only", action="store_true", help="only 128 MiB to another network namespace"
    )
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_cluster")
    home = tempfile.mkdtemp(prefix="parl-bench-home-")
    secret = secrets.token_hex(32)
    env = dict(os.environ, HOME=home, PARL_CLUSTER_SECRET=secret)
    os.environ["PARL_CLUSTER_SECRET"] = secret
    if args.veth_only:
        shutil.rmtree(home, ignore_errors=True)
        veth_rows(report, args.rounds)
        report.write(args.record)
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.perf_counter()
    _xparl(env, "start", "--port", str(port), "--cpu_num", "2")
    started = time.perf_counter() - start
    idle = _idle_cluster(home)
    try:
        with (
            mp_echo() as mp_call,
            ping(socket.AF_INET) as tcp_ping,
            ping(socket.AF_UNIX) as unix_ping,
        ):
            parl.connect(linger=5)
            local = Echo()
            parl.connect(f"127.0.0.1:{port}")
            tcp = Echo()
            got = timings(
                {
                    "mp": mp_call,
                    "local": lambda: local.noop(1),
                    "tcp": lambda: tcp.noop(1),
                    "tcp_ping": tcp_ping,
                    "unix_ping": unix_ping,
                },
                args.calls,
                args.rounds,
            )
            parl.close_actor(tcp)
            pair = [AsyncEcho(), AsyncEcho()]

            def futures() -> None:
                pending = [pair[i % 2].noop(i) for i in range(args.calls)]
                for future in pending:
                    future.get()

            futures()  # warm-up
            batch = statistics.median(_seconds(futures) for _ in range(args.rounds))
            for actor in pair:
                parl.close_actor(actor)
            tcp = Echo()
            array = np.ones(BIG, np.uint8)
            with raw_echo() as raw_call:
                big = timings({"raw": raw_call, "tcp": lambda: tcp.echo(array)}, 1, args.rounds)
            parl.close_actor(local)
            parl.close_actor(tcp)
            parl.disconnect()
    finally:
        _xparl(env, "stop", "--port", str(port))
        shutil.rmtree(home, ignore_errors=True)
    baseline, local_s, tcp_s = got["mp"], got["local"], got["tcp"]
    cluster = report.table("The cluster itself", ["", "figure"], [42, 40])
    cluster.row("`xparl start` returns", f"{started:.2f} s")
    cluster.row(
        "idle cluster (master + host agent, 2 slots)",
        f"{idle[0]} processes, {idle[1] / 2**20:.0f} MiB resident",
    )
    calls = report.table(
        f"Round trip of a small call, medians of {args.rounds}",
        ["", "µs", "/ multiprocessing.connection"],
        [42, 8, 28],
    )
    for label, seconds in (
        ("`multiprocessing.connection` over loopback TCP", baseline),
        ("parl local carrier (Unix socket)", local_s),
        ("parl cluster carrier (TCP, loopback)", tcp_s),
        ("plain socket ping-pong, Unix socket", got["unix_ping"]),
        ("plain socket ping-pong, loopback TCP", got["tcp_ping"]),
    ):
        calls.row(label, f"{seconds * 1e6:.1f}", f"{seconds / baseline:.2f}x")
    calls.row("cluster / local carrier", "", f"{tcp_s / local_s:.2f}x")
    calls.row(
        "TCP minus Unix socket: plain sockets / parl",
        f"{(got['tcp_ping'] - got['unix_ping']) * 1e6:.1f} / {(tcp_s - local_s) * 1e6:.1f}",
    )
    rate = args.calls / batch
    futures_table = report.table("Calls per second", ["", "calls/s", "ratio"], [42, 8, 8])
    futures_table.row("`multiprocessing.connection`, sequential", f"{1 / baseline:,.0f}", "1.00x")
    futures_table.row("cluster, futures on 2 actors", f"{rate:,.0f}", f"{rate * baseline:.2f}x")
    arrays = report.table("128 MiB to a process and back", ["", "GB/s", "ratio"], [42, 8, 8])
    for name, label in (("raw", "plain socket, sendall/recv_into"), ("tcp", "cluster actor")):
        arrays.row(label, f"{2 * BIG / big[name] / 1e9:.2f}", f"{big['raw'] / big[name]:.2f}x")
    veth_rows(report, args.rounds)
    report.write(args.record)


if __name__ == "__main__":
    main()
