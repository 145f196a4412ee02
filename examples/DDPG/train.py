"""DDPG on MuJoCo (HalfCheetah-v5 by default), PARL 2.x's example made resumable.

    python examples/DDPG/train.py --env HalfCheetah-v5 --seed 0
    python examples/DDPG/train.py --resume --save_rpm       # continue where it stopped
    tensorboard --logdir train_log

``gym.make`` is wrapped in ``parl.env.CompatWrapper`` (old 4-value step) and
``ActionMappingWrapper`` (actions in [-1, 1]), as in PARL's script. Exploration adds Gaussian
noise (``--expl_noise``) to the deterministic action. Training runs whole episodes; a checkpoint
(models, optimizers, random states, counters, and with ``--save_rpm`` the replay memory) is
written after each evaluation and at the end; ``--resume`` continues exactly.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from mujoco_agent import MujocoAgent
from mujoco_model import MujocoModel
from tqdm import tqdm

from parl.algorithms import DDPG
from parl.env import ActionMappingWrapper, CompatWrapper
from parl.utils import ReplayMemory, logger, set_seed, summary
from parl.utils.interrupts import ctrl_c_deferred
from parl.utils.train_flags import (
    add_common_flags,
    example_parser,
    non_negative_int,
    refuse_resume_without_checkpoint,
)

EVAL_EPISODES = 5
MEMORY_SIZE = int(1e6)
GAMMA = 0.99
TAU = 0.005
ACTOR_LR = 1e-3
CRITIC_LR = 1e-3


def make_env(env_id: str) -> Any:
    return ActionMappingWrapper(CompatWrapper(gym.make(env_id)))


def build_agent(args: argparse.Namespace, obs_dim: int, action_dim: int) -> MujocoAgent:
    model = MujocoModel(obs_dim, action_dim, args.hidden)
    algorithm = DDPG(
        model, gamma=GAMMA, tau=TAU, actor_lr=ACTOR_LR, critic_lr=CRITIC_LR, device=args.device
    )
    return MujocoAgent(algorithm, action_dim, expl_noise=args.expl_noise)


def run_train_episode(agent, env, rpm, args, counters) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    action_dim = env.action_space.shape[0]
    obs, done = env.reset(), False
    episode_reward, episode_steps = 0.0, 0
    while not done:
        episode_steps += 1
        if rpm.size() < args.warmup_steps:
            action = np.random.uniform(-1, 1, size=action_dim)
        else:
            action = agent.sample(obs)
        next_obs, reward, done, info = env.step(action)
        terminal = float(done and not info.get("TimeLimit.truncated", False))
        rpm.append(obs, action, reward, next_obs, terminal)
        obs = next_obs
        episode_reward += float(reward)
        if rpm.size() >= args.warmup_steps:
            losses = agent.learn(*rpm.sample_batch(args.batch_size))
            counters["updates"] += 1
            if counters["updates"] % 1000 == 0:
                summary.add_scalar("train/critic_loss", losses[0], counters["updates"])
                summary.add_scalar("train/actor_loss", losses[1], counters["updates"])
    return episode_reward, episode_steps


def run_evaluate_episodes(agent, env, eval_episodes: int, seed: int) -> float:  # type: ignore[no-untyped-def]
    total = 0.0
    for i in range(eval_episodes):
        obs, done = env.reset(seed=seed + i), False
        while not done:
            obs, reward, done, _ = env.step(agent.predict(obs))
            total += float(reward)
    return total / eval_episodes


def save_checkpoint(args, agent, rpm, env, counters) -> None:  # type: ignore[no-untyped-def]
    extra = {
        # the memory saved with it: a resume can tell that file from an older one
        "rpm_written": bool(args.save_rpm),
        "rpm": rpm.stamp() if args.save_rpm else None,
        "env_rng": json.dumps(env.unwrapped.np_random.bit_generator.state),
        "algorithm": {k: getattr(agent.alg, k) for k in ("total_it",) if hasattr(agent.alg, k)},
    }
    with ctrl_c_deferred():  # the checkpoint and the memory are of one step
        agent.save_checkpoint(os.path.join(args.logdir, "checkpoint.pt"), counters, extra)
        if args.save_rpm:
            rpm.save(os.path.join(args.logdir, "rpm.npz"))


def restore_checkpoint(args, agent, rpm, env) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    counters, extra = agent.restore_checkpoint(os.path.join(args.logdir, "checkpoint.pt"))
    env.unwrapped.np_random.bit_generator.state = json.loads(extra["env_rng"])
    for key, value in extra["algorithm"].items():
        setattr(agent.alg, key, value)
    rpm.load_beside_checkpoint(
        os.path.join(args.logdir, "rpm.npz"), extra.get("rpm"), extra.get("rpm_written", True)
    )
    logger.info("resumed from %s at step %d", args.logdir, counters["total_steps"])
    return dict(counters)


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    logger.info("DDPG, env %s, seed %d", args.env, args.seed)
    env, eval_env = make_env(args.env), make_env(args.env)
    set_seed(args.seed)
    env.reset(seed=args.seed)
    obs_dim, action_dim = env.observation_space.shape[0], env.action_space.shape[0]
    agent = build_agent(args, obs_dim, action_dim)
    rpm = ReplayMemory(
        max_size=min(MEMORY_SIZE, args.train_total_steps), obs_dim=obs_dim, act_dim=action_dim
    )
    summary.set_dir(args.logdir)
    c = {"total_steps": 0, "test_flag": 0, "updates": 0}
    if args.resume:
        c = restore_checkpoint(args, agent, rpm, env)
    avg_reward = float("nan")
    stop_at = min(args.train_total_steps, args.stop_after_steps or args.train_total_steps)
    bar = tqdm(
        total=args.train_total_steps, initial=int(c["total_steps"]), disable=not args.progress
    )
    while c["total_steps"] < stop_at:
        episode_reward, episode_steps = run_train_episode(agent, env, rpm, args, c)
        c["total_steps"] += episode_steps
        bar.update(episode_steps)
        summary.add_scalar("train/episode_reward", episode_reward, c["total_steps"])
        if (c["total_steps"] + 1) // args.test_every_steps >= c["test_flag"]:
            while (c["total_steps"] + 1) // args.test_every_steps >= c["test_flag"]:
                c["test_flag"] += 1
            avg_reward = run_evaluate_episodes(
                agent, eval_env, args.eval_episodes, args.seed + 10_000
            )
            summary.add_scalar("eval/episode_reward", avg_reward, c["total_steps"])
            bar.set_postfix(train=f"{episode_reward:.0f}", eval=f"{avg_reward:.0f}")
            save_checkpoint(args, agent, rpm, env, c)
    bar.close()
    save_checkpoint(args, agent, rpm, env, c)
    agent.save(os.path.join(args.logdir, "model.ckpt"))
    final = run_evaluate_episodes(agent, eval_env, args.eval_episodes, args.seed + 10_000)
    logger.info(
        "done: %d steps; evaluation over %d episodes: %.1f",
        c["total_steps"],
        args.eval_episodes,
        final,
    )
    summary.flush()
    return final


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="HalfCheetah-v5",
        action_space="continuous",
        algorithm="DDPG",
        defaults={
            "train_total_steps": 1_000_000,
            "test_every_steps": 5_000,
            "eval_episodes": EVAL_EPISODES,
            "logdir": os.path.join("train_log", "DDPG"),
        },
        skip=["xparl_addr"],
        aliases={"no_progress": ["--no_tqdm", "--no-progress"]},
        help={"env": "MuJoCo gymnasium env id"},
    )
    parser.add_argument(
        "--expl_noise",
        default=0.1,
        type=float,
        help="std of the Gaussian exploration noise (actions in [-1, 1])",
    )
    parser.add_argument(
        "--warmup_steps", default=int(1e4), type=int, help="random-action steps before learning"
    )
    parser.add_argument("--batch_size", default=256, type=int, help="transitions per gradient step")
    parser.add_argument("--hidden", default=256, type=int, help="width of the hidden layers")
    parser.add_argument("--save_rpm", action="store_true", help="checkpoint the replay memory too")
    parser.add_argument(
        "--stop_after_steps",
        type=non_negative_int,
        default=0,
        help="end this run early (at an episode's end), as if interrupted",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    refuse_resume_without_checkpoint(parser, args.resume, args.logdir)
    return args


if __name__ == "__main__":
    main()
