"""Benchmark of the local runtime against baselines measured in the same run.

    python scripts/bench_remote.py            # full run, about a minute on 2 cores
    python scripts/bench_remote.py --quick    # fewer repetitions
    python scripts/bench_remote.py --record docs/results/bench/bench_remote.json

Baselines: a ``multiprocessing.Pipe`` round trip to a child process (the floor for any call
between two processes) and ``np.copyto`` of 128 MiB (the floor for moving an array by copy).
Every figure is printed with its ratio to the matching baseline.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import multiprocessing as mp
import os
import statistics
import time

import numpy as np
import psutil
from benchrecord import Report, Table, add_record_flag

import parl
import parl.shm

MiB = 1 << 20
BIG = 128 * MiB
COUNT_TO = 20_000_000


def count(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


@parl.remote_class
class Echo:
    def __init__(self) -> None:
        self.buf = np.ones(BIG // 4, np.float32)

    def noop(self) -> None:
        return None

    def rollout(self) -> np.ndarray:
        return self.buf

    def keep(self, nbytes: int) -> None:
        self.kept_array = np.ones(nbytes // 4, np.float32)

    def kept(self) -> np.ndarray:
        return self.kept_array

    def total(self, a: np.ndarray) -> float:
        return float(a.sum())

    def first(self, a: np.ndarray) -> float:
        return float(a.flat[0])

    def echo(self, value: object) -> object:
        return value

    def pid(self) -> int:
        return os.getpid()

    def profile_start(self) -> None:
        """Count the worker's function calls from here on, with its reader's spin off."""
        import cProfile

        import parl.wire.dispatch as dispatch

        self.spin, dispatch.SPIN_S = dispatch.SPIN_S, 0.0
        self.profile = cProfile.Profile(builtins=True)
        self.profile.enable()

    def profile_stop(self) -> int:
        import pstats

        import parl.wire.dispatch as dispatch

        self.profile.disable()
        dispatch.SPIN_S = self.spin
        return pstats.Stats(self.profile).total_calls  # type: ignore[attr-defined]


GIB = 1 << 30


@parl.remote_class
class Huge:
    def __init__(self) -> None:
        self.buf = np.ones(GIB // 4, np.float32)

    def get(self) -> np.ndarray:
        return self.buf


@parl.remote_class(wait=False)
class Async:
    def add(self, a: int, b: int) -> int:
        return a + b

    def count(self, n: int) -> int:
        return count(n)


@parl.remote_class
class Idle:
    def pid(self) -> int:
        return os.getpid()


def _pipe_child(conn) -> None:
    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(msg)


def pipe_round_trip_us(n: int) -> float:
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=_pipe_child, args=(child,))
    proc.start()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        parent.send(("noop", (), {}))
        parent.recv()
        times.append(time.perf_counter() - t)
    parent.send(None)
    proc.join()
    return statistics.median(times) * 1e6


def copy_gbps(reps: int) -> float:
    a = np.ones(BIG // 4, np.float32)
    b = np.empty_like(a)
    np.copyto(b, a)
    best = min(_timed(lambda: np.copyto(b, a)) for _ in range(reps))
    return BIG / best / 1e9


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(
                p.cmdline()
            ):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _caller_cost(call, n: int) -> tuple[float, float]:
    """Function calls (cProfile, builtins included) and CPU seconds of the caller per call."""
    import cProfile
    import pstats

    profile = cProfile.Profile(builtins=True)
    profile.enable()
    for _ in range(n):
        call()
    profile.disable()
    calls = pstats.Stats(profile).total_calls / n  # type: ignore[attr-defined]
    start = time.process_time()
    for _ in range(n):
        call()
    return calls, (time.process_time() - start) / n


def bench_call_cost(table: Table, n_calls: int) -> None:
    """Machine-independent counts for the call path, with the reader's spin off on both sides
    of the comparison: the caller's function calls and CPU time per round trip."""
    import parl.wire.caller as caller

    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=_pipe_child, args=(child,))
    proc.start()

    def pipe_call() -> None:
        parent.send(("noop", (), {}))
        parent.recv()

    pipe_calls, pipe_cpu = _caller_cost(pipe_call, n_calls)
    parent.send(None)
    proc.join()
    spin, caller.SPIN_S = caller.SPIN_S, 0.0
    try:
        echo = Echo()
        echo.noop()
        calls, cpu = _caller_cost(echo.noop, n_calls)
        echo.profile_start()  # the worker's own count: every request it serves until the stop
        for _ in range(n_calls):
            echo.noop()
        worker_calls = echo.profile_stop() / (n_calls + 1)
        parl.close_actor(echo)
    finally:
        caller.SPIN_S = spin
    table.row("baseline: mp.Pipe caller, calls per round trip", f"{pipe_calls:.0f}", "1.00x")
    table.row(
        "trivial call, caller's function calls (spin off)",
        f"{calls:.0f}",
        f"{calls / pipe_calls:.2f}x pipe",
        "<= 1.2x",
    )
    table.row(
        "trivial call, worker's function calls (spin off)",
        f"{worker_calls:.0f}",
        f"{worker_calls / pipe_calls:.2f}x pipe",
        "<= 1.2x",
    )
    table.row(
        "trivial call, caller CPU per call (spin off)",
        f"{cpu * 1e6:.1f} us",
        f"{cpu / pipe_cpu:.2f}x pipe ({pipe_cpu * 1e6:.1f} us)",
        "<= 1.5x",
    )


