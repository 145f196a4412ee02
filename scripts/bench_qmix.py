"""QMIX speed: ours against PARL 2.2.1's published QMIX, run in this package, same networks.

    nice -n 10 .venv/bin/python scripts/bench_qmix.py                 # about a minute
    nice -n 10 .venv/bin/python scripts/bench_qmix.py --seconds 0.5 --rounds 2   # quick look

PARL's ``parl/algorithms/torch/qmix.py`` is taken from its published wheel (downloaded with pip
once, checked against PyPI's sha256, or given with ``--wheel``) and loaded against this package,
as the parity tests do. Every side gets the same networks, the example's (``examples/QMIX``: a
GRU agent with 64 units, or EPyMARL's feed-forward one, and the hypernetwork mixer), and the
same batch of 32 padded episodes of level-based foraging's sizes: 2 agents, 51 steps (50 and the
last observation), 6 actions, inputs of 20 (observation, last action and id; 14 for the
feed-forward agent) and a state of 24. Three sides:

- ours: ``QMIX.learn`` with the networks' ``unroll`` (every step's layers in one call, the GRU in
  torch's own loop);
- ours, step by step: the same networks without ``unroll``, ``forward`` once per step as PARL's
  QMIX calls it;
- PARL's code.

The sides are timed alternately in short rounds, so a change of load on the (shared) machine
hits them all; the ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import copy
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "QMIX"))

from benchrecord import Report, add_record_flag  # noqa: E402
from parl_wheel import fetch_wheel, load_module  # noqa: E402
from qmix_model import FCModel, QMixerModel, RNNModel  # noqa: E402  (the example's networks)

from parl.algorithms import QMIX  # noqa: E402

BATCH, STEPS, AGENTS, ACTIONS, STATE = 32, 51, 2, 6, 24
INPUTS = {"GRU": 20, "feed-forward": 14}
HYPER = {"double_q": True, "gamma": 0.99, "lr": 5e-4, "clip_grad_norm": 10.0}


def make_sides(parl_cls: type, network: str) -> dict[str, Any]:
    """Three QMIX instances from identical weights."""
    torch.manual_seed(0)
    cls = RNNModel if network == "GRU" else FCModel
    agent, mixer = cls(INPUTS[network], ACTIONS), QMixerModel(AGENTS, STATE)
    step_by_step = copy.deepcopy(agent)
    step_by_step.unroll = None  # not callable: QMIX calls forward once per step
    return {
        "ours": QMIX(agent, copy.deepcopy(mixer), **HYPER, device="cpu"),
        "step by step": QMIX(step_by_step, copy.deepcopy(mixer), **HYPER, device="cpu"),
        "PARL": parl_cls(copy.deepcopy(agent), copy.deepcopy(mixer), **HYPER),
    }


def make_batch(network: str) -> tuple[torch.Tensor, ...]:
    """``learn``'s arguments: episodes of 50 real steps and 30 to 50, padded to 51 slots."""
    gen = torch.Generator().manual_seed(0)
    state = torch.randn(BATCH, STEPS, STATE, generator=gen)
    obs = torch.randn(BATCH, STEPS, AGENTS, INPUTS[network], generator=gen)
    actions = torch.randint(0, ACTIONS, (BATCH, STEPS, AGENTS), generator=gen)
    avail = torch.ones(BATCH, STEPS, AGENTS, ACTIONS)
    reward = torch.randn(BATCH, STEPS, 1, generator=gen)
    terminated, filled = torch.zeros(BATCH, STEPS, 1), torch.zeros(BATCH, STEPS, 1)
    lengths = torch.randint(30, STEPS, (BATCH,), generator=gen)
    for i, length in enumerate(lengths.tolist()):
        terminated[i, length - 1 :], filled[i, length:] = 1.0, 1.0
        avail[i, length:], actions[i, length:] = 0.0, 0
    return state, actions, reward, terminated, obs, avail, filled


def rate(update: Callable[[], Any], seconds: float) -> float:
    """Updates per second of ``update`` over about ``seconds``."""
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(3):
            update()
        count += 3
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one timed round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--wheel", type=Path, default=None, help="PARL 2.2.1's wheel, if at hand")
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_qmix", local=("--wheel",))
    torch.set_num_threads(args.threads)
    torch.cuda.is_available = lambda: False  # PARL's QMIX picks CUDA when it sees one
    with tempfile.TemporaryDirectory() as tmp:
        parl_cls = load_module(fetch_wheel(Path(tmp), args.wheel), Path(tmp), "qmix").QMIX
    table = report.table(
        f"QMIX updates/s, {BATCH} episodes of {STEPS} steps, {args.threads} torch thread(s), "
        f"medians of {args.rounds} rounds of {args.seconds:g} s per side",
        ["agent network", "ours", "ours, step by step", "PARL 2.2.1's code", "ours / PARL"],
        [14, 8, 20, 19, 12],
    )
    for network in INPUTS:
        sides, batch = make_sides(parl_cls, network), make_batch(network)
        updates = {name: functools.partial(alg.learn, *batch) for name, alg in sides.items()}
        for update in updates.values():  # warm-up: allocator, caches, first-call paths
            for _ in range(3):
                update()
        rates: dict[str, list[float]] = {name: [] for name in updates}
        for _ in range(args.rounds):
            for name, update in updates.items():
                rates[name].append(rate(update, args.seconds))
        ours, step, parls = (statistics.median(rates[name]) for name in updates)
        table.row(network, f"{ours:.1f}", f"{step:.1f}", f"{parls:.1f}", f"{ours / parls:.2f}x")
    report.write(args.record)


if __name__ == "__main__":
    main()
