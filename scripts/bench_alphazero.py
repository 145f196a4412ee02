"""AlphaZero's self-play on 2 actors against 1: self-play games per second of the example's
learner (``examples/AlphaZero/train.py``), the same games split over the actors.

    nice -n 10 .venv/bin/python scripts/bench_alphazero.py [--games 80] [--rounds 2] [--repeats 3]

Each measurement runs in a fresh interpreter (``torch.set_num_threads(1)`` in the learner; each
actor sets its own) with the example's own ``Coach``: one unmeasured round of self-play (the
actors start and warm up), then ``--rounds`` rounds of ``--games`` games each, timed from the
weights being sent to the last actor's examples back. The network is the untrained one of a
fresh run, so games run to about the same length in both settings; MCTS's cost per move does
not depend on the weights, but how long the games last does, and it varies from run to run: moves
per second (every move of a game is one MCTS search) are printed beside games per second. The
default ``--games`` is the example's ``--games_per_iter``: each actor plays its share of the
games together, batching their network calls, so fewer games per actor batch less. The settings
alternate ``--repeats`` times and the medians are printed, with the ratios, because the machine
is shared. With 2 cores, 2 actors can at most double the rate; the learner only waits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchrecord import Report, add_record_flag

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "examples" / "AlphaZero"

SELF_PLAY = """
import json, sys, time
sys.path.insert(0, {folder!r})
import torch
torch.set_num_threads(1)
import train
args = train.parse_args(["--actors_num", "{actors}", "--games_per_iter", "{games}",
                         "--mcts_sims", "{sims}", "--logdir", {logdir!r}, "--no_progress"])
coach = train.Coach(args)
try:
    coach.self_play()
    games = seconds = moves = 0
    for _ in range({rounds}):
        examples, played, took = coach.self_play()
        # every position is kept twice, as itself and as its mirror image
        games, seconds, moves = games + played, seconds + took, moves + len(examples.vs) // 2
finally:
    coach.close()
print("RESULT" + json.dumps({{"games_per_s": games / seconds, "moves_per_s": moves / seconds}}))
"""


def measure(actors: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as logdir:
        code = SELF_PLAY.format(
            folder=str(FOLDER), actors=actors, games=args.games, sims=args.mcts_sims,
            logdir=logdir, rounds=args.rounds,
        )  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
        )
    if proc.returncode != 0:
        raise RuntimeError(f"{actors} actor(s) failed:\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=80, help="self-play games per round")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per run")
    parser.add_argument("--mcts_sims", type=int, default=50, help="the example's default")
    parser.add_argument("--repeats", type=int, default=3)
    add_record_flag(parser)
    args = parser.parse_args()
    if args.games < 2 or args.rounds < 1 or args.repeats < 1:
        parser.error("--games must be 2 or more, --rounds and --repeats 1 or more")
    games: dict[int, list[float]] = {1: [], 2: []}
    moves: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for actors in games:
            out = measure(actors, args)
            games[actors].append(out["games_per_s"])
            moves[actors].append(out["moves_per_s"])
            print(
                f"  {actors} actor(s): {out['games_per_s']:.2f} games/s, "
                f"{out['moves_per_s']:.1f} moves/s",
                flush=True,
            )
    report = Report("bench_alphazero")
    table = report.table(
        f"Connect Four self-play, {args.games} games per round, {args.mcts_sims} MCTS "
        f"simulations per move, medians of {args.repeats} runs of {args.rounds} rounds",
        ["", "1 actor", "2 actors, same run", "2 / 1"],
        [16, 10, 18, 8],
    )
    for name, rates in (("games/s", games), ("moves/s", moves)):
        one, two = statistics.median(rates[1]), statistics.median(rates[2])
        table.row(name, f"{one:.2f}", f"{two:.2f}", f"{two / one:.2f}x")
    report.write(args.record)


if __name__ == "__main__":
    main()
