"""DQN / DDQN on CartPole-v1 (default) or an Atari game (``--env PongNoFrameskip-v4``).

    python examples/DQN/train.py                                  # CartPole-v1, ~50k steps
    python examples/DQN/train.py --algo DDQN --dueling            # Double DQN, dueling head
    python examples/DQN/train.py --env PongNoFrameskip-v4 --train_total_steps 10000000
    python examples/DQN/train.py --resume                         # go on from the checkpoint
    tensorboard --logdir train_log

Written as a PARL 2.x script: ``gym.make`` wrapped in ``parl.env.CompatWrapper`` (the old
4-value ``step`` and 1-value ``reset``). CartPole uses rl-zoo's hyperparameters. Training runs
whole episodes; a checkpoint (models, optimizers, random states, counters and, with
``--save_rpm``, the replay memory) is written after each evaluation and at the end, so
``--resume`` continues exactly where the run stopped.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from agent import DQNAgent
from model import AtariModel, CartpoleModel
from tqdm import tqdm

from parl.algorithms import DDQN, DQN
from parl.env import CompatWrapper
from parl.utils import ReplayMemory, logger, set_seed, summary
from parl.utils.interrupts import ctrl_c_deferred
from parl.utils.train_flags import (
    add_common_flags,
    example_parser,
    non_negative_int,
    positive_int,
    refuse_resume_without_checkpoint,
    require_checkpoint,
)

CARTPOLE = dict(
    lr=2.3e-3,
    batch_size=64,
    memory_size=100_000,
    learning_starts=1000,
    train_freq=256,
    gradient_steps=128,
    target_update=10,
    explore_fraction=0.16,
    e_greed_min=0.04,
    gamma=0.99,
    loss="mse",
    max_grad_norm=10.0,
)
ATARI = dict(
    lr=1e-4,
    batch_size=32,
    memory_size=100_000,
    learning_starts=100_000,
    train_freq=4,
    gradient_steps=1,
    target_update=1000,
    explore_fraction=0.1,
    e_greed_min=0.01,
    gamma=0.99,
    loss="huber",
    max_grad_norm=10.0,
)


def make_env(env_id: str, test: bool = False) -> Any:
    if is_atari(env_id):
        from parl.env.atari_wrappers import wrap_deepmind  # registers the ALE ids too

        return wrap_deepmind(
            gym.make(env_id), dim=84, framestack=True, obs_format="NHWC", test=test
        )
    return CompatWrapper(gym.make(env_id))


def is_atari(env_id: str) -> bool:
    return "NoFrameskip" in env_id or env_id.startswith("ALE/")


def run_evaluate_episodes(agent: DQNAgent, env: Any, eval_episodes: int, seed: int) -> float:
    """Mean return of greedy episodes; episode i starts from ``reset(seed=seed + i)``."""
    returns = []
    for i in range(eval_episodes):
        obs, done, total = env.reset(seed=seed + i), False, 0.0
        while not done:
            obs, reward, done, _ = env.step(agent.predict(obs))
            total += float(reward)
        returns.append(total)
    return float(np.mean(returns))


def build(args: argparse.Namespace, env: Any) -> tuple[DQNAgent, ReplayMemory, dict[str, Any]]:
    hp = dict(ATARI if is_atari(args.env) else CARTPOLE)
    for name in ("memory_size", "learning_starts"):
        if getattr(args, name) is not None:
            hp[name] = getattr(args, name)
    act_dim = int(env.action_space.n)
    if is_atari(args.env):
        model: torch.nn.Module = AtariModel(act_dim, dueling=args.dueling)
        rpm = ReplayMemory(hp["memory_size"], (84, 84, 4), 0, obs_dtype=np.uint8)
    else:
        obs_dim = env.observation_space.shape[0]
        model = CartpoleModel(obs_dim, act_dim, dueling=args.dueling)
        rpm = ReplayMemory(hp["memory_size"], obs_dim, 0)
    algorithm = (DDQN if args.algo == "DDQN" else DQN)(
        model,
        gamma=hp["gamma"],
        lr=hp["lr"],
        loss=hp["loss"],
        max_grad_norm=hp["max_grad_norm"],
        device=args.device,
    )
    decrement = (1.0 - hp["e_greed_min"]) / (hp["explore_fraction"] * args.train_total_steps)
    agent = DQNAgent(algorithm, act_dim, 1.0, decrement, hp["e_greed_min"])
    return agent, rpm, hp


def save_checkpoint(args, agent, rpm, env, counters: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    extra = {
        # the memory saved with it: a resume can tell that file from an older one
        "rpm_written": bool(args.save_rpm),
        "rpm": rpm.stamp() if args.save_rpm else None,
        "env_rng": json.dumps(env.unwrapped.np_random.bit_generator.state),
        "e_greed": agent.e_greed,
    }
    with ctrl_c_deferred():  # the checkpoint and the memory are of one step
        agent.save_checkpoint(os.path.join(args.logdir, "checkpoint.pt"), counters, extra)
        if args.save_rpm:
            rpm.save(os.path.join(args.logdir, "rpm.npz"))


def restore_checkpoint(args, agent, rpm, env) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    path = os.path.join(args.logdir, "checkpoint.pt")
    require_checkpoint(path)
    counters, extra = agent.restore_checkpoint(path)
    env.unwrapped.np_random.bit_generator.state = json.loads(extra["env_rng"])
    agent.e_greed = float(extra["e_greed"])
    rpm.load_beside_checkpoint(
        os.path.join(args.logdir, "rpm.npz"), extra.get("rpm"), extra.get("rpm_written", True)
    )
    logger.info("resumed from %s at step %d", args.logdir, counters["total_steps"])
    return dict(counters)


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    env, eval_env = make_env(args.env), make_env(args.env, test=True)
    set_seed(args.seed)
    env.reset(seed=args.seed)
    env.action_space.seed(args.seed)
    agent, rpm, hp = build(args, env)
    summary.set_dir(args.logdir)
    c = {"total_steps": 0, "episode": 0, "test_flag": 1}
    if args.resume:
        c = restore_checkpoint(args, agent, rpm, env)
    eval_return = float("nan")
    bar = tqdm(
        total=args.train_total_steps, initial=int(c["total_steps"]), disable=not args.progress
    )
    stop_at = min(args.train_total_steps, args.stop_after_steps or args.train_total_steps)
    while c["total_steps"] < stop_at:
        obs, done, episode_return = env.reset(), False, 0.0
        while not done:
            action = agent.sample(obs)
            next_obs, reward, done, info = env.step(action)
            terminal = done and not info.get("TimeLimit.truncated", False)
            rpm.append(obs, action, reward, next_obs, terminal)
            obs, episode_return = next_obs, episode_return + float(reward)
            c["total_steps"] += 1
            steps = c["total_steps"]
            if steps > hp["learning_starts"] and steps % hp["train_freq"] == 0:
                for _ in range(hp["gradient_steps"]):
                    loss = agent.learn(*rpm.sample_batch(hp["batch_size"]))
                summary.add_scalar("train/loss", loss, steps)
            if steps % hp["target_update"] == 0:
                agent.alg.sync_target()
        c["episode"] += 1
        bar.update(int(c["total_steps"]) - bar.n)
        summary.add_scalar("train/episode_return", episode_return, c["total_steps"])
        if c["total_steps"] >= c["test_flag"] * args.test_every_steps:
            while c["total_steps"] >= c["test_flag"] * args.test_every_steps:
                c["test_flag"] += 1
            eval_return = run_evaluate_episodes(
                agent, eval_env, args.eval_episodes, args.seed + 10_000
            )
            summary.add_scalar("eval/episode_return", eval_return, c["total_steps"])
            bar.set_postfix(eval=f"{eval_return:.1f}", eps=f"{agent.e_greed:.2f}")
            save_checkpoint(args, agent, rpm, env, c)
    bar.close()
    save_checkpoint(args, agent, rpm, env, c)
    agent.save(os.path.join(args.logdir, "model.ckpt"))
    final = run_evaluate_episodes(agent, eval_env, args.eval_episodes, args.seed + 10_000)
    logger.info(
        "done: %d steps, %d episodes; evaluation return %.1f", c["total_steps"], c["episode"], final
    )
    summary.flush()
    return final


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="CartPole-v1",
        action_space="discrete",
        algorithm="DQN",
        defaults={
            "train_total_steps": 50_000,
            "test_every_steps": 5_000,
            "eval_episodes": 10,
            "logdir": os.path.join("train_log", "DQN"),
        },
        skip=["xparl_addr"],
        aliases={"no_progress": ["--no_tqdm", "--no-progress"]},
        help={"env": "CartPole-v1 or an Atari id"},
    )
    parser.add_argument("--algo", choices=["DQN", "DDQN"], default="DQN", help="DQN, or Double DQN")
    parser.add_argument("--dueling", action="store_true", help="dueling Q head")
    parser.add_argument("--save_rpm", action="store_true", help="checkpoint the replay memory")
    parser.add_argument(
        "--memory_size",
        type=positive_int,
        default=None,
        help="transitions the replay memory holds (default: the preset's, 100,000)",
    )
    parser.add_argument(
        "--learning_starts",
        type=non_negative_int,
        default=None,
        help="environment steps before the first update (default: the preset's, 1,000 on "
        "CartPole and 100,000 on Atari)",
    )
    parser.add_argument(
        "--stop_after_steps",
        type=int,
        default=0,
        help="end this run early (at an episode's end), as if interrupted",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.stop_after_steps < 0:  # it would train no step and write the untrained model
        parser.error(f"--stop_after_steps must be 0 (never) or more, got {args.stop_after_steps}")
    refuse_resume_without_checkpoint(parser, args.resume, args.logdir)
    return args


if __name__ == "__main__":
    main()
