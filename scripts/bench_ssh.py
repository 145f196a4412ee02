"""The SSH launcher's figures: launch time of 3 hosts (cold and warm cache), a small call's
round trip on SSH-launched hosts against one on `xparl connect` hosts, and an array through the
SSH tunnel against a raw paramiko channel moving the same bytes, all in the same run.

    python scripts/bench_ssh.py                 # needs /usr/sbin/sshd (openssh-server)
    python scripts/bench_ssh.py --launches 5 --calls 2000

The hosts are three real sshd processes on 127.0.0.2-127.0.0.4 (the test suite's lab,
tests/runtime/sshd.py), stopped at the end. A *cold* launch deploys into an empty cache (this
package and the project folder uploaded by SFTP); a *warm* one finds both in the cache.
Launch times are measured inside one process (paramiko already imported), medians shown.
The tunnel figure: an array to an actor on a ``tunnel=yes`` host and back, against the same
bytes sent through a ``direct-tcpip`` channel of a paramiko connection to an echo server on the
host and back (``sendall``, then ``recv`` into a buffer).
"""

from __future__ import annotations

import argparse
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
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
from benchrecord import Report, add_record_flag  # noqa: E402

import parl  # noqa: E402
from parl.remote import context  # noqa: E402
from parl.ssh.client import SSHConnection  # noqa: E402
from tests.runtime import sshd  # noqa: E402


@parl.remote_class
class Echo:
    def noop(self, x: int) -> int:
        return x

    def echo(self, a: np.ndarray) -> np.ndarray:
        return a


def _echo_server(address: tuple[str, int], size: int, ready: Any) -> None:
    with socket.create_server(address) as listener:
        ready.set()
        conn, _ = listener.accept()
    with conn:
        buf = memoryview(bytearray(size))
        while True:
            have = 0
            while have < size:
                got = conn.recv_into(buf[have:])
                if not got:
                    return
                have += got
            conn.sendall(buf)


def raw_channel(lab: sshd.SSHLab, size: int) -> tuple[object, object]:
    """A call moving ``size`` bytes to an echo server through a paramiko channel and back."""
    address = ("127.0.0.2", sshd._free_port("127.0.0.2"))
    spawn = mp.get_context("spawn")
    ready = spawn.Event()
    server = spawn.Process(target=_echo_server, args=(address, size, ready), daemon=True)
    server.start()  # a process of its own, as the actor is
    ready.wait(30)
    conn = SSHConnection(lab.spec(0), lab.options())
    channel = conn.transport.open_channel("direct-tcpip", address, ("127.0.0.1", 0))
    data = np.ones(size, np.uint8).tobytes()
    back = bytearray(size)

    def call() -> None:
        for start in range(0, size, 1 << 20):  # paramiko's sendall re-slices what it is given
            channel.sendall(data[start : start + (1 << 20)])
        have = 0
        while have < size:
            chunk = channel.recv(min(1 << 20, size - have))
            back[have : have + len(chunk)] = chunk
            have += len(chunk)

    def close() -> None:
        channel.close()
        conn.close()
        server.join(10)

    return call, close


def launch_times(lab: sshd.SSHLab, folder: str, launches: int) -> tuple[list[float], list[float]]:
    """Seconds of ``parl.connect(hosts=...)`` with an empty cache, and right after (warm)."""
    cold, warm = [], []
    for run in range(launches):
        hosts = [
            lab.spec(i, cpus=1, python=sys.executable, workdir=f"{folder}/cache-{run}-h{i}")
            for i in range(3)
        ]
        for times, expect_upload in ((cold, True), (warm, False)):
            start = time.perf_counter()
            parl.connect(hosts=hosts, ssh=lab.options())
            times.append(time.perf_counter() - start)
            uploaded = sum(r.uploaded for r in context.current().carrier.reports)
            assert (uploaded > 0) == expect_upload, uploaded
            parl.disconnect()
    return cold, warm


