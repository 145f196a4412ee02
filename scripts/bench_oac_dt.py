"""OAC and Decision Transformer speed: ours against PARL 2.2.1's published algorithms, run in
this package, on the same models and batches.

    nice -n 10 .venv/bin/python scripts/bench_oac_dt.py                          # about 2 minutes
    nice -n 10 .venv/bin/python scripts/bench_oac_dt.py --seconds 0.3 --rounds 2  # quick look

PARL's ``parl/algorithms/torch/oac.py`` and ``dt.py`` are taken from its published wheel
(downloaded with pip once, checked against PyPI's sha256, or given with ``--wheel``) and loaded
against this package, as the parity tests do.

- OAC: HalfCheetah's sizes (observations 17, actions 6), the example's model (256x256) and
  batches of 256. One step is what the example does per environment step: one optimistic
  exploration action for one observation, then one ``learn``.
- Decision Transformer: Hopper's sizes (11, 3) and PARL's example configuration (context 20,
  width 128, 3 layers, 1 head, dropout 0.1, batches of 64). Both sides train the same plain-torch
  ``TrajectoryModel`` (PARL's example model needs ``transformers``), so the figure compares the
  training steps alone.

CPU, one torch thread unless ``--threads``. The two sides are timed alternately in short rounds,
so a change of load on a shared machine hits both; the ratio (ours / PARL) is the figure to read.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "OAC"))

from benchrecord import Report, Table, add_record_flag  # noqa: E402
from mujoco_model import MujocoModel  # noqa: E402  (the example's model)
from parl_wheel import fetch_wheel, load_module  # noqa: E402

from parl.algorithms import OAC, DecisionTransformer  # noqa: E402
from parl.algorithms.trajectory_model import TrajectoryModel  # noqa: E402
from parl.utils import TrajectorySampler  # noqa: E402

OAC_OBS, OAC_ACT, OAC_BATCH = 17, 6, 256
OAC_HYPER = {"gamma": 0.99, "tau": 0.005, "alpha": 0.2, "beta": 4.66, "delta": 23.53}
OAC_HYPER |= {"actor_lr": 3e-4, "critic_lr": 3e-4}
DT_STATE, DT_ACT, DT_CONTEXT, DT_BATCH = 11, 3, 20, 64


def oac_steps(parl_cls: type) -> tuple[Callable[[], None], Callable[[], None]]:
    """One exploration action and one update, for ours and for PARL's, cycling 4 batches."""
    torch.manual_seed(0)
    model = MujocoModel(OAC_OBS, OAC_ACT)
    theirs = parl_cls(copy.deepcopy(model), **OAC_HYPER)
    ours = OAC(model, **OAC_HYPER, device="cpu")
    gen = torch.Generator().manual_seed(0)
    batches = [
        (
            torch.randn(OAC_BATCH, OAC_OBS, generator=gen),
            torch.rand(OAC_BATCH, OAC_ACT, generator=gen) * 2 - 1,
            torch.randn(OAC_BATCH, 1, generator=gen),
            torch.randn(OAC_BATCH, OAC_OBS, generator=gen),
            (torch.rand(OAC_BATCH, 1, generator=gen) < 0.05).float(),
        )
        for _ in range(4)
    ]

    def step_of(alg: Any) -> Callable[[], None]:
        state = {"k": 0}

        def step() -> None:
            batch = batches[state["k"] % len(batches)]
            state["k"] += 1
            alg.get_optimistic_exploration_action(batch[0][:1])
            alg.learn(*batch)

        return step

    return step_of(ours), step_of(theirs)


def dt_steps(parl_cls: type) -> tuple[Callable[[], None], Callable[[], None]]:
    """One training step of each side, on the same cycle of 4 batches."""
    torch.manual_seed(0)
    model = TrajectoryModel(DT_STATE, DT_ACT, 128, max_length=DT_CONTEXT, max_ep_len=1000)
    theirs = parl_cls(copy.deepcopy(model), 1e-4, 10000, 1e-4)
    ours = DecisionTransformer(model, 1e-4, 10000, 1e-4, device="cpu")
    rng = np.random.default_rng(0)
    episodes = [
        {
            "observations": rng.normal(size=(200, DT_STATE)),
            "actions": rng.uniform(-1, 1, size=(200, DT_ACT)),
            "rewards": rng.normal(size=200),
            "terminals": np.eye(200)[-1],
        }
        for _ in range(10)
    ]
    sampler = TrajectorySampler(episodes, context=DT_CONTEXT, seed=0)
    batches = [sampler.sample(DT_BATCH).to_tensors() for _ in range(4)]

    def step_of(alg: Any) -> Callable[[], None]:
        state = {"k": 0}

        def step() -> None:
            alg.learn(*batches[state["k"] % len(batches)])
            state["k"] += 1

        return step

    return step_of(ours), step_of(theirs)


def rate(step: Callable[[], None], seconds: float) -> float:
    """Steps per second of ``step`` over about ``seconds``."""
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        step()
        count += 1
    return count / elapsed


def compare(
    table: Table, name: str, ours: Callable[[], None], theirs: Callable[[], None], args: Any
) -> None:
    for step in (ours, theirs):  # warm-up: allocator, caches, first-call paths
        for _ in range(3):
            step()
    ours_rates, theirs_rates = [], []
    for _ in range(args.rounds):
        ours_rates.append(rate(ours, args.seconds))
        theirs_rates.append(rate(theirs, args.seconds))
    mine, parls = statistics.median(ours_rates), statistics.median(theirs_rates)
    table.row(name, f"{mine:.1f}", f"{parls:.1f}", f"{mine / parls:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one timed round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--wheel", type=Path, default=None, help="PARL 2.2.1's wheel, if at hand")
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_oac_dt", local=("--wheel",))
    torch.set_num_threads(args.threads)
    torch.cuda.is_available = lambda: False  # PARL's OAC picks CUDA when it sees one
    with tempfile.TemporaryDirectory() as tmp:
        wheel = fetch_wheel(Path(tmp), args.wheel)
        parl_oac = load_module(wheel, Path(tmp), "oac").OAC
        parl_dt = load_module(wheel, Path(tmp), "dt").DecisionTransformer
    table = report.table(
        f"Updates/s, {args.threads} torch thread(s), medians of {args.rounds} rounds of "
        f"{args.seconds:g} s per side",
        ["", "ours", "PARL 2.2.1's code, same run", "ours / PARL"],
        [24, 10, 28, 12],
    )
    compare(table, f"OAC (batch {OAC_BATCH})", *oac_steps(parl_oac), args)
    compare(table, f"DT (batch {DT_BATCH})", *dt_steps(parl_dt), args)
    report.write(args.record)


if __name__ == "__main__":
    main()
