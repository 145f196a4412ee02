"""Distributed training figures: sample throughput with 1 vs 2 actors (IMPALA on
Pong, ES on HalfCheetah-v5), the actors' transfer share, and CartPole learning runs; with
``--mujoco``, only the learning runs of IMPALA and A2C (Gaussian policies) on HalfCheetah-v5.

    nice -n 10 .venv/bin/python scripts/bench_distributed.py [--quick] [--seconds 20]
    .venv/bin/python scripts/bench_distributed.py --mujoco --plot_dir docs/curves   # ~30 min

Each measurement runs in a fresh interpreter (the examples' modules share names), with
``torch.set_num_threads(1)``. Throughput is measured after a warm-up, with 1 and 2 actors
alternated ``--repeats`` times (medians), because the machine is shared: the ratio of the two
is the figure, not the absolute rate. The first line is the calibration: the time of
``sum(range(1000))`` on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

from benchrecord import Report, Table, add_record_flag

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

PRELUDE = """
import json, sys, time
sys.path.insert(0, {folder!r})
import torch
torch.set_num_threads(1)
import train
"""

IMPALA_THROUGHPUT = """
config = {{**train.atari_config, "seed": 0, "actor_num": {actors}, "logdir": {logdir!r},
           "transport": {transport!r}}}
learner = train.Learner(config)
for _ in range(2 * {actors}):            # warm-up: every actor has sampled
    learner._receive()
learner.batch.clear()
before = {{i: dict(t) for i, t in learner.actor_times.items()}}
steps0, start = learner.sample_steps, time.perf_counter()
while time.perf_counter() - start < {seconds}:
    if {learn}:
        learner.step()
    else:
        learner._receive()
        learner.batch.clear()
elapsed = time.perf_counter() - start
delta = {{k: sum(t[k] - before.get(i, {{}}).get(k, 0.0) for i, t in learner.actor_times.items())
         for k in ("sampling", "weights", "alive", "cpu")}}
learner.close()
print("RESULT" + json.dumps({{"steps_per_s": (learner.sample_steps - steps0) / elapsed,
                             "steps_per_cpu_s": (learner.sample_steps - steps0) / delta["cpu"],
                             "actor": delta, "learner": learner.times.seconds}}))
"""

ES_THROUGHPUT = """
config = {{**train.mujoco_config, "seed": 0, "actor_num": {actors}, "logdir": {logdir!r}}}
learner = train.Learner(config)
flat = learner.agent.alg.get_flat_weights()
learner._round(flat)                      # warm-up
cpu0 = sum(t["cpu"] for t in learner.actor_times.values())
steps, start = 0, time.perf_counter()
while time.perf_counter() - start < {seconds}:
    for result in learner._round(flat):
        steps += sum(sum(pair) for pair in result["noisy_lengths"])
elapsed = time.perf_counter() - start
cpu = sum(t["cpu"] for t in learner.actor_times.values()) - cpu0
learner.close()
print("RESULT" + json.dumps({{"steps_per_s": steps / elapsed, "steps_per_cpu_s": steps / cpu}}))
"""

BASELINE = """
import multiprocessing as mp
from actor import Actor

def work(seed):
    torch.set_num_threads(1)
    config = {{**train.{config}, "seed": 0, "actor_num": 1}}
    actor = Actor._original(config, seed, *{extra_args})
    alg = actor.agent.alg
    flat = alg.get_flat_weights() if hasattr(alg, "get_flat_weights") else None
    {call}                                 # warm-up
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < {seconds}:
        out = {call}
        steps += {count}
    return steps / (time.perf_counter() - start)

with mp.get_context("fork").Pool({actors}) as pool:
    rates = pool.map(work, [1000 * (i + 1) for i in range({actors})])
print("RESULT" + json.dumps({{"steps_per_s": sum(rates)}}))
"""

BASELINES = {
    "IMPALA": {"config": "atari_config", "extra_args": "(None, None)", "call": "actor.sample()",
               "count": 'out["steps"]'},
    "ES": {"config": "mujoco_config", "extra_args": "(None,)",
           "call": "actor.sample(flat, actor.agent.obs_filter.state)",
           "count": 'sum(sum(pair) for pair in out["noisy_lengths"])'},
}  # fmt: skip

LEARN = """
result = train.main({args!r})
print("RESULT" + json.dumps({{"history": result.history, "seconds": result.seconds,
                             "steps": result.sample_steps}}))
