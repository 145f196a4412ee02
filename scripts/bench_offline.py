"""CQL and IQL speed: ours against PARL 2.2.1's published algorithms run in this package, and
against the update's matrix-product ceiling on this CPU.

    nice -n 10 .venv/bin/python scripts/bench_offline.py                          # about 2 minutes
    nice -n 10 .venv/bin/python scripts/bench_offline.py --seconds 0.3 --rounds 1  # quick look

Both sides train the examples' models (``examples/CQL`` and ``examples/IQL``: 256-wide MLPs) on
HalfCheetah's sizes (observations 17, actions 6) with batches of 256, as the examples do. One
CQL step is one ``learn`` (its target update included, as in PARL's); one IQL step is one
update and one target update. PARL's ``cql.py`` and ``iql.py`` come from its published wheel
(``scripts/parl_wheel.py``). The two sides are timed alternately in short rounds on one torch
thread, so a change of load hits both.

The ceiling: every matrix product one update of ours runs (forward and backward, recorded with a
dispatch mode) is timed alone on the same thread, with the same shapes, in the same run; the sum
is the time an update could not go below by anything but faster matrix products. The figure is
our update rate over that ceiling's rate, with the FLOPs per update and the GFLOP/s the products
reach alone.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from benchrecord import Report, Table, add_record_flag
from parl_wheel import fetch_wheel, load_module
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]

from parl.algorithms import CQL, IQL  # noqa: E402

OBS, ACT, BATCH, HIDDEN = 17, 6, 256, 256
CQL_HYPER = {"gamma": 0.99, "tau": 0.005, "actor_lr": 1e-4, "critic_lr": 3e-4}
# the policy's own loss from the first update on (PARL's default starts with cloning for 40k)
CQL_HYPER |= {"policy_eval_start": 0}
IQL_HYPER = {"max_steps": 1_000_000, "lr": 3e-4, "tau": 0.7, "beta": 3.0, "discount": 0.99}
MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}


def example_model(example: str) -> Any:
    """A fresh ``MujocoModel`` of ``examples/<example>/mujoco_model.py``."""
    folder = str(ROOT / "examples" / example)
    sys.path.insert(0, folder)
    try:
        sys.modules.pop("mujoco_model", None)  # both examples have one
        from mujoco_model import MujocoModel

        return MujocoModel(OBS, ACT, HIDDEN)
    finally:
        sys.path.remove(folder)


def batches(count: int) -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(0)
    return [
        (
            torch.randn(BATCH, OBS, generator=gen),
            torch.rand(BATCH, ACT, generator=gen) * 2 - 1,
            torch.randn(BATCH, 1, generator=gen),
            torch.randn(BATCH, OBS, generator=gen),
            (torch.rand(BATCH, 1, generator=gen) < 0.05).float(),
        )
        for _ in range(count)
    ]


def cycling(update: Callable[[tuple[torch.Tensor, ...]], None]) -> Callable[[], None]:
    data, state = batches(4), {"k": 0}

    def step() -> None:
        update(data[state["k"] % len(data)])
        state["k"] += 1

    return step


def cql_steps(parl_cls: type) -> tuple[Callable[[], None], Callable[[], None]]:
    torch.manual_seed(0)
    model = example_model("CQL")
    theirs = parl_cls(copy.deepcopy(model), **CQL_HYPER)
    ours = CQL(model, **CQL_HYPER, device="cpu")
    return cycling(lambda b: ours.learn(*b)), cycling(lambda b: theirs.learn(*b))


def iql_steps(parl_cls: type) -> tuple[Callable[[], None], Callable[[], None]]:
    torch.manual_seed(0)
    model = example_model("IQL")
    theirs = parl_cls(copy.deepcopy(model), **IQL_HYPER)
    ours = IQL(model, **IQL_HYPER, device="cpu")

    def our_update(b: tuple[torch.Tensor, ...]) -> None:
        ours.learn(*b)
        ours.sync_target()

    def their_update(b: tuple[torch.Tensor, ...]) -> None:
        theirs.update(*b)
        theirs.sync_target()

    return cycling(our_update), cycling(their_update)


class MatmulShapes(TorchDispatchMode):
    """Records the operand shapes of every matrix product run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[tuple[str, tuple[tuple[int, ...], ...]]] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func._schema.name
        if name in MATMULS:
            shapes = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
            self.calls[(name, shapes)] += 1
        return func(*args, **(kwargs or {}))


