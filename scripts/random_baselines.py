"""A uniformly random policy's mean episode return on a gymnasium env, as a record beside the
results: the zero of the normalised scores (``scripts/plot_normalised.py``).

    python scripts/random_baselines.py HalfCheetah-v5               # print the figures
    python scripts/random_baselines.py HalfCheetah-v5 --write       # docs/results/random/<env>.json

Each episode draws its actions from the action space (seeded), from a reset seeded with
``--seed`` plus the episode's index, and runs until the env ends or truncates it.
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


def random_returns(env_id: str, episodes: int, seed: int) -> list[float]:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env", help="gymnasium env id, e.g. HalfCheetah-v5")
    parser.add_argument("--episodes", type=int, default=10, help="episodes to average")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    parser.add_argument("--write", action="store_true", help="write docs/results/random/<env>.json")
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error(f"--episodes {args.episodes}: give at least 2 (the record has an sd)")
    returns = random_returns(args.env, args.episodes, args.seed)
    record = {
        "env": args.env,
        "measure": "return",
        "policy": "uniformly random actions",
        "episodes": args.episodes,
        "seed": args.seed,
        "mean": round(statistics.mean(returns), 1),
        "sd": round(statistics.stdev(returns), 1),
        "command": f"python scripts/random_baselines.py {args.env} --episodes {args.episodes} "
        f"--seed {args.seed}",
        "commit": current_commit(),
        "versions": versions(),
    }
    print(f"{args.env}: mean return {record['mean']} (sd {record['sd']}) over {args.episodes} "
          "episodes of random actions")  # fmt: skip
    if args.write:
        FOLDER.mkdir(parents=True, exist_ok=True)
        path = FOLDER / f"{args.env}.json"
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
