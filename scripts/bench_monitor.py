"""The monitor's cost, local mode: this process serves the page for its actors.

    python scripts/bench_monitor.py            # 50 actors polled once a second, 200 drawn
    python scripts/bench_monitor.py --quick

Prints the CPU the serving process spends per second of one viewer polling ``/api/status``
once a second with 50 actors (target: under 2% of one core), the size of one answer, and how
long headless Chromium takes to fetch and draw 200 actors (target: under 1 s): its wall time
with 200 actors less its wall time with none.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchrecord import Report, add_record_flag

import parl


@parl.remote_class(wait=False)
class Idle:
    def hello(self) -> int:
        print("ready", flush=True)
        return 1


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def poll_cost(n_actors: int, seconds: int) -> tuple[float, int, float]:
    actors = [Idle() for _ in range(n_actors)]
    parl.get([a.hello() for a in actors])
    with parl.monitor() as mon:
        url = mon.url + "api/status"
        size = len(urllib.request.urlopen(url).read())
        idle_start = cpu_s()
        time.sleep(seconds)  # the same time without a viewer: the sampler thread alone
        idle = (cpu_s() - idle_start) / seconds
        start, t0 = cpu_s(), time.monotonic()
        for i in range(seconds):
            urllib.request.urlopen(url).read()
            time.sleep(max(0.0, t0 + i + 1 - time.monotonic()))
        busy = (cpu_s() - start) / (time.monotonic() - t0)
    for actor in actors:
        parl.close_actor(actor)
    # the client's own urlopen runs in this process too: it is counted (an upper bound)
    return busy, size, idle


def cluster_cost(n_actors: int, seconds: int) -> tuple[float, float]:
    """CPU of the master process (its host agents and this caller report to it every second)
    over ``seconds`` with one viewer polling once a second, and without the page at all."""
    import psutil

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from runtime import cluster as clusters  # the tests' throwaway loopback cluster

    os.environ["PARL_CLUSTER_SECRET"] = clusters.SECRET
    figures = []
    with tempfile.TemporaryDirectory() as home:
        for page in (clusters.free_port(), 0):
            cluster = clusters.start(
                os.path.join(home, str(page)), agent_slots=(n_actors,), monitor_port=page
            )
            try:
                parl.connect(cluster.address, linger=0, forward_output=False)
                actors = [Idle() for _ in range(n_actors)]
                parl.get([a.hello() for a in actors])
                master = psutil.Process(cluster.pids("master")[0])
                time.sleep(2.0)
                before, t0 = sum(master.cpu_times()[:2]), time.monotonic()
                for i in range(seconds):
                    if page:
                        urllib.request.urlopen(f"http://127.0.0.1:{page}/api/status").read()
                    time.sleep(max(0.0, t0 + i + 1 - time.monotonic()))
                figures.append((sum(master.cpu_times()[:2]) - before) / (time.monotonic() - t0))
                for actor in actors:
                    parl.close_actor(actor)
            finally:
                parl.disconnect()
                parl.connect(linger=0, forward_output=False)
                clusters.stop(cluster)
    return figures[0], figures[1]


def _dump(chromium: str, url: str) -> tuple[float, str]:
    t = time.perf_counter()
    done = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=500",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return time.perf_counter() - t, done.stdout


def render_s(n_actors: int, reps: int) -> tuple[float, float] | None:
    """Wall time of a headless Chromium that loads the page, fetches /api/status once and draws
    it (a virtual-time budget of 0.5 s: the first poll only, no refresh; its JavaScript clock
    is virtual there, so the page's own figure is not real time): with ``n_actors`` actors and
    with none, medians of ``reps`` runs. The difference is what the actors cost the page."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return None
    with parl.monitor() as mon:
        empty = statistics.median(_dump(chromium, mon.url)[0] for _ in range(reps))
    actors = [Idle() for _ in range(n_actors)]
    parl.get([a.hello() for a in actors])
    with parl.monitor() as mon:
        runs = [_dump(chromium, mon.url) for _ in range(reps)]
    for actor in actors:
        parl.close_actor(actor)
    rows = runs[-1][1].count('<tr class="actor"')
    assert rows == n_actors, f"{rows} actor rows drawn, expected {n_actors}"
    return statistics.median(r[0] for r in runs), empty


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_monitor")
    parl.connect(forward_output=False)
    t = time.perf_counter()
    sum(range(1000))
    calibration = (time.perf_counter() - t) * 1e6
    seconds = 10 if args.quick else 30
    busy, size, idle = poll_cost(50, seconds)
    report.note(f"Calibration (`sum(range(1000))`) {calibration:.1f} µs.")
    table = report.table(
        f"The monitor page, {seconds} s per row", ["workload", "figure", "aim"], [62, 14, 14]
    )
    table.row("local caller, 50 actors, no viewer (host sampler thread): CPU", f"{idle:.2%}")
    table.row("local caller, 50 actors, one viewer polling once a second", f"{busy:.2%}", "< 2%")
    table.row("one `/api/status` answer with 50 actors", f"{size / 1024:.1f} KiB")
    with_page, without = cluster_cost(50, seconds)
    table.row("cluster master, 50 actors, no page (slot reports only)", f"{without:.2%}")
    table.row(
        "cluster master, 50 actors, one viewer polling once a second", f"{with_page:.2%}", "< 2%"
    )
    timing = render_s(200, 3 if args.quick else 5)
    if timing is None:
        report.note("Headless Chromium rows skipped: chromium is not installed.")
    else:
        full, empty = timing
        table.row("headless Chromium: load and draw the page, no actors", f"{empty:.2f} s")
        table.row("the same with 200 actors", f"{full:.2f} s")
        table.row(
            "the 200 actors: fetch, draw and lay out (difference)",
            f"{(full - empty) * 1000:.0f} ms",
            "< 1000 ms",
        )
    report.write(args.record)


if __name__ == "__main__":
    main()
