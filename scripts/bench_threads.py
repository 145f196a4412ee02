"""Several actors training torch networks at once: one intra-op thread each against more.

    python scripts/bench_threads.py                 # 4 actors, 20 steps, 1 vs 2 threads
    python scripts/bench_threads.py --threads 1 2 4

Each actor trains its own MLP (``--width`` units, batch ``--batch``) for ``--steps`` steps; all
actors run at the same time. The figure is the wall time from the first call to the last reply
(the fork server preloads torch, so no import is timed). With more threads per worker than
cores per worker, the workers' thread pools fight over the cores.
"""

from __future__ import annotations

import argparse
import os
import time

from benchrecord import Report, add_record_flag

import parl


class _Trainer:
    def __init__(self, width: int, batch: int) -> None:
        import torch

        self.torch = torch
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 1),
        )
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        self.x = torch.randn(batch, 64)
        self.y = torch.randn(batch, 1)

    def train(self, steps: int) -> float:
        for _ in range(steps):
            loss = ((self.net(self.x) - self.y) ** 2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return loss.item()

    def threads(self) -> int:
        return self.torch.get_num_threads()


def measure(num_threads: int, actors: int, steps: int, width: int, batch: int) -> float:
    cls = parl.remote_class(wait=False, num_threads=num_threads)(_Trainer)
    trainers = [cls(width, batch) for _ in range(actors)]
    assert {t.threads().get() for t in trainers} == {num_threads}
    for t in trainers:  # warm up: first-call allocations are not what is measured
        t.train(1).get()
    start = time.perf_counter()
    for future in [t.train(steps) for t in trainers]:
        future.get()
    elapsed = time.perf_counter() - start
    for t in trainers:
        parl.close_actor(t)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=3)
    add_record_flag(parser)
    args = parser.parse_args()
    parl.connect(preload=["torch"])
    report = Report("bench_threads")
    table = report.table(
        f"{args.actors} actors x {args.steps} training steps of a {args.width}-wide MLP "
        f"(batch {args.batch}) on {os.cpu_count()} cores, {args.repeat} repeats",
        ["torch threads per actor", "best", "worst"],
        [24, 8, 8],
    )
    for num_threads in args.threads:
        times = [
            measure(num_threads, args.actors, args.steps, args.width, args.batch)
            for _ in range(args.repeat)
        ]
        best, worst = min(times), max(times)
        table.row(f"num_threads={num_threads}", f"{best:.2f} s", f"{worst:.2f} s")
    report.write(args.record)


if __name__ == "__main__":
    main()
