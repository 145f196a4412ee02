"""The Ray carrier against Ray used directly, with this project's own carriers beside them: a
small call's round trip and a 128 MiB numpy array to an actor and back.

    python scripts/bench_ray.py                # needs pip install 'parl-torch[ray]'
    python scripts/bench_ray.py --calls 500 --rounds 7

In one run: the local carrier, the TCP cluster (a throwaway ``xparl start`` on loopback, as
``bench_cluster.py`` starts it), the Ray carrier (``parl.connect("ray")``) and the baseline, a
plain ``@ray.remote`` actor with the same methods, on one local Ray
(``ray.init(num_cpus=4, include_dashboard=False)``). Rounds are interleaved and the medians
kept, so that the machine's load hits every variant alike. Ratios: this Ray carrier against
plain Ray (a small call: time, lower is better, target at most 1.2; 128 MiB: throughput,
higher is better, target at least 0.9).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Callable

import numpy as np
import ray
from bench_cluster import _xparl, timings
from benchrecord import Report, add_record_flag

import parl

BIG = 128 << 20


@parl.remote_class
class Echo:
    def noop(self, x: int) -> int:
        return x

    def echo(self, a: np.ndarray) -> np.ndarray:
        return a


@ray.remote
class PlainEcho:
    def noop(self, x: int) -> int:
        return x

    def echo(self, a: np.ndarray) -> np.ndarray:
        return a


def _variants(port: int) -> tuple[dict[str, Echo], object]:
    """One actor per carrier (the last ``parl.connect`` is Ray's) and a plain Ray actor."""
    parl.connect(linger=5)
    local = Echo()
    parl.connect(f"127.0.0.1:{port}")
    tcp = Echo()
    parl.connect("ray")
    backend = Echo()
    plain = PlainEcho.remote()
    ray.get(plain.noop.remote(0))
    return {"local": local, "tcp": tcp, "ray": backend}, plain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="small calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_ray")
    home = tempfile.mkdtemp(prefix="parl-bench-home-")
    secret = secrets.token_hex(32)
    env = dict(os.environ, HOME=home, PARL_CLUSTER_SECRET=secret)
    os.environ["PARL_CLUSTER_SECRET"] = secret
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _xparl(env, "start", "--port", str(port), "--cpu_num", "2")
    ray.init(num_cpus=4, include_dashboard=False, logging_level="warning")
    try:
        actors, plain = _variants(port)
        small: dict[str, Callable[[], object]] = {
            name: (lambda a=actor: a.noop(1)) for name, actor in actors.items()
        }
        small["plain ray"] = lambda: ray.get(plain.noop.remote(1))
        got = timings(small, args.calls, args.rounds)
        array = np.ones(BIG, np.uint8)
        large: dict[str, Callable[[], object]] = {
            name: (lambda a=actor: a.echo(array)) for name, actor in actors.items()
        }
        large["plain ray"] = lambda: ray.get(plain.echo.remote(array))
        big = timings(large, 1, args.rounds)
        for actor in actors.values():
            parl.close_actor(actor)
        parl.disconnect()
    finally:
        ray.shutdown()
        _xparl(env, "stop", "--port", str(port))
        shutil.rmtree(home, ignore_errors=True)
    labels = {
        "local": "parl local carrier",
        "tcp": "parl cluster carrier (TCP, loopback)",
        "ray": "parl Ray carrier",
        "plain ray": "plain `@ray.remote` actor",
    }
    small_table = report.table(
        f"Small call round trip, medians of {args.rounds}", ["", "µs", "/ plain Ray"], [40, 9, 12]
    )
    for name, label in labels.items():
        small_table.row(label, f"{got[name] * 1e6:.1f}", f"{got[name] / got['plain ray']:.2f}")
    large_table = report.table(
        f"128 MiB to an actor and back, medians of {args.rounds}",
        ["", "GB/s", "/ plain Ray"],
        [40, 9, 12],
    )
    for name, label in labels.items():
        rate = 2 * BIG / big[name] / 1e9
        large_table.row(label, f"{rate:.2f}", f"{big['plain ray'] / big[name]:.2f}")
    report.write(args.record)


if __name__ == "__main__":
    main()
