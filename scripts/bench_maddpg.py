"""MADDPG speed: ours against PARL 2.2.1's published MADDPG, run in this package, same models.

    nice -n 10 .venv/bin/python scripts/bench_maddpg.py                 # about a minute
    nice -n 10 .venv/bin/python scripts/bench_maddpg.py --seconds 0.3 --rounds 2   # quick look

PARL's ``parl/algorithms/torch/maddpg.py`` is taken from its published wheel (downloaded with
pip once, checked against PyPI's sha256, or given with ``--wheel``) and loaded against this
package, as the parity tests do. Both sides get the same team: ``simple_speaker_listener``'s
sizes (observations 3 and 11, actions 3 and 5), the example's model (two 64-unit layers) and
PARL's batch of 1024. One update is what the example's agent does for one agent: every agent's
target policy draws the next actions, the target critic gives ``target_q``, then ``learn``.
Discrete and continuous actions; CPU, one torch thread unless ``--threads``.

The two sides are timed alternately in short rounds, so a change of load on the (shared) machine
hits both; the ratio (ours / PARL) is the figure to read.
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

import torch
from gymnasium import spaces

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "MADDPG"))

from benchrecord import Report, add_record_flag  # noqa: E402
from model import MAModel  # noqa: E402  (the example's model)
from parl_wheel import fetch_wheel, load_module  # noqa: E402

from parl.algorithms import MADDPG  # noqa: E402

OBS_DIMS = (3, 11)
ACT_DIMS = (3, 5)
BATCH = 1024
HYPER = {"gamma": 0.95, "tau": 0.01, "actor_lr": 0.01, "critic_lr": 0.01}


def make_teams(parl_cls: type, continuous: bool) -> tuple[list[Any], list[Any]]:
    """The same team twice: ours and PARL's, from identical weights."""
    if continuous:
        act_space: list[Any] = [spaces.Box(-1.0, 1.0, (n,)) for n in ACT_DIMS]
    else:
        act_space = [spaces.Discrete(n) for n in ACT_DIMS]
    critic_in = sum(OBS_DIMS) + sum(ACT_DIMS)
    ours, theirs = [], []
    for i in range(len(OBS_DIMS)):
        torch.manual_seed(i)
        model = MAModel(OBS_DIMS[i], ACT_DIMS[i], critic_in, continuous)
        kwargs = {"agent_index": i, "act_space": act_space, **HYPER}
        theirs.append(parl_cls(copy.deepcopy(model), **kwargs))
        ours.append(MADDPG(model, **kwargs, device="cpu"))
    return ours, theirs


def make_batches(count: int, continuous: bool) -> list[tuple[Any, ...]]:
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(count):
        obs_n = [torch.randn(BATCH, d, generator=gen) for d in OBS_DIMS]
        next_obs_n = [torch.randn(BATCH, d, generator=gen) for d in OBS_DIMS]
        act_n = [torch.rand(BATCH, d, generator=gen) for d in ACT_DIMS]
        if continuous:
            act_n = [a * 2.0 - 1.0 for a in act_n]
        reward = torch.randn(BATCH, generator=gen)
        terminal = (torch.rand(BATCH, generator=gen) < 0.05).float()
        batches.append((obs_n, act_n, reward, next_obs_n, terminal))
    return batches


def updater(team: list[Any], batches: list[tuple[Any, ...]]) -> Callable[[], None]:
    """One update of agent 0 per call, as the example's agent does it, cycling the batches."""
    state = {"k": 0}
    alg = team[0]

    def update() -> None:
        obs_n, act_n, reward, next_obs_n, terminal = batches[state["k"] % len(batches)]
        state["k"] += 1
        with torch.no_grad():
            next_act_n = [
                agent.sample(obs, use_target_model=True)
                for agent, obs in zip(team, next_obs_n, strict=True)
            ]
            next_q = alg.Q(next_obs_n, next_act_n, use_target_model=True)
            target_q = reward + alg.gamma * (1.0 - terminal) * next_q
        alg.learn(obs_n, act_n, target_q)

    return update


def rate(update: Callable[[], None], seconds: float) -> float:
    """Updates per second of ``update`` over about ``seconds``."""
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(5):
            update()
        count += 5
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one timed round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--wheel", type=Path, default=None, help="PARL 2.2.1's wheel, if at hand")
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_maddpg", local=("--wheel",))
    torch.set_num_threads(args.threads)
    torch.cuda.is_available = lambda: False  # PARL's MADDPG picks CUDA when it sees one
    with tempfile.TemporaryDirectory() as tmp:
        parl_cls = load_module(fetch_wheel(Path(tmp), args.wheel), Path(tmp), "maddpg").MADDPG
    table = report.table(
        f"MADDPG updates/s, batch {BATCH}, {args.threads} torch thread(s), medians of "
        f"{args.rounds} rounds of {args.seconds:g} s per side",
        ["actions", "ours", "PARL 2.2.1's code, same run", "ours / PARL"],
        [12, 10, 28, 12],
    )
    for continuous in (False, True):
        ours_team, theirs_team = make_teams(parl_cls, continuous)
        batches = make_batches(4, continuous)
        ours, theirs = updater(ours_team, batches), updater(theirs_team, batches)
        for update in (ours, theirs):  # warm-up: allocator, caches, first-call paths
            for _ in range(10):
                update()
        ours_rates, theirs_rates = [], []
        for _ in range(args.rounds):
            ours_rates.append(rate(ours, args.seconds))
            theirs_rates.append(rate(theirs, args.seconds))
        mine, parls = statistics.median(ours_rates), statistics.median(theirs_rates)
        kind = "continuous" if continuous else "discrete"
        table.row(kind, f"{mine:.1f}", f"{parls:.1f}", f"{mine / parls:.2f}x")
    report.write(args.record)


if __name__ == "__main__":
    main()
