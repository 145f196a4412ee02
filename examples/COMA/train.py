"""COMA on cooperative multi-agent tasks through ``parl.env.multiagent_env.MAenv``: MPE's
simple_spread by default, or level-based foraging (whose action masks change every step).

    python examples/COMA/train.py --env simple_spread --seed 0
    python examples/COMA/train.py --env Foraging-8x8-2p-2f-coop-v3 --seed 0
    python examples/COMA/train.py --resume       # continue where it stopped
    tensorboard --logdir train_log

On-policy, as PARL's COMA example: each iteration plays ``--episodes_per_iteration`` episodes
with the current policy mixed with epsilon exploration, then takes one critic step and one
actor step on them; epsilon falls by ``--anneal_epsilon`` per iteration. The team reward is the
mean of the agents' rewards, and an episode cut by the limit ends there (as in PARL's example).
EPyMARL's COMA settings are flags: ``--optimizer adam``, ``--entropy_coef 0.001``,
``--standardise_rewards``. A checkpoint (networks, optimizers, random states, counters, the
reward statistics) is written after each evaluation and at the end; ``--resume`` continues
exactly.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import torch
from coma_agent import ComaAgent
from coma_model import ComaModel
from tqdm import tqdm

from parl.algorithms import COMA
from parl.core.checkpoint import load_file
from parl.env.multiagent_env import MAenv
from parl.env.multiagent_scenarios import check_env_id
from parl.utils import logger, set_seed, summary
from parl.utils.train_flags import (
    add_common_flags,
    add_legacy_dynamics_flag,
    example_parser,
    fraction,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    refuse_as_usage,
    refuse_other_flags,
    refuse_resume_without_checkpoint,
)

EVAL_EPISODES = 10
EVAL_SEED_OFFSET = 10_000
# flags a resumed run must share with the run that wrote the checkpoint (their values for a
# checkpoint that does not record them)
CHECKED_FLAGS = {"legacy_dynamics": False, "optimizer": "rmsprop", "standardise_rewards": False}


def checked_flags(args: Any) -> dict[str, Any]:
    """``CHECKED_FLAGS`` and ``--env``: another env's checkpoint would load wherever its networks
    have the same shapes (taken as this run's env where a checkpoint does not record it)."""
    return {**CHECKED_FLAGS, "env": args.env}


def stack_obs(obs_n: list[np.ndarray], width: int) -> np.ndarray:
    """``(n_agents, width)``: the agents' observations, a shorter one zero-padded (in
    ``simple_tag``, ``simple_crypto`` or ``simple_world_comm`` agents see different amounts)."""
    out = np.zeros((len(obs_n), width), np.float32)
    for i, obs in enumerate(obs_n):
        out[i, : np.size(obs)] = np.ravel(obs)
    return out


def extra_state(agent: ComaAgent, flags: dict[str, Any]) -> dict[str, Any]:
    """What a training checkpoint holds beside the networks: the update count, the reward
    statistics (``--standardise_rewards``) and the flags a resume must share."""
    return {"train_steps": agent.train_steps, "reward_stats": agent.reward_stats_state(), **flags}


def run_episode(
    env: MAenv, agent: ComaAgent, seed: int, epsilon: float, greedy: bool
) -> tuple[dict[str, np.ndarray], float, int]:
    """One episode in PARL's COMA layout (``episode limit`` slots, padding after the end);
    returns it, its team return and its length."""
    slots, n = env.max_step, env.n
    episode = {
        "o": np.zeros((slots, n, env.get_env_info()["obs_shape"]), np.float32),
        "s": np.zeros((slots, env.state_shape), np.float32),
        "u": np.zeros((slots, n, 1), np.int64),
        "r": np.zeros((slots, 1), np.float32),
        "avail_u": np.zeros((slots, n, env.n_actions), np.float32),
        "padded": np.ones((slots, 1), np.float32),
        "isover": np.ones((slots, 1), np.float32),
    }
    obs_n = env.reset(seed=seed)
    agent.init_hidden()
    last = np.full(n, -1)
    total, t, done = 0.0, 0, False
    while not done:
        obs = stack_obs(obs_n, env.get_env_info()["obs_shape"])
        avail = env.get_avail_actions().astype(np.float32)
        actions = agent.sample(obs, last, avail, epsilon, greedy=greedy)
        state = env.state()
        obs_n, reward_n, done_n, _ = env.step([int(a) for a in actions])
        reward, done = float(np.mean(reward_n)), any(done_n)
        for key, value in (
            ("o", obs), ("s", state), ("u", actions[:, None]), ("r", reward),
            ("avail_u", avail), ("padded", 0.0), ("isover", float(done)),
        ):  # fmt: skip
            episode[key][t] = value
        total, last, t = total + reward, actions, t + 1
    return episode, total, t


def evaluate(env: MAenv, agent: ComaAgent, episodes: int, seed: int) -> float:
    returns = [run_episode(env, agent, seed + i, 0.0, greedy=True)[1] for i in range(episodes)]
    return float(np.mean(returns))


def build_agent(args: argparse.Namespace, env: MAenv) -> ComaAgent:
    model = ComaModel(env.get_env_info()["obs_shape"], env.state_shape, env.n, env.n_actions)
    algorithm = COMA(
        model, env.n_actions, env.n, grad_norm_clip=args.grad_norm_clip, actor_lr=args.actor_lr,
        critic_lr=args.critic_lr, gamma=args.gamma, td_lambda=args.td_lambda,
        optimizer=args.optimizer, entropy_coef=args.entropy_coef, device=args.device,
    )  # fmt: skip
    return ComaAgent(
        algorithm, env.n, env.n_actions, args.target_update_cycle, args.standardise_rewards
    )


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    logger.info("COMA, env %s, seed %d", args.env, args.seed)
    env, eval_env = (MAenv(args.env, legacy_dynamics=args.legacy_dynamics) for _ in range(2))
    set_seed(args.seed)
    agent = build_agent(args, env)
    summary.set_dir(args.logdir)
    checkpoint = os.path.join(args.logdir, "checkpoint.pt")
    c: dict[str, Any] = {"total_steps": 0, "episodes": 0, "iterations": 0, "test_flag": 0}
    flags = {flag: getattr(args, flag) for flag in checked_flags(args)}
    if args.resume:
        written = load_file(checkpoint).get("extra", {})
        refuse_other_flags(make_parser(), args, written, checked_flags(args), args.logdir)
        counters, extra = agent.restore_checkpoint(checkpoint)
        c, agent.train_steps = dict(counters), extra["train_steps"]
        agent.load_reward_stats_state(extra.get("reward_stats"))
        logger.info("resumed from %s at step %d", args.logdir, c["total_steps"])
    avg_return = float("nan")
    stop_at = min(args.train_total_steps, args.stop_after_steps or args.train_total_steps)
    bar = tqdm(
        total=args.train_total_steps, initial=int(c["total_steps"]), disable=not args.progress
    )
    while c["total_steps"] < stop_at:
        epsilon = max(args.min_epsilon, args.epsilon - args.anneal_epsilon * c["iterations"])
        episodes, returns = [], []
        for _ in range(args.episodes_per_iteration):
            # every episode has its own seed: a resumed run meets the same episodes
            seed = args.seed * 1_000_000 + int(c["episodes"])
            episode, episode_return, steps = run_episode(env, agent, seed, epsilon, greedy=False)
            episodes.append(episode)
            returns.append(episode_return)
            c["total_steps"] += steps
            c["episodes"] += 1
            bar.update(steps)
        batch = {key: np.stack([e[key] for e in episodes]) for key in episodes[0]}
        critic_loss, actor_loss = agent.learn(batch, epsilon)
        c["iterations"] += 1
        summary.add_scalar("train/episode_return", float(np.mean(returns)), c["total_steps"])
        if c["iterations"] % 10 == 0:
            summary.add_scalar("train/critic_loss", critic_loss, c["total_steps"])
            summary.add_scalar("train/actor_loss", actor_loss, c["total_steps"])
            summary.add_scalar("train/epsilon", epsilon, c["total_steps"])
        if c["total_steps"] // args.test_every_steps >= c["test_flag"]:
            while c["total_steps"] // args.test_every_steps >= c["test_flag"]:
                c["test_flag"] += 1
            avg_return = evaluate(eval_env, agent, args.eval_episodes, args.seed + EVAL_SEED_OFFSET)
            summary.add_scalar("eval/episode_return", avg_return, c["total_steps"])
            bar.set_postfix(train=f"{np.mean(returns):.1f}", eval=f"{avg_return:.1f}")
            agent.save_checkpoint(checkpoint, c, extra_state(agent, flags))
    bar.close()
    agent.save_checkpoint(checkpoint, c, extra_state(agent, flags))
    agent.save(os.path.join(args.logdir, "model.ckpt"))
    final = evaluate(eval_env, agent, args.eval_episodes, args.seed + EVAL_SEED_OFFSET)
    logger.info(
        "done: %d steps; evaluation over %d episodes: %.2f",
        c["total_steps"], args.eval_episodes, final,
    )  # fmt: skip
    summary.flush()
    return final


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="simple_spread",
        gym_env=False,
        defaults={
            "train_total_steps": 2_000_000,
            "test_every_steps": 20_000,
            "eval_episodes": EVAL_EPISODES,
            "logdir": os.path.join("train_log", "COMA"),
        },
        skip=["xparl_addr"],
        aliases={"no_progress": ["--no_tqdm", "--no-progress"]},
        help={"env": "an MPE scenario (simple_spread, ...) or a foraging id"},
    )
    add_legacy_dynamics_flag(parser)
    parser.add_argument(
        "--episodes_per_iteration", default=5, type=positive_int, help="episodes per update"
    )
    parser.add_argument(
        "--actor_lr", default=1e-4, type=positive_float, help="the actor's learning rate"
    )
    parser.add_argument(
        "--critic_lr", default=1e-3, type=positive_float, help="the critic's learning rate"
    )
    parser.add_argument("--gamma", default=0.99, type=fraction, help="discount factor")
    parser.add_argument("--td_lambda", default=0.8, type=fraction, help="lambda of the critic")
    parser.add_argument(
        "--grad_norm_clip",
        default=10.0,
        type=positive_float,
        help="clip each optimizer's gradients",
    )
    parser.add_argument("--epsilon", default=0.5, type=fraction, help="initial exploration share")
    parser.add_argument(
        "--anneal_epsilon",
        default=0.00064,
        type=non_negative_float,
        help="epsilon's fall per iteration",
    )
    parser.add_argument(
        "--min_epsilon", default=0.02, type=fraction, help="final exploration share"
    )
    parser.add_argument(
        "--optimizer", default="rmsprop", choices=["rmsprop", "adam"],
        help="the actor's and the critic's optimizer (RMSprop is PARL's, Adam EPyMARL's)",
    )  # fmt: skip
    parser.add_argument(
        "--entropy_coef", default=0.0, type=non_negative_float,
        help="weight of the policy's entropy in the actor's loss (EPyMARL's COMA: 0.001)",
    )  # fmt: skip
    parser.add_argument(
        "--standardise_rewards", action="store_true",
        help="learn the team rewards standardised by their running mean and deviation "
        "(EPyMARL's default)",
    )  # fmt: skip
    parser.add_argument(
        "--target_update_cycle", default=200, type=positive_int,
        help="updates between two copies into the target critic",
    )  # fmt: skip
    parser.add_argument(
        "--stop_after_steps", type=non_negative_int, default=0,
        help="end this run early (at an iteration's end), as if interrupted",
    )  # fmt: skip
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    refuse_as_usage(
        parser,
        lambda: check_env_id(args.env, legacy_dynamics=args.legacy_dynamics, importable=True),
    )
    refuse_resume_without_checkpoint(parser, args.resume, args.logdir)
    return args


if __name__ == "__main__":
    main()