def round_trips(calls: dict[str, object], n: int, rounds: int) -> dict[str, float]:
    """Median seconds per call; the rounds of each are interleaved."""
    for call in calls.values():
        for _ in range(min(n, 200)):
            call()  # type: ignore[operator]
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(n):
                call()  # type: ignore[operator]
            times[name].append((time.perf_counter() - start) / n)
    return {name: statistics.median(v) for name, v in times.items()}


def xparl(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "parl.cluster.cli", *args],
        env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--launches", type=int, default=3, help="cold+warm launch pairs")
    parser.add_argument("--calls", type=int, default=2000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tunnel-mib", type=int, default=32, help="array size through the tunnel")
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_ssh")
    import paramiko  # noqa: F401 - imported before the clock starts

    folder = tempfile.mkdtemp(prefix="parl-bench-ssh-")
    home = os.path.join(folder, "home")
    secret = secrets.token_hex(32)
    env = dict(os.environ, HOME=home, PARL_CLUSTER_SECRET=secret)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lab = sshd.start(os.path.join(folder, "lab"))
    try:
        cold, warm = launch_times(lab, folder, args.launches)
        xparl(env, "start", "--port", str(port), "--cpu_num", "0")
        try:
            xparl(env, "connect", "--address", f"127.0.0.1:{port}", "--cpu_num", "1")
            os.environ["PARL_CLUSTER_SECRET"] = secret
            parl.connect(f"127.0.0.1:{port}")
            on_xparl = Echo()
            hosts = [lab.spec(0, cpus=1, python=sys.executable, workdir=f"{folder}/cache-rt")]
            parl.connect(hosts=hosts, ssh=lab.options())
            on_ssh = Echo()
            got = round_trips(
                {"xparl": lambda: on_xparl.noop(1), "ssh": lambda: on_ssh.noop(1)},
                args.calls,
                args.rounds,
            )
            parl.close_actor(on_xparl)
            parl.close_actor(on_ssh)
            size = args.tunnel_mib << 20
            tunnelled = [
                lab.spec(1, cpus=1, python=sys.executable, workdir=f"{folder}/cache-t", tunnel=True)
            ]
            parl.connect(hosts=tunnelled, ssh=lab.options())
            through = Echo()
            array = np.ones(size, np.uint8)
            raw_call, raw_close = raw_channel(lab, size)
            try:
                big = round_trips({"raw": raw_call, "tunnel": lambda: through.echo(array)}, 1, 5)
            finally:
                raw_close()
            parl.close_actor(through)
            parl.disconnect()
        finally:
            xparl(env, "stop", "--port", str(port))
    finally:
        sshd.stop(lab)
        shutil.rmtree(folder, ignore_errors=True)
    launches = report.table(
        f"Launch of 3 hosts over SSH, {args.launches} launches",
        ["", "median s", "min", "max"],
        [44, 9, 7, 7],
    )
    for label, times in (
        ("cold (empty cache: uploads)", cold),
        ("warm (cache hit: no upload)", warm),
    ):
        launches.row(
            label, f"{statistics.median(times):.2f}", f"{min(times):.2f}", f"{max(times):.2f}"
        )
    calls = report.table("Round trip of a small call", ["", "µs", "ratio"], [44, 9, 7])
    calls.row("actor on an `xparl connect` host", f"{got['xparl'] * 1e6:.1f}", "1.00x")
    ratio = got["ssh"] / got["xparl"]
    calls.row("actor on an SSH-launched host", f"{got['ssh'] * 1e6:.1f}", f"{ratio:.2f}x")
    tunnel = report.table(
        f"{args.tunnel_mib} MiB there and back through SSH", ["", "MB/s", "ratio"], [44, 9, 7]
    )
    for name, label in (
        ("raw", "raw paramiko channel (direct-tcpip)"),
        ("tunnel", "actor, `tunnel=yes`"),
    ):
        rate = 2 * size / big[name] / 1e6
        tunnel.row(label, f"{rate:.1f}", f"{big['raw'] / big[name]:.2f}x")
    report.write(args.record)


if __name__ == "__main__":
    main()