@dataclasses.dataclass
class Point:  # a class of this script: it travels by value, defined once per actor
    x: float
    y: float
    name: str
    tags: list


def bench_script_class(table: Table, n_calls: int) -> None:
    """An instance of a script class costs about what a dict of the same size does."""
    echo = Echo()
    as_dict = {"x": 1.0, "y": 2.0, "name": "p", "tags": [1, 2]}
    point = Point(1.0, 2.0, "p", [1, 2])
    for value in (as_dict, point):
        echo.echo(value)
    dict_s = statistics.median(_timed(lambda: echo.echo(as_dict)) for _ in range(n_calls))
    point_s = statistics.median(_timed(lambda: echo.echo(point)) for _ in range(n_calls))
    assert type(echo.echo(point)) is Point
    table.row(
        "script dataclass to an actor and back, median",
        f"{point_s * 1e6:.1f} us",
        f"{point_s / dict_s:.2f}x a dict ({dict_s * 1e6:.1f} us)",
    )
    parl.close_actor(echo)


def bench_calls(table: Table, pipe_us: float, n_calls: int) -> None:
    echo = Echo()
    for _ in range(200):
        echo.noop()
    call_us = statistics.median(_timed(echo.noop) for _ in range(n_calls)) * 1e6
    table.row(
        "trivial call round trip, median",
        f"{call_us:.1f} us",
        f"{call_us / pipe_us:.2f}x pipe",
        "<= 0.8x",
    )

    actors = [Async(), Async()]
    for actor in actors:
        actor.add(0, 0).get()
    start = time.perf_counter()
    futures = [actors[i % 2].add(i, 1) for i in range(n_calls * 2)]
    results = [f.get() for f in futures]
    rate = len(futures) / (time.perf_counter() - start)
    assert results[-1] == n_calls * 2
    table.row(
        "futures, 2 actors, calls/s",
        f"{rate:,.0f}",
        f"{rate * pipe_us / 1e6:.2f}x pipe calls/s",
        ">= 3x",
    )