def _flops(name: str, shapes: tuple[tuple[int, ...], ...]) -> int:
    a, b = shapes[-2], shapes[-1]
    if name in ("aten::mm", "aten::addmm"):
        return 2 * a[0] * a[1] * b[1]
    return 2 * a[0] * a[1] * a[2] * b[2]  # batched


def _replay(name: str, shapes: tuple[tuple[int, ...], ...]) -> Callable[[], None]:
    tensors = [torch.randn(s) for s in shapes]
    op = {"aten::mm": torch.mm, "aten::addmm": torch.addmm, "aten::bmm": torch.bmm,
          "aten::baddbmm": torch.baddbmm}[name]  # fmt: skip
    return lambda: op(*tensors)  # type: ignore[operator]


def ceiling(step: Callable[[], None], seconds: float) -> tuple[float, float, float]:
    """(seconds of matrix products per update, FLOPs per update, their GFLOP/s alone)."""
    with MatmulShapes() as recorder:
        step()
    total_s, total_flops = 0.0, 0
    for (name, shapes), count in recorder.calls.items():
        run = _replay(name, shapes)
        for _ in range(3):
            run()
        reps, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / max(1, len(recorder.calls)):
            run()
            reps += 1
        total_s += count * elapsed / reps
        total_flops += count * _flops(name, shapes)
    return total_s, total_flops, total_flops / total_s / 1e9


def rate(step: Callable[[], None], seconds: float) -> float:
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        step()
        count += 1
    return count / elapsed


def compare(
    table: Table,
    name: str,
    ours: Callable[[], None],
    theirs: Callable[[], None],
    args: argparse.Namespace,
) -> None:
    for step in (ours, theirs):  # warm-up: allocator, caches, first-call paths
        for _ in range(3):
            step()
    ours_rates, theirs_rates, ceilings = [], [], []
    for _ in range(args.rounds):
        ours_rates.append(rate(ours, args.seconds))
        theirs_rates.append(rate(theirs, args.seconds))
        ceilings.append(ceiling(ours, args.seconds))
    mine, parls = statistics.median(ours_rates), statistics.median(theirs_rates)
    matmul_s = statistics.median(c[0] for c in ceilings)
    flops, gflops = ceilings[0][1], statistics.median(c[2] for c in ceilings)
    table.row(
        name,
        f"{mine:.1f}",
        f"{parls:.1f}",
        f"{mine / parls:.2f}x",
        f"{1 / matmul_s:.1f} ({flops / 1e9:.2f} GFLOP at {gflops:.1f} GFLOP/s)",
        f"{mine * matmul_s:.2f}x",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one timed round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--wheel", type=Path, default=None, help="PARL 2.2.1's wheel, if at hand")
    add_record_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.cuda.is_available = lambda: False  # type: ignore[assignment]  # PARL's pick CUDA
    report = Report("bench_offline", local=("--wheel",))
    with tempfile.TemporaryDirectory() as tmp:
        wheel = fetch_wheel(Path(tmp), args.wheel)
        parl_cql = load_module(wheel, Path(tmp), "cql").CQL
        parl_iql = load_module(wheel, Path(tmp), "iql").IQL
    table = report.table(
        f"Updates/s, batch {BATCH}, {HIDDEN}-wide MLPs, {args.threads} torch thread(s), "
        f"medians of {args.rounds} rounds of {args.seconds:g} s per side",
        ["", "ours", "PARL 2.2.1's code, same run", "ours / PARL",
         "matrix-product ceiling, updates/s", "ours / ceiling"],
        [6, 8, 28, 12, 50, 14],
    )  # fmt: skip
    compare(table, "CQL", *cql_steps(parl_cql), args)
    compare(table, "IQL", *iql_steps(parl_iql), args)
    report.write(args.record)


if __name__ == "__main__":
    main()