"""


def run(folder: str, body: str, timeout: float = 3600, **fields: Any) -> dict[str, Any]:
    code = PRELUDE.format(folder=str(EXAMPLES / folder)) + body.format(**fields)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{folder} run failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT") :])


def calibration() -> float:
    """Median µs of ``sum(range(1000))``."""
    runs = timeit.repeat("sum(range(1000))", number=1000, repeat=7)
    return statistics.median(runs) * 1e3


def scaling(
    table: Table,
    name: str,
    folder: str,
    body: str,
    repeats: int,
    baseline: bool = False,
    **fields: Any,
) -> dict[str, float]:
    """Steps/s with 1 and 2 actors, alternated ``repeats`` times; with ``baseline``, also the
    actor class run bare (no parl) in 1 and 2 ``multiprocessing`` processes, interleaved: the
    scaling the machine allows at that moment."""
    kinds = ["parl", "bare"] if baseline else ["parl"]
    rates: dict[tuple[str, int], list[float]] = {(k, n): [] for k in kinds for n in (1, 2)}
    extra: dict[str, Any] = {}
    cpu_rates: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(repeats):
        for actors in (1, 2):
            with tempfile.TemporaryDirectory() as logdir:
                out = run(folder, body, actors=actors, logdir=logdir, **fields)
            rates["parl", actors].append(out["steps_per_s"])
            cpu_rates[actors].append(out["steps_per_cpu_s"])
            extra[f"last_{actors}"] = out
            if baseline:
                code = BASELINE.replace("{call}", BASELINES[folder]["call"])
                bare = run(folder, code, actors=actors, seconds=fields["seconds"],
                           **{k: v for k, v in BASELINES[folder].items() if k != "call"})  # fmt: skip
                rates["bare", actors].append(bare["steps_per_s"])
    med = {key: statistics.median(values) for key, values in rates.items()}
    line = (f"{name}: 1 actor {med['parl', 1]:,.0f} steps/s, 2 actors {med['parl', 2]:,.0f} "
            f"steps/s, ratio {med['parl', 2] / med['parl', 1]:.2f}x")  # fmt: skip
    if baseline:
        bare_ratio = med["bare", 2] / med["bare", 1]
        line += (f"; bare processes 1: {med['bare', 1]:,.0f}, 2: {med['bare', 2]:,.0f}, ratio "
                 f"{bare_ratio:.2f}x")  # fmt: skip
    cpu1, cpu2 = statistics.median(cpu_rates[1]), statistics.median(cpu_rates[2])
    line += (f"; per actor CPU second 1: {cpu1:,.0f}, 2: {cpu2:,.0f} steps "
             f"({cpu2 / cpu1:.2f}x)")  # fmt: skip
    print(f"{line} (runs: {dict((f'{k}{n}', [round(v) for v in r]) for (k, n), r in rates.items())})",
          flush=True)  # fmt: skip
    bare = (
        f"{med['bare', 1]:,.0f} / {med['bare', 2]:,.0f}: {med['bare', 2] / med['bare', 1]:.2f}x"
        if baseline
        else ""
    )
    table.row(
        name,
        f"{med['parl', 1]:,.0f} steps/s",
        f"{med['parl', 2]:,.0f} steps/s",
        f"{med['parl', 2] / med['parl', 1]:.2f}x",
        bare,
        f"{cpu1:,.0f} / {cpu2:,.0f}",
    )
    return {"ratio": med["parl", 2] / med["parl", 1], **extra}


def transfer_share(out: dict[str, Any]) -> str:
    actor = out["actor"]
    busy = actor["sampling"] + actor["weights"]
    idle = max(actor["alive"] - busy, 0.0)
    return (f"weights {100 * actor['weights'] / actor['alive']:.2f}% of actor time, "
            f"sampling {100 * actor['sampling'] / actor['alive']:.1f}%, "
            f"idle/other {100 * idle / actor['alive']:.1f}%")  # fmt: skip


def learning(name: str, folder: str, args: list[str], seeds: list[int]) -> None:
    for seed in seeds:
        with tempfile.TemporaryDirectory() as logdir:
            out = run(folder, LEARN, args=[*args, "--seed", str(seed), "--logdir", logdir])
        best = max((mean for _, mean in out["history"]), default=float("nan"))
        reached = [steps for steps, mean in out["history"] if mean >= 475]
        status = f"reached 475 after {reached[0]:,} steps" if reached else f"best {best:.1f}"
        print(f"{name} seed {seed}: {status}, {out['seconds']:.1f} s, {out['steps']:,} steps",
              flush=True)  # fmt: skip


def _random_return(env_id: str, episodes: int = 5) -> float:
    """The mean return of uniformly random actions: where learning starts from."""
    import gymnasium as gym

    env = gym.make(env_id)
    env.action_space.seed(0)
    returns = []
    for i in range(episodes):
        env.reset(seed=i)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    env.close()
    return statistics.mean(returns)


def mujoco_learning(steps: int, seeds: list[int], logroot: str, plot_dir: str | None) -> None:
    """IMPALA and A2C on HalfCheetah-v5 with their examples' MuJoCo configurations, one run at a
    time (2 actors and the learner share the 2 cores); greedy evaluations of 3 episodes."""
    random_return = _random_return("HalfCheetah-v5")
    for name in ("IMPALA", "A2C"):
        runs = []
        for seed in seeds:
            logdir = os.path.join(logroot, name, f"seed{seed}")
            extra = ["--no_progress"] if name == "A2C" else []
            out = run(name, LEARN, args=["--env", "HalfCheetah-v5", "--max_sample_steps",
                                         str(steps), "--seed", str(seed), "--logdir", logdir,
                                         *extra])  # fmt: skip
            history = out["history"]
            marks = [h for h in history if h[0] >= steps // 4][:1] + [
                h for h in history if h[0] >= steps // 2
            ][:1] + history[-1:]  # fmt: skip
            shown = ", ".join(f"{mean:.0f} at {at:,}" for at, mean in marks)
            print(f"{name} HalfCheetah-v5 seed {seed}: evaluation {shown} steps; best "
                  f"{max(m for _, m in history):.0f}; {out['seconds']:.0f} s "
                  f"({out['steps'] / out['seconds']:.0f} steps/s); random actions "
                  f"{random_return:.0f}", flush=True)  # fmt: skip
            runs.append(f"{logdir}:seed {seed}")
        if plot_dir:
            sys.path.insert(0, str(ROOT / "scripts"))
            import plot_curves

            plot_curves.main([*runs, "--tag", "eval/episode_reward", "--out",
                              os.path.join(plot_dir, f"{name.lower()}_halfcheetah.svg"),
                              "--title", f"{name} on HalfCheetah-v5, 2 actors, greedy evaluation",
                              "--y_title", "mean return of 3 episodes"])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="short runs, one repeat")
    parser.add_argument("--skip_learning", action="store_true")
    parser.add_argument("--mujoco", action="store_true",
                        help="only IMPALA and A2C learning runs on HalfCheetah-v5")  # fmt: skip
    parser.add_argument("--mujoco_steps", type=int, default=1_000_000)
    parser.add_argument("--mujoco_seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--logroot", default="/tmp/bench_distributed")
    parser.add_argument("--plot_dir", default=None, help="write the MuJoCo curves here (SVG)")
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_distributed")
    if args.mujoco:
        print(f"calibration: sum(range(1000)) {calibration():.1f} µs; load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        mujoco_learning(args.mujoco_steps, args.mujoco_seeds, args.logroot, args.plot_dir)
        return
    seconds, repeats = (5.0, 1) if args.quick else (args.seconds, args.repeats)
    report.note(f"Calibration (`sum(range(1000))`) {calibration():.1f} µs.")
    table = report.table(
        f"Sampling and training throughput, medians of {repeats} x {seconds:g} s",
        ["", "1 actor", "2 actors", "ratio", "bare processes, same run",
         "steps per actor CPU second, 1 / 2"],
        [40, 14, 14, 6, 24, 34],
    )  # fmt: skip
    common = {"seconds": seconds, "learn": False}
    shm = scaling(table, "IMPALA Pong sampling (trajectories in shared slots)", "IMPALA", IMPALA_THROUGHPUT, repeats,
                  baseline=True, transport="shm", **common)  # fmt: skip
    print(f"  IMPALA Pong actors (shm, 2 actors): {transfer_share(shm['last_2'])}")
    values = scaling(table, "IMPALA Pong sampling (trajectories by value)", "IMPALA", IMPALA_THROUGHPUT, 1,
                     transport="values", **common)  # fmt: skip
    print(f"  IMPALA Pong actors (values, 2 actors): {transfer_share(values['last_2'])}")
    trained = scaling(table, "IMPALA Pong training (the learner on the same cores)", "IMPALA", IMPALA_THROUGHPUT, 1,
                      transport="shm", seconds=seconds, learn=True)  # fmt: skip
    print(f"  IMPALA Pong actors (training, 2 actors): {transfer_share(trained['last_2'])}")
    print(
        f"  learner: {json.dumps({k: round(v, 2) for k, v in trained['last_2']['learner'].items()})}"
    )
    scaling(
        table,
        "ES HalfCheetah-v5 sampling",
        "ES",
        ES_THROUGHPUT,
        repeats,
        baseline=True,
        seconds=seconds,
    )
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    if args.skip_learning:
        report.write(args.record)
        return
    budget = ["--test_every_steps", "5000", "--target_return", "475"]
    seeds = [0] if args.quick else [0, 1]
    learning("IMPALA CartPole-v1 (2 actors)", "IMPALA",
             [*budget, "--max_sample_steps", "300000", "--eval_episodes", "5"], seeds)  # fmt: skip
    learning("A2C CartPole-v1 (2 actors)", "A2C",
             [*budget, "--max_sample_steps", "200000", "--no_progress"], seeds)  # fmt: skip
    learning("ES CartPole-v1 (2 actors)", "ES",
             ["--env", "CartPole-v1", "--target_return", "475", "--train_steps", "60"], seeds)  # fmt: skip
    report.write(args.record)


if __name__ == "__main__":
    main()
