"""Hello world of @parl.remote_class: five CPU-bound counters, serial and then as actors.

    python examples/remote_hello/count.py

Each actor is a worker process; with ``wait=False`` the five calls run at the same time, so the
remote run takes about (serial time) / (number of cores).
"""

from __future__ import annotations

import os
import time

import parl

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


def main() -> None:
    start = time.perf_counter()
    serial = [count(N) for _ in range(ACTORS)]
    serial_s = time.perf_counter() - start

    counters = [Counter() for _ in range(ACTORS)]
    start = time.perf_counter()
    futures = [c.count(N) for c in counters]
    remote = [f.get() for f in futures]
    remote_s = time.perf_counter() - start

    assert remote == serial
    print(
        f"{ACTORS} x count to {N:.0e}: serial {serial_s:.2f} s, "
        f"remote {remote_s:.2f} s on {os.cpu_count()} cores "
        f"({serial_s / remote_s:.2f}x faster)"
    )


if __name__ == "__main__":
    main()
