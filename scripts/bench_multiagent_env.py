"""Steps per second of ``MultiAgentVectorEnv`` (2 actors) against the same envs stepped here.

    python scripts/bench_multiagent_env.py                        # simple_spread, 16 envs, 10 s
    python scripts/bench_multiagent_env.py --env simple_tag --envs 8 --seconds 2

Both sides step the same batch (:class:`parl.env.multiagent_vector_env.MAEnvList`, the code an
actor runs) with the same fixed random actions and auto-reset, so the ratio is what the actors
buy: the serial side is one process stepping every env, the vector side ``--workers`` actors
stepping their share of the envs in parallel, with the caller waiting. Each side runs
``--repeat`` times, alternating, and the best run of each is reported (other processes on the
machine only slow a run down). An env step is one step of one env (all its agents).
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import numpy as np
from benchrecord import Report, add_record_flag
from gymnasium.vector import AutoresetMode

from parl.env import MAenv, MultiAgentVectorEnv
from parl.env.multiagent_vector_env import MAEnvList


def _actions(num_envs: int, act_shape_n: list[int], count: int) -> list[np.ndarray]:
    """``count`` batches of random discrete actions (made before timing)."""
    rng = np.random.default_rng(0)
    return [np.stack([rng.integers(0, act_shape_n) for _ in range(num_envs)]) for _ in range(count)]


def serial_rate(env_id: str, num_envs: int, seconds: float, batches: list[np.ndarray]) -> float:
    """Env steps per second of the batch stepped in this process."""
    fn = functools.partial(MAenv, env_id)
    batch = MAEnvList([fn] * num_envs, AutoresetMode.SAME_STEP, False)
    first = batch.envs[0]
    obs = np.zeros((num_envs, first.n, max(first.obs_shape_n)), np.float32)
    rewards = np.zeros((num_envs, first.n))
    terms, truncs = np.zeros((num_envs, first.n), bool), np.zeros((num_envs, first.n), bool)
    batch.reset(list(range(num_envs)), None, obs)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch.step(batches[steps % len(batches)], obs, rewards, terms, truncs)
        steps += 1
    rate = steps * num_envs / (time.perf_counter() - start)
    batch.close()
    return rate


def vector_rate(
    env_id: str, num_envs: int, workers: int, seconds: float, batches: list[np.ndarray]
) -> float:
    """Env steps per second of ``MultiAgentVectorEnv`` with ``workers`` actors."""
    with MultiAgentVectorEnv.make(env_id, num_envs, num_workers=workers) as venv:
        venv.reset(seed=0)
        for actions in batches[:5]:  # warm up: the doorbell's first ring starts its loop
            venv.step(actions)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            venv.step(batches[steps % len(batches)])
            steps += 1
        return steps * num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--env",
        default="simple_spread",
        help="an MPE scenario (discrete actions; foraging, with its changing masks, is not "
        "measured here)",
    )
    parser.add_argument("--envs", type=int, default=16, help="envs in the batch (8 or more)")
    parser.add_argument("--workers", type=int, default=2, help="actors of the vector env")
    parser.add_argument("--seconds", type=float, default=10.0, help="time per measured run")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each side")
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_multiagent_env")
    probe = MAenv(args.env)
    if probe.continuous_actions or args.env.startswith("Foraging"):
        parser.error("--env: use an MPE scenario (discrete actions, no masks) for this figure")
    batches = _actions(args.envs, probe.act_shape_n, 64)
    probe.close()
    serial, vector = [], []
    for _ in range(args.repeat):
        serial.append(serial_rate(args.env, args.envs, args.seconds, batches))
        vector.append(vector_rate(args.env, args.envs, args.workers, args.seconds, batches))
    best_serial, best_vector = max(serial), max(vector)
    table = report.table(
        f"{args.env}, {args.envs} envs, {os.cpu_count()} cores, best of {args.repeat} runs "
        f"of {args.seconds:g} s",
        ["", "env steps/s", "ratio", "aim"],
        [34, 12, 8, 8],
    )
    table.row("serial, one process", f"{best_serial:,.0f}", "1.00x")
    ratio = best_vector / best_serial
    table.row(
        f"`MultiAgentVectorEnv`, {args.workers} actors",
        f"{best_vector:,.0f}",
        f"{ratio:.2f}x",
        ">= 1.7x",
    )
    print(f"ratio: {ratio:.2f}x")
    report.write(args.record)


if __name__ == "__main__":
    main()
