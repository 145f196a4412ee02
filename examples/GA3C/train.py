"""GA3C (Babaeizadeh et al., ICLR 2017; PARL's GA3C example) on CartPole (default) or an Atari
game: simulator actors step envs without a network, a predictor on the learner batches their
requests for actions, and a trainer batches their experience for A3C's update.

    python examples/GA3C/train.py                                   # CartPole-v1, 2 simulators
    python examples/GA3C/train.py --env PongNoFrameskip-v4 --actor_num 2
    python examples/GA3C/train.py --xparl_addr localhost:8010       # simulators on a cluster
    python examples/GA3C/train.py --xparl_addr ray                  # simulators on Ray
    python examples/GA3C/train.py --resume                          # go on from the checkpoint

Each of ``actor_num`` simulators owns ``env_num`` envs. The learner keeps one ``step`` call in
flight per simulator; whichever have answered are predicted for in one batch (at most
``max_predict_batch_size`` observations, no waiting for the others) and get their actions back
at once. Segments of ``t_max`` steps get GAE advantages; every ``train_batch_size`` steps make
one update with A3C's loss (``parl.algorithms.A2C``). Where the time went and the predictor's
mean batch size are printed and logged to TensorBoard.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from agent import GA3CAgent
from ga3c_config import atari_config, cartpole_config
from learner import Learner
from tqdm import tqdm

from parl.utils import WindowStat, logger, summary
from parl.utils.train_flags import (
    add_common_flags,
    example_parser,
    refuse_resume_without_checkpoint,
)


def evaluate(agent: GA3CAgent, env: gym.Env, episodes: int, seed: int) -> float:
    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    while len(returns) < episodes:
        obs, _, terminated, truncated, info = env.step(int(agent.predict(obs[None])[0]))
        if "episode" in info:
            returns.append(float(info["episode"]["r"]))
        if terminated or truncated:
            obs, _ = env.reset()
    return float(np.mean(returns))


@dataclass
class TrainResult:
    history: list[tuple[int, float]] = field(default_factory=list)  # (steps, eval return)
    sample_steps: int = 0
    train_steps: int = 0
    seconds: float = 0.0
    learner_times: dict[str, float] = field(default_factory=dict)
    actor_times: dict[str, float] = field(default_factory=dict)
    predictor: dict[str, float] = field(default_factory=dict)  # Predictor.stats()


def train(config: dict[str, Any]) -> TrainResult:
    learner = Learner(config)
    tensorboard = config.get("tensorboard", True)
    if tensorboard:
        summary.set_dir(config["logdir"])
    result = TrainResult()
    every = config["test_every_steps"]
    next_eval = (learner.sample_steps // every + 1) * every
    returns = WindowStat(100)
    bar = tqdm(
        total=config["max_sample_steps"],
        initial=learner.sample_steps,
        disable=not config.get("progress", True),
    )
    total_loss = float("nan")
    first_steps = learner.sample_steps  # a resumed run starts where its checkpoint left off
    if first_steps >= config["max_sample_steps"]:
        logger.info("the checkpoint is at step %d, --train_total_steps %d: nothing to train",
                    first_steps, config["max_sample_steps"])  # fmt: skip
    try:
        while learner.sample_steps < config["max_sample_steps"]:
            before = learner.sample_steps
            losses = learner.step()
            total_loss = losses[0] if losses is not None else total_loss
            bar.update(learner.sample_steps - before)
            for episode_return in learner.episode_returns:
                returns.add(episode_return)
            learner.episode_returns.clear()
            if learner.sample_steps < next_eval:
                continue
            total = learner.sample_steps
            next_eval = (total // every + 1) * every
            with learner.times.section("evaluating"):
                mean = evaluate(learner.agent, learner.eval_env, config["eval_episodes"],
                                config["seed"] + 10_000)  # fmt: skip
            result.history.append((total, mean))
            learner.save()
            stats = learner.predictor.stats()
            train_return = "none yet" if returns.mean is None else f"{returns.mean:.1f}"
            logger.info("step %d: evaluation %.1f, train return %s, mean prediction batch %.1f",
                        total, mean, train_return, stats["mean_batch_size"])  # fmt: skip
            if tensorboard:
                summary.add_scalar("eval/episode_reward", mean, total)
                if returns.mean is not None:
                    summary.add_scalar("train/mean_episode_reward", returns.mean, total)
                summary.add_scalar("train/total_loss", total_loss, total)
                summary.add_scalar("predictor/mean_batch_size", stats["mean_batch_size"], total)
                learner.times.to_summary(total, time.perf_counter() - learner.start)
            if config.get("target_return") is not None and mean >= config["target_return"]:
                break
    finally:
        bar.close()
        result.seconds = time.perf_counter() - learner.start
        actors = learner.actor_breakdown()
        learner.close()
    learner.save()
    result.sample_steps, result.train_steps = learner.sample_steps, learner.train_steps
    result.learner_times = dict(learner.times.seconds)
    result.actor_times = dict(actors.seconds)
    result.predictor = learner.predictor.stats()
    ran = result.sample_steps - first_steps
    logger.info("%d steps (%d in this run), %d updates in %.1f s (%.0f steps/s)",
                result.sample_steps, ran, result.train_steps, result.seconds,
                ran / max(result.seconds, 1e-9))  # fmt: skip
    logger.info(learner.times.report(result.seconds, "learner time"))
    logger.info(actors.report(None, f"simulator time, {config['actor_num']} simulators"))
    p = result.predictor
    logger.info("predictor: %d batches, mean batch %.1f observations (%.2f requests), a request "
                "passed over at most %d times", p["batches"], p["mean_batch_size"],
                p["mean_requests"], p["max_wait"])  # fmt: skip
    if tensorboard:
        learner.times.to_summary(result.sample_steps, result.seconds)
        actors.to_summary(result.sample_steps, prefix="actor_time")
    learner.agent.save(os.path.join(config["logdir"], "model.ckpt"))
    return result


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="CartPole-v1",
        preset="the env's preset in ga3c_config.py",
        help={
            "logdir": "folder of the TensorBoard logs, the checkpoint and the final model "
            "(default: train_log/GA3C_<env>)"
        },
        dest={"train_total_steps": "max_sample_steps"},
        aliases={"train_total_steps": ["--max_sample_steps"]},
    )
    own = {
        "actor_num": "simulator actors",
        "env_num": "envs per simulator",
        "t_max": "steps per segment",
        "train_batch_size": "steps per update",
        "max_predict_batch_size": "most observations per prediction",
    }
    for name, text in own.items():
        parser.add_argument(
            f"--{name}", type=int, default=None, help=f"{text} (default: from the preset)"
        )
    parser.add_argument(
        "--target_return",
        type=float,
        default=None,
        help="stop once an evaluation reaches this return (default: train all steps)",
    )
    return parser


def parse_config(argv: list[str] | None = None) -> dict[str, Any]:
    """The preset of ``--env`` with the flags given on the command line laid over it."""
    parser = make_parser()
    args = parser.parse_args(argv)
    base = cartpole_config if args.env.startswith("CartPole") else atari_config
    config = {**base, "env_name": args.env}
    config.update({k: v for k, v in vars(args).items() if v is not None and k != "env"})
    config.setdefault("logdir", os.path.join("train_log", f"GA3C_{args.env}"))
    refuse_resume_without_checkpoint(parser, bool(config.get("resume")), config["logdir"])
    return config


def main(argv: list[str] | None = None) -> TrainResult:
    config = parse_config(argv)
    torch.set_num_threads(config["torch_threads"])
    return train(config)


if __name__ == "__main__":
    main()