def bench_mid_arrays(table: Table, reps: int) -> None:
    """Rollout-sized arrays: returned by an actor and passed to it, against
    ``np.copyto`` of the same size (cache-warm, like the transfer's own copy)."""
    echo = Echo()
    for size, target in ((MiB, ">= 0.5x"), (16 * MiB, ">= 0.8x")):
        n = reps * (60 if size == MiB else 6)
        a = np.ones(size // 4, np.float32)
        b = np.empty_like(a)
        np.copyto(b, a)
        copy_s = statistics.median(_timed(functools.partial(np.copyto, b, a)) for _ in range(n))
        echo.keep(size)
        for _ in range(5):
            echo.kept()
            echo.first(a)
        get_s = statistics.median(_timed(echo.kept) for _ in range(n))
        put_s = statistics.median(_timed(functools.partial(echo.first, a)) for _ in range(n))
        trivial_s = statistics.median(_timed(echo.noop) for _ in range(n))
        label = f"{size // MiB} MiB"
        table.row(f"baseline: np.copyto {label}", f"{copy_s * 1e6:.0f} us", "1.00x")
        # no call that copies can beat one trivial round trip plus the copy
        floor = copy_s / (copy_s + trivial_s)
        table.row(
            f"  ceiling: copy / (trivial round trip {trivial_s * 1e6:.0f} us + copy)",
            f"{(copy_s + trivial_s) * 1e6:.0f} us",
            f"{floor:.2f}x copy",
        )
        table.row(
            f"actor returns a {label} float32 array, median",
            f"{get_s * 1e6:.0f} us",
            f"{copy_s / get_s:.2f}x copy",
            target,
        )
        table.row(
            f"{label} float32 array as an argument, median",
            f"{put_s * 1e6:.0f} us",
            f"{copy_s / put_s:.2f}x copy",
            target,
        )
    parl.close_actor(echo)


def bench_arrays(table: Table, copy: float, reps: int) -> None:
    echo = Echo()
    best = float("inf")
    out = echo.rollout()
    for _ in range(reps):
        start = time.perf_counter()
        out = echo.rollout()  # the previous view is dropped here and its block reused
        best = min(best, time.perf_counter() - start)
    assert out.nbytes == BIG and parl.shm.memory_kind(out) == "value"
    table.row(
        "actor returns a 128 MiB float32 array",
        f"{BIG / best / 1e9:.2f} GB/s",
        f"{BIG / best / 1e9 / copy:.2f}x copy",
        ">= 5 GB/s",
    )
    local = np.ones(BIG // 4, np.float32)
    local_sum = min(_timed(local.sum) for _ in range(reps))
    read = min(_timed(lambda: echo.rollout().sum()) for _ in range(reps))
    table.row(
        "  the same, then the caller sums all of it",
        f"{BIG / read / 1e9:.2f} GB/s",
        f"{local_sum / read:.2f}x local np.sum",
    )
    # a received value is copy-on-write: the first write to each page copies that page
    firsts = []
    for _ in range(reps):
        out = echo.rollout()
        firsts.append(_timed(functools.partial(np.add, out, 1, out=out)))
    local_add = min(_timed(functools.partial(np.add, local, 1, out=local)) for _ in range(reps))
    table.row(
        "  first write to all of a received 128 MiB array",
        f"{min(firsts) * 1e3:.1f} ms",
        f"{BIG / min(firsts) / 1e9 / copy:.2f}x copy",
    )
    table.row(
        "  (baseline: the same write to a local array)",
        f"{local_add * 1e3:.1f} ms",
        f"{BIG / local_add / 1e9 / copy:.2f}x copy",
    )
    fresh = min(_timed(local.copy) for _ in range(reps))
    table.row(
        "  (baseline: a copy into fresh memory, as on receive)",
        f"{fresh * 1e3:.1f} ms",
        f"{fresh / min(firsts):.2f}x the first write",
    )
    del out, local
    parl.close_actor(echo)

    fresh_gib = _timed(lambda: np.copyto(np.empty(GIB, np.uint8), 1))
    table.row(
        "  (baseline: filling 1 GiB of fresh memory)",
        f"{GIB / fresh_gib / 1e9:.2f} GB/s",
        f"{GIB / fresh_gib / 1e9 / copy:.2f}x copy",
    )
    huge = Huge()
    for label in ("first", "second", "third"):
        took = _timed(lambda: huge.get().nbytes)
        table.row(
            f"actor returns a 1 GiB array, {label} call",
            f"{GIB / took / 1e9:.2f} GB/s",
            f"{GIB / took / 1e9 / copy:.2f}x copy",
        )
    parl.close_actor(huge)
    echo = Echo()

    arg = np.ones(BIG // 4, np.float32)
    echo.total(arg)
    best = min(_timed(lambda: echo.total(arg)) for _ in range(reps))
    table.row(
        "128 MiB array as an argument, actor returns its sum",
        f"{BIG / best / 1e9:.2f} GB/s",
        f"{BIG / best / 1e9 / copy:.2f}x copy",
        ">= 5 GB/s",
    )

    wide = np.ones((BIG // 8, 4), np.float32)
    strided = wide[:, :2]  # 128 MiB in every other pair of columns: numpy pickles it in band
    dest = np.empty(strided.shape, np.float32)
    np.copyto(dest, strided)
    local_strided = min(_timed(functools.partial(np.copyto, dest, strided)) for _ in range(reps))
    echo.first(strided)
    best = min(_timed(functools.partial(echo.first, strided)) for _ in range(reps))
    table.row(
        "128 MiB strided array (a[:, :2]) as an argument",
        f"{BIG / best / 1e9:.2f} GB/s",
        f"{local_strided / best:.2f}x local strided np.copyto",
    )
    wide = strided = dest = None

    local_sum = min(_timed(lambda: arg.sum()) for _ in range(reps))
    handle = parl.shm.copy(arg)
    echo.total(handle)
    best = min(_timed(lambda: echo.total(handle)) for _ in range(reps))
    table.row(
        "same through a shared array handle (sum: memory bound)",
        f"{BIG / best / 1e9:.2f} GB/s",
        f"{local_sum / best:.2f}x local np.sum",
    )
    echo.first(handle)
    best = statistics.median(_timed(lambda: echo.first(handle)) for _ in range(reps * 20))
    table.row(
        "shared array handle, transfer only (actor reads a[0])",
        f"{BIG / best / 1e9:,.0f} GB/s",
        f"{BIG / best / 1e9 / copy:.0f}x copy",
        ">= 50 GB/s",
    )


def bench_parallel(table: Table, reps: int) -> None:
    counters = [Async() for _ in range(5)]
    for counter in counters:
        counter.add(0, 0).get()
    pool = mp.get_context("fork").Pool(5)
    pool.map(count, [1] * 5, chunksize=1)
    serials, pooled, remotes = [], [], []
    for _ in range(reps):  # interleaved, so that all three see the same machine
        serials.append(_timed(lambda: [count(COUNT_TO) for _ in range(5)]))
        pooled.append(_timed(lambda: pool.map(count, [COUNT_TO] * 5, chunksize=1)))
        remotes.append(_timed(lambda: [f.get() for f in [c.count(COUNT_TO) for c in counters]]))
    pool.close()
    pool.join()
    serial, pool_s, remote = map(statistics.median, (serials, pooled, remotes))
    cores = min(os.cpu_count() or 1, 5)
    table.row(
        "baseline: 5 x (count to 2e7) in a multiprocessing.Pool",
        f"{pool_s:.2f} s",
        f"{serial / pool_s:.2f}x serial {serial:.2f} s",
    )
    table.row(
        "5 x (count to 2e7) on 5 actors",
        f"{remote:.2f} s",
        f"{serial / remote:.2f}x serial, {pool_s / remote:.2f}x pool",
        f"<= {serial / cores * 1.03:.2f} s",
    )


def bench_creation(table: Table) -> None:
    parl.disconnect()  # no worker pool running: the first creation starts it
    start = time.perf_counter()
    cold = [Idle() for _ in range(5)]
    cold_s = time.perf_counter() - start
    table.row("create 5 actors (cold: starts the fork server too)", f"{cold_s * 1e3:.1f} ms")
    for _ in range(2):
        warm_s = _timed(lambda: [Idle() for _ in range(5)])
    table.row("create 5 actors (worker pool running)", f"{warm_s * 1e3:.1f} ms", "", "<= 100 ms")
    proc = psutil.Process(cold[0].pid())
    mem = proc.memory_full_info()
    table.row(
        "idle actor process, resident memory (RSS)",
        f"{mem.rss / MiB:.1f} MiB",
        f"unique {mem.uss / MiB:.1f} MiB",
        "<= 60 MiB",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    add_record_flag(parser)
    args = parser.parse_args()
    n_calls = 2000 if args.quick else 10000
    reps = 3 if args.quick else 7

    report = Report("bench_remote")
    table = report.table(
        "Local actors", ["workload", "figure", "vs baseline (same run)", "aim"], [58, 14, 24, 12]
    )
    calibration = min(_timed(lambda: sum(range(1000))) for _ in range(2000))
    table.row(
        "calibration: sum(range(1000)) (how fast this CPU runs Python)",
        f"{calibration * 1e6:.1f} us",
    )
    pipe_us = pipe_round_trip_us(n_calls)
    table.row("baseline: multiprocessing.Pipe round trip, median", f"{pipe_us:.1f} us", "1.00x")
    copy = copy_gbps(reps)
    table.row("baseline: np.copyto 128 MiB", f"{copy:.2f} GB/s", "1.00x")
    bench_call_cost(table, min(n_calls, 3000))
    bench_calls(table, pipe_us, n_calls)
    bench_script_class(table, min(n_calls, 3000))
    bench_mid_arrays(table, reps)
    bench_arrays(table, copy, reps)
    bench_parallel(table, 1 if args.quick else 3)
    bench_creation(table)
    gc.collect()
    start = time.monotonic()
    while children() and time.monotonic() < start + 10:
        time.sleep(0.01)
    table.row(
        "processes running when no actor exists",
        str(len(children())),
        f"{time.monotonic() - start:.1f} s after the last actor",
        "0",
    )
    report.write(args.record)


if __name__ == "__main__":
    main()
