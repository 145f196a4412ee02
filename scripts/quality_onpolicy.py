"""PPO's quality on MuJoCo: `examples/PPO/train.py` for 1M steps (HalfCheetah with rl-zoo's
tuned configuration, Hopper with the example's own, PARL's), several seeds, 10 deterministic evaluation episodes at the end; prints the results
table and draws the evaluation curves.

    python scripts/quality_onpolicy.py                                   # both tasks, seeds 0 1 2
    python scripts/quality_onpolicy.py --env Hopper-v5 --seeds 0 --steps 100000 --parallel 1
    python scripts/quality_onpolicy.py --report --plot_dir docs/curves   # from finished runs
    python scripts/quality_onpolicy.py --atari BreakoutNoFrameskip-v4 --steps 300000 --seeds 0

``--atari ENV`` trains the example's Atari configuration (PARL's: 8 envs x 128 steps, 4 epochs
of 4 minibatches, 84x84 frames) and reports the returns of whole training games (the mean of the
last 10, as logged to TensorBoard) along the run, against uniformly random play measured in the
same run with the same wrappers; no greedy evaluation (a greedy Breakout policy may never press
FIRE after a lost life, and the game then runs to its frame limit).

``--report`` trains nothing: it reads the evaluations the runs under ``--logroot`` wrote to
TensorBoard (runs may come from several invocations, e.g. one seed at a time) and prints the
table, counting only runs that reached ``--steps``.

When the table is printed, a JSON record per task (``scripts/results.py``: command, commit,
versions, machine, seeds, each seed's final and best evaluation, wall time) is written to
``--record_dir`` as ``ppo_<env>.json``; ``--record_dir docs/results`` publishes it to the tables
that ``scripts/render_results.py`` renders.

Each seed runs in its own interpreter (one torch thread), ``--parallel`` at a time; each writes
TensorBoard events (and a checkpoint) under ``--logroot/<env>/seed<k>``. Both tasks normalise
observations and rewards and run 1 env. HalfCheetah's configuration is rl-baselines3-zoo's
(256x256 ReLU networks, log-std starting at -2; the same as in ``bench_onpolicy.py``); Hopper's is
the example's MuJoCo default (see ``CONFIGS`` for why not rl-zoo's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"HalfCheetah-v5": 3000.0, "Hopper-v5": 2400.0}  # the 3-seed mean to reach after 1M

# HalfCheetah runs the example's ``--config zoo`` (rl-baselines3-zoo's ppo.yml, in
# ``examples/PPO/config.py``).
# rl-zoo's Hopper setting (n_steps 512, batch 32, 5 epochs, gamma 0.999, lr 9.8e-5, 256x256
# ReLU, log-std -2, ortho_init False) stands still on Hopper-v5: seeds 0 and 1 of ours scored
# 999 and ~990 from 100k to 1M steps (the hopper balances for the whole 1,000 steps and takes
# the healthy reward; ortho_init=False changed nothing by 300k), and SB3 2.9.2 itself with that
# configuration scored 990 and 992 at 50k and 100k. Hopper runs the example's MuJoCo
# configuration instead: PARL's (CleanRL's and the PPO paper's), 2,048 steps, 10 epochs of 32
# minibatches, lr 3e-4 decaying, 64x64 tanh, which climbs past it (1,259 at 150k).
CONFIGS: dict[str, str] = {"HalfCheetah-v5": "zoo", "Hopper-v5": "parl"}  # --config presets
SOURCES = {"HalfCheetah-v5": "rl-zoo's configuration", "Hopper-v5": "PARL's MuJoCo configuration"}
COMMON = {"eval_episodes": 10, "progress": False}


def run_one(env_id: str, seed: int, steps: int, logdir: str, every: int) -> dict[str, Any]:
    """Train one seed in this interpreter; its evaluation history."""
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "PPO"))
    import train as ppo_train
    from config import config_for

    torch.set_num_threads(1)
    config = {
        **config_for(env_id, True, CONFIGS[env_id]),
        **COMMON,
        "env": env_id,
        "seed": seed,
        "train_total_steps": steps,
        "test_every_steps": every,
        "logdir": logdir,
    }
    result = ppo_train.train(config)
    return {
        "env": env_id,
        "seed": seed,
        "steps": result.total_steps,
        "train_seconds": result.train_seconds,
        "evaluations": result.eval_history,
    }


def run_atari(env_id: str, seed: int, steps: int, logdir: str) -> None:
    """Train the Atari configuration for ``steps``; print the training-game returns along the
    way and random play's."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "PPO"))
    sys.path.insert(0, str(ROOT / "scripts"))
    import plot_curves
    import train as ppo_train
    from config import atari_config
    from env_utils import make_env

    torch.set_num_threads(1)
    env = make_env(env_id, "atari", 0.99, test=True)  # whole games, raw scores
    random_returns, rng = [], np.random.default_rng(seed)
    env.reset(seed=seed + 20_000)
    while len(random_returns) < 20:
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        if "episode" in info:
            random_returns.append(float(info["episode"]["r"]))
        if terminated or truncated:
            env.reset()
    env.close()
    config = {
        **atari_config,
        "env": env_id,
        "seed": seed,
        "train_total_steps": steps,
        "test_every_steps": steps,
        "eval_episodes": 0,
        "logdir": logdir,
        "progress": False,
    }
    result = ppo_train.train(config)
    points = plot_curves.read_scalars(logdir, "train/episode_reward")
    marks = [steps * k // 4 for k in (1, 2, 3, 4)]
    along = []
    for mark in marks:
        before = [value for step, value in points if step <= mark]
        along.append(f"{before[-1]:.1f} at {mark:,}" if before else f"- at {mark:,}")
    print(
        f"PPO on {env_id} seed {seed}: mean of the last 10 training games "
        + ", ".join(along)
        + f"; random play {np.mean(random_returns):.1f} (20 games); "
        + f"{result.total_steps / result.train_seconds:.0f} steps/s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--test_every_steps", type=int, default=100_000)
    parser.add_argument("--parallel", type=int, default=2, help="seeds trained at once")
    parser.add_argument("--logroot", default="/tmp/quality_onpolicy")
    parser.add_argument("--plot_dir", default=None, help="write <env>.svg curves here")
    parser.add_argument("--record_dir", default=None, help="default: --logroot")
    parser.add_argument("--report", action="store_true", help="only the table of finished runs")
    parser.add_argument("--atari", metavar="ENV", help="an Atari run instead (see above)")
    parser.add_argument("--one", nargs=2, metavar=("ENV", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: one seed, its result as the last line of stdout
        env_id, seed = args.one[0], int(args.one[1])
        logdir = os.path.join(args.logroot, env_id, f"seed{seed}")
        result = run_one(env_id, seed, args.steps, logdir, args.test_every_steps)
        print(json.dumps(result), flush=True)
        return

    if args.atari:
        for seed in args.seeds:
            logdir = os.path.join(args.logroot, args.atari, f"seed{seed}")
            run_atari(args.atari, seed, args.steps, logdir)
            if args.plot_dir:
                import plot_curves

                plot_curves.main([f"{logdir}:seed {seed}", "--tag", "train/episode_reward",
                                  "--out", os.path.join(args.plot_dir, f"ppo_{args.atari}.svg"),
                                  "--title", f"PPO on {args.atari} (PARL's Atari configuration)",
                                  "--y_title", "mean score of the last 10 training games"])  # fmt: skip
        return
    if args.report:
        results = finished_runs(args.env, args.seeds, args.steps, args.logroot)
        report(results, args)
        record(results, args, None)
        return
    sys.path.insert(0, str(ROOT / "scripts"))
    from results import current_commit

    args.commit = current_commit()  # the records name the code that trained, not a later HEAD
    started = time.perf_counter()
    jobs = [(env_id, seed) for env_id in args.env for seed in args.seeds]
    results: list[dict[str, Any]] = []
    running: list[tuple[tuple[str, int], subprocess.Popen]] = []
    while jobs or running:
        while jobs and len(running) < args.parallel:
            env_id, seed = jobs.pop(0)
            command = [sys.executable, __file__, "--one", env_id, str(seed), "--steps",
                       str(args.steps), "--test_every_steps", str(args.test_every_steps),
                       "--logroot", args.logroot]  # fmt: skip
            running.append(
                ((env_id, seed), subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
            )
        (env_id, seed), process = running.pop(0)
        out, _ = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"{env_id} seed {seed} failed (exit {process.returncode})")
        result = json.loads(out.strip().splitlines()[-1])
        last = result["evaluations"][-1]
        print(f"{env_id} seed {seed}: {last[1]:.1f} after {last[0]:,} steps "
              f"({result['steps'] / result['train_seconds']:.0f} steps/s)", flush=True)  # fmt: skip
        results.append(result)
    report(results, args)
    record(results, args, time.perf_counter() - started)


def finished_runs(
    envs: list[str], seeds: list[int], steps: int, logroot: str
) -> list[dict[str, Any]]:
    """The runs under ``logroot`` whose last evaluation is at ``steps`` or later."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import plot_curves

    results = []
    for env_id in envs:
        for seed in seeds:
            folder = os.path.join(logroot, env_id, f"seed{seed}")
            try:
                points = plot_curves.read_scalars(folder, "eval/episode_reward")
            except SystemExit:  # no folder, or no evaluation yet
                points = []
            if points and points[-1][0] >= steps - 1024:  # the last rollout may stop short
                results.append({"env": env_id, "seed": seed, "evaluations": points})
            else:
                print(f"{env_id} seed {seed}: not finished under {logroot}", flush=True)
    return results


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"\nPPO, {args.steps:,} steps, 10 deterministic episodes at the end")
    for env_id in args.env:
        finals = [r["evaluations"][-1][1] for r in results if r["env"] == env_id]
        if not finals:
            continue
        mean = statistics.mean(finals)
        spread = statistics.stdev(finals) if len(finals) > 1 else 0.0
        verdict = "met" if mean >= TARGETS[env_id] else "not met"
        partial = ""
        if len(finals) < len(args.seeds):
            partial, verdict = f" ({len(finals)} of {len(args.seeds)} seeds)", f"{verdict} so far"
        print(f"  {env_id} ({SOURCES[env_id]}): seeds {', '.join(f'{f:.0f}' for f in finals)}; mean {mean:.0f} "
              f"(sd {spread:.0f}){partial}; target >= {TARGETS[env_id]:.0f}: {verdict}")  # fmt: skip
        if args.plot_dir:
            sys.path.insert(0, str(ROOT / "scripts"))
            import plot_curves

            seeds = [r["seed"] for r in results if r["env"] == env_id]
            runs = [f"{os.path.join(args.logroot, env_id, f'seed{k}')}:seed {k}" for k in seeds]
            plot_curves.main([*runs, "--tag", "eval/episode_reward", "--out",
                              os.path.join(args.plot_dir, f"ppo_{env_id}.svg"), "--title",
                              f"PPO on {env_id} ({SOURCES[env_id]}), deterministic evaluation",
                              "--y_title", "mean return of 10 episodes"])  # fmt: skip


def record(results: list[dict[str, Any]], args: argparse.Namespace, wall: float | None) -> None:
    """Write one record per task of ``results`` to ``--record_dir`` (silently: the printed
    table stays what it was)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from results import write_record

    folder = args.record_dir or args.logroot
    for env_id in args.env:
        runs = [r for r in results if r["env"] == env_id]
        if not runs:
            continue
        per_seed = [
            {
                "seed": r["seed"],
                "final": r["evaluations"][-1][1],
                "best": max(value for _, value in r["evaluations"]),
                "wall_seconds": r.get("train_seconds"),
                "evaluations": [[int(step), float(value)] for step, value in r["evaluations"]],
            }
            for r in runs
        ]
        curve = os.path.join(args.plot_dir, f"ppo_{env_id}.svg") if args.plot_dir else None
        missing = len(args.seeds) - len(runs)
        notes = [f"{missing} of {len(args.seeds)} seeds not finished"] if missing else []
        if wall is None:
            notes.append("read back with --report: the wall time of the run is not known")
        write_record(
            os.path.join(folder, f"ppo_{env_id}.json"),
            algorithm="PPO",
            page="ppo",
            env=env_id,
            configuration=SOURCES[env_id],
            metric=f"mean return of {COMMON['eval_episodes']} deterministic evaluation episodes",
            command=" ".join(["python", os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
            budget_steps=args.steps,
            per_seed=per_seed,
            wall_seconds=wall,
            curve=curve,
            note="; ".join(notes) or None,
            commit=getattr(args, "commit", None),
        )


if __name__ == "__main__":
    main()
