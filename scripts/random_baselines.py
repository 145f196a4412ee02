"""A uniformly random policy's mean episode return, as a record beside the results: the zero of
the normalised scores (``scripts/results_summary.py``, ``scripts/plot_normalised.py``).

    python scripts/random_baselines.py HalfCheetah-v5 --write
    python scripts/random_baselines.py simple_spread --mpe --agents sum --episodes 1000 \\
        --records maddpg_simple_spread --write

A gymnasium env's record is the zero of every record on that env whose figure is a return. An
MPE scenario's (``--mpe``, ``parl.env.multiagent_env.MAenv``) is the zero of the records named
by ``--records`` only: their figure adds the agents' returns (MADDPG's training episodes, as
PARL's curves do) or averages them (MAPPO's evaluations), with discrete or continuous
(``--continuous``) actions and mpe2's or PettingZoo 1.22's (``--legacy``) dynamics, all of which
move a random policy's figure. Each episode draws its actions from the action spaces (seeded),
from a reset seeded with ``--seed`` plus the episode's index, to the env's own end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, current_commit, versions

FOLDER = ROOT / "docs" / "results" / "random"
MEASURES = {"sum": "return (training episodes)", "mean": "return"}


def gym_returns(env_id: str, episodes: int, seed: int) -> list[float]:
    """Each episode's return under uniformly random actions."""
    import gymnasium as gym

    env = gym.make(env_id)
    env.action_space.seed(seed)
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def mpe_returns(
    scenario: str, episodes: int, seed: int, *, continuous: bool, legacy: bool, agents: str
) -> list[float]:
    """Each episode's return under uniformly random actions: the agents' returns added
    (``agents="sum"``) or averaged (``"mean"``)."""
    import numpy as np

    from parl.env.multiagent_env import MAenv

    env = MAenv(scenario, continuous, legacy_dynamics=legacy)
    rng = np.random.default_rng(seed)
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        totals = np.zeros(env.n)
        for _ in range(env.max_step):
            if continuous:
                actions = [rng.uniform(-1.0, 1.0, size) for size in env.act_shape_n]
            else:
                actions = [int(rng.integers(size)) for size in env.act_shape_n]
            _, rewards, dones, _ = env.step(actions)
            totals += rewards
            if all(dones):
                break
        returns.append(float(totals.sum() if agents == "sum" else totals.mean()))
    return returns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env", help="gymnasium env id (HalfCheetah-v5) or, with --mpe, a scenario")
    parser.add_argument("--episodes", type=int, default=10, help="episodes to average")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    parser.add_argument("--mpe", action="store_true", help="an MPE scenario of MAenv")
    parser.add_argument("--continuous", action="store_true", help="MPE: continuous actions")
    parser.add_argument("--legacy", action="store_true", help="MPE: PettingZoo 1.22's dynamics")
    parser.add_argument("--agents", choices=sorted(MEASURES), default="sum",
                        help="MPE: add or average the agents' returns")  # fmt: skip
    parser.add_argument("--records", nargs="+", default=None,
                        help="MPE: the records (file names without .json) this is the zero of")  # fmt: skip
    parser.add_argument(
        "--write", action="store_true", help="write docs/results/random/<name>.json"
    )
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error(f"--episodes {args.episodes}: give at least 2 (the record has an sd)")
    if args.mpe and not args.records:
        parser.error("--mpe needs --records: the records whose figure this random policy's matches")
    if not args.mpe and (args.continuous or args.legacy or args.records):
        parser.error("--continuous, --legacy and --records apply to --mpe scenarios only")
    command = f"python scripts/random_baselines.py {args.env} --episodes {args.episodes}"
    command += f" --seed {args.seed}"
    if args.mpe:
        returns = mpe_returns(args.env, args.episodes, args.seed, continuous=args.continuous,
                              legacy=args.legacy, agents=args.agents)  # fmt: skip
        flags = ["--mpe"] + ["--continuous"] * args.continuous + ["--legacy"] * args.legacy
        command += " " + " ".join([*flags, "--agents", args.agents, "--records", *args.records])
        kind = "continuous" if args.continuous else "discrete"
        policy = f"uniformly random {kind} actions" + (
            ", PettingZoo 1.22's dynamics" if args.legacy else ""
        )
        name = "_".join([args.env, kind, *(["legacy"] * args.legacy), args.agents])
        measure = MEASURES[args.agents]
    else:
        returns = gym_returns(args.env, args.episodes, args.seed)
        policy, name, measure = "uniformly random actions", args.env, "return"
    record = {
        "env": args.env,
        "measure": measure,
        "policy": policy,
        "records": args.records,
        "episodes": args.episodes,
        "seed": args.seed,
        "mean": round(statistics.mean(returns), 2),
        "sd": round(statistics.stdev(returns), 2),
        "command": command,
        "commit": current_commit(),
        "versions": versions(),
    }
    print(f"{args.env}: mean return {record['mean']} (sd {record['sd']}) over {args.episodes} "
          f"episodes of {policy}")  # fmt: skip
    if args.write:
        FOLDER.mkdir(parents=True, exist_ok=True)
        path = FOLDER / f"{name}.json"
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
