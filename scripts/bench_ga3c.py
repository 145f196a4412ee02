"""GA3C against A2C: environment steps per second of the two examples' learners with the same
simulators (``--actor_num`` actors of ``--env_num`` envs each), training as they do in a real
run, and GA3C's mean prediction batch.

    nice -n 10 .venv/bin/python scripts/bench_ga3c.py [--seconds 20] [--repeats 2] [--atari]

GA3C's simulators hold no network: the learner predicts for whichever have answered, in one
batch. A2C's actors (``--mode actors``) each hold a copy of the model, sample a rollout with it
and wait for the new weights after every update. Each measurement runs in a fresh interpreter
(the examples' modules share names) with ``torch.set_num_threads(1)``, after ``--warmup``
seconds of the same loop; the two are alternated ``--repeats`` times and the medians printed,
because the machine is shared. With ``--atari`` PongNoFrameskip-v4 is measured too (GA3C on
42 x 42 frames, A2C on 84 x 84, each its example's preset).
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

from benchrecord import Report, Table, add_record_flag

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

THROUGHPUT = """
import json, sys, time
sys.path.insert(0, {folder!r})
import torch
torch.set_num_threads(1)
import train
config = {{**train.{preset}, "seed": 0, "actor_num": {actors}, "env_num": {envs},
          "logdir": {logdir!r}}}
learner = train.Learner(config)
try:
    deadline = time.perf_counter() + {warmup}
    while time.perf_counter() < deadline:
        learner.step()
    first, start = learner.sample_steps, time.perf_counter()
    while time.perf_counter() - start < {seconds}:
        learner.step()
    seconds, steps = time.perf_counter() - start, learner.sample_steps - first
finally:
    learner.close()
out = {{"steps_per_s": steps / seconds, "learner_times": dict(learner.times.seconds)}}
if hasattr(learner, "predictor"):
    out["predictor"] = learner.predictor.stats()
print("RESULT" + json.dumps(out))
"""


def measure(name: str, preset: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as logdir:
        code = THROUGHPUT.format(
            folder=str(EXAMPLES / name), preset=preset, actors=args.actor_num,
            envs=args.env_num, logdir=logdir, warmup=args.warmup, seconds=args.seconds,
        )  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
        )
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT") :])


def compare(table: Table, env: str, presets: dict[str, str], args: argparse.Namespace) -> None:
    rates: dict[str, list[float]] = {name: [] for name in presets}
    batches: list[float] = []
    for _ in range(args.repeats):
        for name, preset in presets.items():
            out = measure(name, preset, args)
            rates[name].append(out["steps_per_s"])
            if "predictor" in out:
                batches.append(out["predictor"]["mean_batch_size"])
            print(f"  {env} {name}: {out['steps_per_s']:.0f} steps/s; learner "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(out["learner_times"].items())),
                  flush=True)  # fmt: skip
    ga3c, a2c = statistics.median(rates["GA3C"]), statistics.median(rates["A2C"])
    print(f"{env}, {args.actor_num} actors of {args.env_num} envs: GA3C {ga3c:.0f} steps/s, "
          f"A2C {a2c:.0f} steps/s ({ga3c / a2c:.2f}x); GA3C's mean prediction batch "
          f"{statistics.median(batches):.1f} observations", flush=True)  # fmt: skip
    table.row(
        env,
        f"{ga3c:,.0f}",
        f"{a2c:,.0f}",
        f"{ga3c / a2c:.2f}x",
        f"{statistics.median(batches):.1f} of {args.actor_num * args.env_num}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actor_num", type=int, default=2)
    parser.add_argument("--env_num", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured time per run")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--atari", action="store_true", help="PongNoFrameskip-v4 as well")
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_ga3c")
    table = report.table(
        f"Env steps/s, {args.actor_num} actors of {args.env_num} envs, both training, medians "
        f"of {args.repeats} runs of {args.seconds:g} s",
        ["", "GA3C", "A2C, same run", "GA3C / A2C", "GA3C's mean prediction batch"],
        [20, 8, 14, 10, 28],
    )
    compare(table, "CartPole-v1", {"GA3C": "cartpole_config", "A2C": "cartpole_config"}, args)
    if args.atari:
        compare(table, "PongNoFrameskip-v4", {"GA3C": "atari_config", "A2C": "atari_config"}, args)
    report.write(args.record)


if __name__ == "__main__":
    main()
