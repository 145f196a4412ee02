"""Decision Transformer on an offline MuJoCo dataset (a D4RL HDF5 file or a Minari dataset on
local disk), PARL 2.x's DT benchmark script made resumable and independent of D4RL's package.

    python examples/DT/train.py --env Hopper-v5 --dataset datasets/hopper-medium-v0
    python examples/DT/train.py --env Hopper-v5 --dataset datasets/hopper-medium-v0 --config paper
    tensorboard --logdir train_log

``--dataset`` is read from disk, never downloaded: a path ending in ``.hdf5`` is a D4RL file,
anything else a Minari dataset id or folder (``scripts/make_offline_dataset.py`` makes them). A
step is one update on a batch of trajectory windows. The default ``--config cpu`` is a smaller
model and run sized for a CPU; ``--config paper`` is the paper's (Chen et al. 2021): context 20,
128-wide embeddings, 3 layers, 1 head, batches of 64, 100,000 updates. The policy is evaluated
on ``--env`` conditioned on the paper's target return for the task (``--target_return``
overrides it), and D4RL's normalized score is logged for HalfCheetah, Hopper and Walker2d.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from dt_agent import DTAgent
from tqdm import tqdm

from parl.algorithms import DecisionTransformer
from parl.algorithms.trajectory_model import TrajectoryModel
from parl.env import ActionMappingWrapper, CompatWrapper
from parl.utils import TrajectorySampler, logger, set_seed, summary
from parl.utils.offline_data import (
    D4RL_REF_SCORES,
    d4rl_normalized_score,
    dataset_digest,
    load_episodes,
)
from parl.utils.train_flags import (
    add_common_flags,
    example_parser,
    finite_float,
    fraction,
    non_negative_float,
    positive_float,
    positive_int,
    rate_below_one,
    refuse_other_env,
    refuse_other_run,
    refuse_resume_without_checkpoint,
)

# the return-to-go each evaluation episode asks for, as in the paper's Table of hyperparameters
TARGET_RETURNS = {"halfcheetah": 6000.0, "hopper": 3600.0, "walker2d": 5000.0}
# flags a resumed run must share with the run that wrote the checkpoint (a checkpoint that does
# not record them is taken to match), besides the dataset itself (its digest)
CHECKED_FLAGS = ("env", "context", "embed_dim", "n_layer", "n_head", "batch_size", "warmup_steps",
                 "learning_rate", "weight_decay", "dropout", "rew_scale", "max_ep_len",
                 "pct_traj")  # fmt: skip


@dataclass(frozen=True)
class DTConfig:
    context: int  # K, steps per window
    embed_dim: int
    n_layer: int
    n_head: int
    batch_size: int
    train_total_steps: int
    test_every_steps: int
    eval_episodes: int
    warmup_steps: int
    learning_rate: float = 1e-4
    weight_decay: float = 1e-4
    dropout: float = 0.1


PRESETS = {
    # the paper's (and PARL's) configuration: 10 iterations of 10,000 updates
    "paper": DTConfig(context=20, embed_dim=128, n_layer=3, n_head=1, batch_size=64,
                      train_total_steps=100_000, test_every_steps=10_000, eval_episodes=10,
                      warmup_steps=10_000),
    # sized for a CPU: a shorter context, a narrower and shallower model, smaller batches
    "cpu": DTConfig(context=10, embed_dim=64, n_layer=2, n_head=1, batch_size=32,
                    train_total_steps=20_000, test_every_steps=2_000, eval_episodes=5,
                    warmup_steps=2_000),
}  # fmt: skip


def make_env(env_id: str) -> Any:
    return ActionMappingWrapper(CompatWrapper(gym.make(env_id)))


def run_evaluate_episodes(agent, env, sampler, args, seed: int) -> float:  # type: ignore[no-untyped-def]
    """Mean return of ``--eval_episodes`` episodes, each asking for ``--target_return`` and
    lowering what it asks for by every reward it gets (the paper's evaluation)."""
    agent.eval()
    act_dim = env.action_space.shape[0]
    total = 0.0
    for i in range(args.eval_episodes):
        obs, done = env.reset(seed=seed + i), False
        states = [(obs - sampler.state_mean) / sampler.state_std]
        actions = [np.zeros(act_dim)]
        to_go = [args.target_return / args.rew_scale]
        t = 0
        while not done:
            action = agent.predict(
                np.asarray(states),
                np.asarray(actions),
                np.asarray(to_go),
                np.minimum(np.arange(t + 1), args.max_ep_len - 1),
            )
            obs, reward, done, _ = env.step(action)
            total += float(reward)
            actions[-1] = action
            states.append((obs - sampler.state_mean) / sampler.state_std)
            actions.append(np.zeros(act_dim))
            to_go.append(to_go[-1] - float(reward) / args.rew_scale)
            t += 1
    agent.train()
    return total / args.eval_episodes


def evaluate(agent, env, sampler, args, step: int) -> float:  # type: ignore[no-untyped-def]
    avg_reward = run_evaluate_episodes(agent, env, sampler, args, args.seed + 10_000)
    summary.add_scalar("eval/episode_reward", avg_reward, step)
    message = f"Evaluation: total_steps {step}, Reward: {avg_reward:.1f}"
    if args.env.lower().split("-")[0] in D4RL_REF_SCORES:
        score = float(d4rl_normalized_score(args.env, avg_reward))
        summary.add_scalar("eval/episode_normalized_reward", score, step)
        message += f", normalized score: {score:.1f}"
    logger.info(message)
    return avg_reward


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    logger.info("DT, env %s, dataset %s, seed %d, config %s", args.env, args.dataset,
                args.seed, json.dumps(asdict(args.dt)))  # fmt: skip
    episodes = load_episodes(args.dataset)
    env = make_env(args.env)
    set_seed(args.seed)
    config: DTConfig = args.dt
    sampler = TrajectorySampler(
        episodes, context=config.context, max_ep_len=args.max_ep_len, scale=args.rew_scale,
        pct_traj=args.pct_traj, seed=args.seed,
    )  # fmt: skip
    state_dim, act_dim = episodes[0]["observations"].shape[1], episodes[0]["actions"].shape[1]
    refuse_other_env(args, env, (state_dim, act_dim))
    model = TrajectoryModel(
        state_dim, act_dim, hidden_size=config.embed_dim, max_length=config.context,
        max_ep_len=args.max_ep_len, n_layer=config.n_layer, n_head=config.n_head,
        dropout=config.dropout,
    )  # fmt: skip
    algorithm = DecisionTransformer(
        model, config.learning_rate, config.warmup_steps, config.weight_decay, device=args.device
    )
    agent = DTAgent(algorithm)
    summary.set_dir(args.logdir)
    checkpoint = os.path.join(args.logdir, "checkpoint.pt")
    digest = dataset_digest(episodes)
    start = 0
    if args.resume:
        refuse_other_run(make_parser(), args, checkpoint, CHECKED_FLAGS, digest)
        counters, extra = agent.restore_checkpoint(checkpoint)
        sampler.rng.bit_generator.state = json.loads(extra["sampler_rng"])
        start = int(counters["total_steps"])
        logger.info("resumed from %s at step %d", args.logdir, start)

    def save(total_steps: int) -> None:
        flags = {flag: getattr(args, flag) for flag in CHECKED_FLAGS}
        extra = {"sampler_rng": json.dumps(sampler.rng.bit_generator.state),
                 "dataset": args.dataset, "dataset_digest": digest, **flags}  # fmt: skip
        agent.save_checkpoint(checkpoint, {"total_steps": total_steps}, extra)

    avg_reward = float("nan")
    agent.train()
    for step in tqdm(
        range(start, config.train_total_steps), initial=start, total=config.train_total_steps,
        disable=not args.progress,
    ):  # fmt: skip
        loss = agent.learn(sampler.sample(config.batch_size))
        if step % 100 == 0:
            summary.add_scalar("train/action_loss", loss, step)
        if step % config.test_every_steps == 0:
            avg_reward = evaluate(agent, env, sampler, args, step)
            save(step + 1)
    if (config.train_total_steps - 1) % config.test_every_steps != 0:
        # the trained policy itself, unless the loop's last update was just evaluated
        avg_reward = evaluate(agent, env, sampler, args, config.train_total_steps)
    save(config.train_total_steps)
    agent.save(os.path.join(args.logdir, "model.ckpt"))
    summary.flush()
    return avg_reward


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="Hopper-v5",
        action_space="continuous",
        algorithm="DT",
        defaults={"logdir": os.path.join("train_log", "DT")},
        preset="--config's",
        skip=["xparl_addr"],
        help={
            "env": "MuJoCo gymnasium env id the policy is evaluated on",
            "train_total_steps": "gradient updates to train for",
            "test_every_steps": "evaluate and write a checkpoint every this many updates",
            "eval_episodes": "episodes per evaluation",
        },
    )
    parser.add_argument(
        "--dataset",
        required=True,
        help="offline dataset on local disk: a D4RL .hdf5 file, or a Minari dataset id or folder "
        "(required, no default)",
    )
    parser.add_argument(
        "--config",
        choices=sorted(PRESETS),
        default="cpu",
        help="'cpu': a smaller model and run sized for a CPU; 'paper': the paper's configuration",
    )
    parser.add_argument(
        "--target_return",
        type=finite_float,
        default=None,
        help="the return each evaluation episode asks for (default: the paper's for the task: "
        "HalfCheetah 6000, Hopper 3600, Walker2d 5000)",
    )
    for name, kind, text in (
        ("context", positive_int, "steps per window, K"),
        ("embed_dim", positive_int, "width of the tokens"),
        ("n_layer", positive_int, "transformer blocks"),
        ("n_head", positive_int, "attention heads"),
        ("batch_size", positive_int, "windows per update"),
        ("warmup_steps", positive_int, "updates over which the learning rate warms up"),
        ("learning_rate", positive_float, "AdamW's learning rate"),
        ("weight_decay", non_negative_float, "AdamW's weight decay"),
        ("dropout", rate_below_one, "dropout rate"),
    ):
        parser.add_argument(
            f"--{name}", type=kind, default=None, help=f"{text} (default: --config's)"
        )
    parser.add_argument(
        "--rew_scale", type=positive_float, default=1000.0, help="returns-to-go are divided by this"
    )
    parser.add_argument(
        "--max_ep_len",
        type=positive_int,
        default=1000,
        help="time-step embeddings (the longest episode)",
    )
    parser.add_argument(
        "--pct_traj", type=fraction, default=1.0, help="train on the best episodes holding this "
        "fraction of the steps",
    )  # fmt: skip
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    chosen = {f: getattr(args, f) for f in DTConfig.__dataclass_fields__}
    args.dt = replace(PRESETS[args.config], **{k: v for k, v in chosen.items() if v is not None})
    for name in DTConfig.__dataclass_fields__:
        setattr(args, name, getattr(args.dt, name))
    if args.target_return is None:
        task = args.env.lower().split("-")[0]
        if task not in TARGET_RETURNS:
            parser.error(
                f"--target_return is needed for {args.env} (the paper gives one only for "
                f"{sorted(TARGET_RETURNS)})"
            )
        args.target_return = TARGET_RETURNS[task]
    refuse_resume_without_checkpoint(parser, args.resume, args.logdir)
    return args


if __name__ == "__main__":
    main()
