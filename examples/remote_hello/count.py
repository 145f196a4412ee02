"""Hello world of @parl.remote_class: five CPU-bound counters, serial and then as actors.

    python examples/remote_hello/count.py
    python examples/remote_hello/count.py --xparl_addr localhost:8010   # actors on a cluster

Each actor is a worker process; with ``wait=False`` the five calls run at the same time, so the
remote run takes about (serial time) / (number of cores).
"""

from __future__ import annotations

import argparse
import os
import time

import parl
from parl.utils.train_flags import example_parser, positive_int

N = 20_000_000
ACTORS = 5


def count(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


@parl.remote_class(wait=False)
class Counter:
    def count(self, n: int) -> int:
        return count(n)


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    parser.add_argument(
        "--xparl_addr",
        default=None,
        metavar="HOST:PORT",
        help="address (host:port) of an xparl cluster to run the actors on (default: none, they "
        "run on this machine)",
    )
    parser.add_argument("--actor_num", type=positive_int, default=ACTORS, help="counters to run")
    parser.add_argument("--n", type=positive_int, default=N, help="each counter counts to this")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = make_parser().parse_args(argv)
    if args.xparl_addr:
        parl.connect(args.xparl_addr)
    n, actors = args.n, args.actor_num
    start = time.perf_counter()
    serial = [count(n) for _ in range(actors)]
    serial_s = time.perf_counter() - start

    counters = [Counter() for _ in range(actors)]
    start = time.perf_counter()
    futures = [c.count(n) for c in counters]
    remote = [f.get() for f in futures]
    remote_s = time.perf_counter() - start

    assert remote == serial
    print(
        f"{actors} x count to {n:.0e}: serial {serial_s:.2f} s, "
        f"remote {remote_s:.2f} s on {os.cpu_count()} cores ({speedup(serial_s, remote_s)})"
    )


def speedup(serial_s: float, remote_s: float) -> str:
    """``"N.NNx faster"`` when the actors took less time than the serial run, else
    ``"N.NNx slower"``: the ratio is always 1 or more, so it reads the right way round."""
    if remote_s <= serial_s:
        return f"{serial_s / max(remote_s, 1e-9):.2f}x faster"
    return f"{remote_s / max(serial_s, 1e-9):.2f}x slower"


if __name__ == "__main__":
    main()
