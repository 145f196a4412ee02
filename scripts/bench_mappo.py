"""MAPPO updates per second: ``parl.algorithms.MAPPO`` against PARL 2.2.1's own MAPPO (its
``parl/algorithms/torch/mappo.py`` from the published wheel, run against this package), on the
same model and the same minibatches, measured in turn in the same run.

    python scripts/bench_mappo.py                          # about 30 seconds
    python scripts/bench_mappo.py --seconds 1 --rounds 1   # a quick check
    python scripts/bench_mappo.py --rows 3200 --kind multidiscrete --threads 2
    python scripts/bench_mappo.py --parl_wheel parl-2.2.1-py3-none-any.whl   # no download

The model is the MAPPO example's (``examples/MAPPO/model.py``: two layer-normalised tanh layers
of 64 units for the actor and for the critic) with ``simple_spread``'s sizes (observations of
18, a global state of 54, 5 actions; ``--kind multidiscrete``: actions of 5 and 3). A minibatch
is ``--rows`` steps (800: PARL's 25 steps of 32 envs), with PopArt and active masks, as PARL's
benchmark learns. Each round times ``--seconds`` of updates of one side, then of the other; the
figure is the median over rounds. The wheel is downloaded with pip (``pip download
parl==2.2.1``) into a temporary folder unless ``--parl_wheel`` names it; its sha256 is checked.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from benchrecord import Report, add_record_flag
from parl_wheel import fetch_wheel, load_module

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "MAPPO"))

OBS_DIM, STATE_DIM = 18, 54
ACT_DIMS: dict[str, Any] = {"discrete": 5, "multidiscrete": [5, 3]}
# PARL's benchmark: clip, value-loss weight, entropy, lr, Huber delta, Adam eps, grad clip
HYPER = (0.2, 1.0, 0.01, 7e-4, 10.0, 1e-5, 10.0)


def make_batches(kind: str, rows: int, count: int) -> list[tuple[torch.Tensor, ...]]:
    """``count`` minibatches of ``rows`` steps, laid out as PARL's buffer gives them."""
    gen = torch.Generator().manual_seed(0)
    dims = ACT_DIMS[kind] if isinstance(ACT_DIMS[kind], list) else [ACT_DIMS[kind]]
    batches = []
    for _ in range(count):
        actions = torch.stack([torch.randint(n, (rows,), generator=gen) for n in dims], -1)
        batches.append(
            (
                torch.randn(rows, STATE_DIM, generator=gen),
                torch.randn(rows, OBS_DIM, generator=gen),
                actions.float(),
                torch.randn(rows, 1, generator=gen),
                torch.randn(rows, 1, generator=gen),
                -1.5 + 0.2 * torch.randn(rows, len(dims), generator=gen),
                torch.randn(rows, 1, generator=gen),
                torch.ones(rows, 1),
            )
        )
    return batches


def updates_per_second(alg: Any, batches: list[tuple[torch.Tensor, ...]], seconds: float) -> float:
    """Updates per second over at least ``seconds`` (the loss values read each time, as PARL's
    agent does with ``.item()``)."""
    done, start = 0, time.perf_counter()
    while True:
        value_loss, policy_loss, entropy = alg.learn(*batches[done % len(batches)])
        value_loss.item(), policy_loss.item(), entropy.item()
        done += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=sorted(ACT_DIMS), default="discrete")
    parser.add_argument("--rows", type=int, default=800, help="steps per minibatch")
    parser.add_argument("--seconds", type=float, default=5.0, help="per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--parl_wheel", default=None, help="PARL 2.2.1's wheel (default: pip)")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    report = Report("bench_mappo", local=("--parl_wheel",))
    torch.set_num_threads(args.threads)
    from model import MAPPOModel  # the example's

    from parl.algorithms import MAPPO

    # PARL's MAPPO moves its model to CUDA when there is one: both sides run on the CPU
    torch.cuda.is_available = lambda: False  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        module = load_module(fetch_wheel(Path(tmp), args.parl_wheel), Path(tmp), "mappo")
    torch.manual_seed(0)
    model = MAPPOModel(OBS_DIM, STATE_DIM, ACT_DIMS[args.kind])
    sides = {
        "PARL 2.2.1": module.MAPPO(copy.deepcopy(model), *HYPER),
        "parl-torch": MAPPO(model, *HYPER, device="cpu"),
    }
    batches = make_batches(args.kind, args.rows, 8)
    for alg in sides.values():  # warm up: Adam's state, allocator, first-call costs
        updates_per_second(alg, batches, 0.2)
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, alg in sides.items():
            rates[name].append(updates_per_second(alg, batches, args.seconds))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    table = report.table(
        f"MAPPO updates/s, {args.kind} actions, {args.rows} rows per minibatch, "
        f"{args.threads} torch thread(s), medians of {args.rounds} round(s) of {args.seconds:g} s",
        ["", "updates/s", "rounds", "/ PARL 2.2.1's code"],
        [11, 10, 24, 20],
    )
    for name, median in medians.items():
        rounds = ", ".join(f"{v:.1f}" for v in rates[name])
        ratio = median / medians["PARL 2.2.1"]
        table.row(name, f"{median:.1f}", rounds, f"{ratio:.2f}x")
    report.write(args.record)


if __name__ == "__main__":
    main()
