"""CQL on an offline MuJoCo dataset (a D4RL HDF5 file or a Minari dataset on local disk),
PARL 2.x's benchmark script made resumable and independent of D4RL's package.

    python examples/CQL/train.py --env HalfCheetah-v5 --dataset ~/.d4rl/datasets/halfcheetah_medium_expert-v2.hdf5
    python examples/CQL/train.py --env Hopper-v5 --dataset mujoco/hopper/medium-v0 --with_lagrange
    python examples/CQL/train.py --env Hopper-v5 --dataset mujoco/hopper/medium-v0 --config paper
    tensorboard --logdir train_log

``--dataset`` is read from disk, never downloaded: a path ending in ``.hdf5`` is a D4RL file,
anything else a Minari dataset id or folder (see the offline data guide). Training samples
batches from the dataset only; ``--env`` is used to evaluate the policy, and the D4RL
normalized score is logged for HalfCheetah, Hopper and Walker2d.

Most of an update's time goes to the critics' values at the sampled actions of the
conservative term. The default ``--config cpu`` samples 2 actions of each proposal per state and
trains for 200,000 updates, a preset sized for a CPU; ``--config paper`` is the paper's and
PARL's: 10 actions per proposal, 1,000,000 updates (about 5x slower per update).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from mujoco_agent import MujocoAgent
from mujoco_model import MujocoModel
from tqdm import tqdm

from parl.algorithms import CQL
from parl.env import ActionMappingWrapper, CompatWrapper
from parl.utils import ReplayMemory, logger, set_seed, summary
from parl.utils.offline_data import (
    D4RL_REF_SCORES,
    d4rl_normalized_score,
    dataset_digest,
    load_d4rl_hdf5,
    load_minari,
)
from parl.utils.train_flags import (
    add_common_flags,
    example_parser,
    finite_float,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    refuse_other_env,
    refuse_other_run,
    refuse_resume_without_checkpoint,
)

BATCH_SIZE = 256
GAMMA = 0.99
TAU = 0.005
ACTOR_LR = 1e-4
CRITIC_LR = 3e-4
# flags a resumed run must share with the run that wrote the checkpoint (a checkpoint that does
# not record one is taken to match, but for the learning rates: see main), besides the dataset
# itself (its digest)
CHECKED_FLAGS = ("env", "hidden", "batch_size", "num_random", "min_q_weight", "policy_eval_start",
                 "with_automatic_entropy_tuning", "with_lagrange", "lagrange_thresh", "actor_lr",
                 "critic_lr")  # fmt: skip


@dataclass(frozen=True)
class CQLConfig:
    num_random: int  # actions of each proposal per state in the conservative term
    train_total_steps: int
    test_every_steps: int
    eval_episodes: int


PRESETS = {
    # the paper's and PARL's benchmark
    "paper": CQLConfig(num_random=10, train_total_steps=1_000_000, test_every_steps=10_000,
                       eval_episodes=5),
    # sized for a CPU: fewer sampled actions (a noisier estimate of the log-sum-exp), fewer updates
    "cpu": CQLConfig(num_random=2, train_total_steps=200_000, test_every_steps=5_000,
                     eval_episodes=5),
}  # fmt: skip


def make_env(env_id: str) -> Any:
    return ActionMappingWrapper(CompatWrapper(gym.make(env_id)))


def load_dataset(path: str) -> dict[str, np.ndarray]:
    """A D4RL ``.hdf5`` file, else a Minari dataset id or folder."""
    if path.endswith((".hdf5", ".h5")):
        return load_d4rl_hdf5(path)
    return load_minari(path)


def run_evaluate_episodes(agent, env, eval_episodes: int, seed: int) -> float:  # type: ignore[no-untyped-def]
    total = 0.0
    for i in range(eval_episodes):
        obs, done = env.reset(seed=seed + i), False
        while not done:
            obs, reward, done, _ = env.step(agent.predict(obs))
            total += float(reward)
    return total / eval_episodes


def evaluate(agent, env, args, step: int) -> float:  # type: ignore[no-untyped-def]
    avg_reward = run_evaluate_episodes(agent, env, args.eval_episodes, args.seed + 10_000)
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
    logger.info("CQL, env %s, dataset %s, seed %d, config %s (%d sampled actions per proposal)",
                args.env, args.dataset, args.seed, args.config, args.num_random)  # fmt: skip
    dataset = load_dataset(args.dataset)
    env = make_env(args.env)
    refuse_other_env(args, env, (dataset["observations"].shape[1], dataset["actions"].shape[1]))
    set_seed(args.seed)
    obs_dim, action_dim = env.observation_space.shape[0], env.action_space.shape[0]
    model = MujocoModel(obs_dim, action_dim, args.hidden)
    algorithm = CQL(
        model,
        gamma=GAMMA,
        tau=TAU,
        actor_lr=args.actor_lr,
        critic_lr=args.critic_lr,
        policy_eval_start=args.policy_eval_start,
        with_automatic_entropy_tuning=args.with_automatic_entropy_tuning,
        with_lagrange=args.with_lagrange,
        lagrange_thresh=args.lagrange_thresh,
        min_q_weight=args.min_q_weight,
        num_random=args.num_random,
        device=args.device,
    )
    agent = MujocoAgent(algorithm)
    rpm = ReplayMemory(max_size=len(dataset["rewards"]), obs_dim=obs_dim, act_dim=action_dim)
    rpm.load_from_d4rl(dataset)
    summary.set_dir(args.logdir)
    checkpoint = os.path.join(args.logdir, "checkpoint.pt")
    digest = dataset_digest(dataset)
    start = 0
    if args.resume:
        # a checkpoint from before the learning-rate flags was written with PARL's rates
        refuse_other_run(make_parser(), args, checkpoint, CHECKED_FLAGS, digest,
                         assume={"actor_lr": ACTOR_LR, "critic_lr": CRITIC_LR})  # fmt: skip
        counters, extra = agent.restore_checkpoint(checkpoint)
        start = int(counters["total_steps"])
        algorithm.current_steps = int(extra["cql_updates"])
        logger.info("resumed from %s at step %d", args.logdir, start)

    def save(total_steps: int) -> None:
        flags = {flag: getattr(args, flag) for flag in CHECKED_FLAGS}
        extra = {"cql_updates": algorithm.current_steps, "dataset": args.dataset,
                 "dataset_digest": digest, **flags}  # fmt: skip
        agent.save_checkpoint(checkpoint, {"total_steps": total_steps}, extra)

    avg_reward = float("nan")
    for step in tqdm(
        range(start, args.train_total_steps), initial=start, total=args.train_total_steps,
        disable=not args.progress,
    ):  # fmt: skip
        critic_loss, actor_loss = agent.learn(*rpm.sample_batch(args.batch_size))
        if step % 1000 == 0:
            summary.add_scalar("train/critic_loss", critic_loss, step)
            summary.add_scalar("train/actor_loss", actor_loss, step)
        if step % args.test_every_steps == 0:
            avg_reward = evaluate(agent, env, args, step)
            save(step + 1)
    if (args.train_total_steps - 1) % args.test_every_steps != 0:
        # the trained policy itself, unless the loop's last update was just evaluated
        avg_reward = evaluate(agent, env, args, args.train_total_steps)
    save(args.train_total_steps)
    agent.save(os.path.join(args.logdir, "model.ckpt"))
    summary.flush()
    return avg_reward


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="HalfCheetah-v5",
        action_space="continuous",
        algorithm="CQL",
        defaults={"logdir": os.path.join("train_log", "CQL")},
        preset="--config's",
        skip=["xparl_addr"],
        help={
            "env": "MuJoCo gymnasium env id the policy is evaluated on",
            "train_total_steps": "gradient updates to train for",
            "test_every_steps": "evaluate and write a checkpoint every this many updates",
            "eval_episodes": "deterministic episodes per evaluation",
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
        help="'cpu': 2 sampled actions per proposal and 200,000 updates, sized for a CPU; "
        "'paper': the paper's and PARL's 10 and 1,000,000",
    )
    parser.add_argument(
        "--num_random",
        type=positive_int,
        default=None,
        help="actions of each proposal (uniform, policy at s, policy at s') per state in the "
        "conservative term (default: --config's)",
    )
    parser.add_argument(
        "--with_automatic_entropy_tuning",
        action="store_true",
        help="learn the entropy temperature (PARL's benchmark reports its results with it)",
    )
    parser.add_argument(
        "--with_lagrange", action="store_true", help="learn the weight of the conservative term"
    )
    parser.add_argument(
        "--lagrange_thresh",
        type=finite_float,
        default=10.0,
        help="the Lagrange version's target gap",
    )
    parser.add_argument(
        "--min_q_weight",
        type=non_negative_float,
        default=5.0,
        help="weight of the conservative term",
    )
    parser.add_argument(
        "--policy_eval_start",
        type=non_negative_int,
        default=40000,
        help="updates of behaviour cloning first",
    )
    parser.add_argument(
        "--actor_lr",
        default=ACTOR_LR,
        type=positive_float,
        help="the actor's learning rate, and the learned temperature's",
    )
    parser.add_argument(
        "--critic_lr",
        default=CRITIC_LR,
        type=positive_float,
        help="the critics' learning rate, and the conservative weight's under --with_lagrange",
    )
    parser.add_argument(
        "--batch_size", default=BATCH_SIZE, type=positive_int, help="transitions per update"
    )
    parser.add_argument(
        "--hidden", default=256, type=positive_int, help="width of the hidden layers"
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    chosen = {f: getattr(args, f) for f in CQLConfig.__dataclass_fields__}
    config = replace(PRESETS[args.config], **{k: v for k, v in chosen.items() if v is not None})
    for name in CQLConfig.__dataclass_fields__:
        setattr(args, name, getattr(config, name))
    refuse_resume_without_checkpoint(parser, args.resume, args.logdir)
    return args


if __name__ == "__main__":
    main()
