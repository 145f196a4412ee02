"""IQL on an offline MuJoCo dataset (a D4RL HDF5 file or a Minari dataset on local disk),
PARL 2.x's benchmark script made resumable and independent of D4RL's package.

    python examples/IQL/train.py --env Hopper-v5 --dataset ~/.d4rl/datasets/hopper_medium-v2.hdf5
    python examples/IQL/train.py --env Hopper-v5 --dataset mujoco/hopper/medium-v0
    tensorboard --logdir train_log

``--dataset`` is read from disk, never downloaded: a path ending in ``.hdf5`` is a D4RL file,
anything else a Minari dataset id or folder (see the offline data guide). As in PARL's
benchmark (and the IQL paper, for locomotion), rewards are scaled by ``1000 / (highest -
lowest episode return)`` of the dataset. ``--env`` is used to evaluate the policy, and the D4RL
normalized score is logged for HalfCheetah, Hopper and Walker2d.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from mujoco_agent import MujocoAgent
from mujoco_model import MujocoModel
from tqdm import tqdm

from parl.algorithms import IQL
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
    non_negative_float,
    positive_int,
    refuse_other_env,
    refuse_other_run,
    refuse_resume_without_checkpoint,
)

EVAL_EPISODES = 10
BATCH_SIZE = 256
# flags a resumed run must share with the run that wrote the checkpoint (a checkpoint that does
# not record them is taken to match), besides the dataset itself (its digest)
CHECKED_FLAGS = ("env", "hidden", "batch_size", "beta", "scale_rewards")


def make_env(env_id: str) -> Any:
    return ActionMappingWrapper(CompatWrapper(gym.make(env_id)))


def load_dataset(path: str) -> dict[str, np.ndarray]:
    """A D4RL ``.hdf5`` file, else a Minari dataset id or folder."""
    if path.endswith((".hdf5", ".h5")):
        return load_d4rl_hdf5(path)
    return load_minari(path)


def episode_returns(dataset: dict[str, np.ndarray]) -> np.ndarray:
    """The return of each episode: an episode ends at a terminal, where the next transition
    does not start from this one's next observation, and at the end of the data."""
    obs, next_obs = dataset["observations"], dataset["next_observations"]
    gap = np.linalg.norm((obs[1:] - next_obs[:-1]).reshape(len(obs) - 1, -1), axis=1) > 1e-6
    ends = np.append(gap | dataset["terminals"][:-1], True)
    episode = np.concatenate([[0], np.cumsum(ends[:-1])])
    return np.bincount(episode, weights=dataset["rewards"].astype(np.float64))


def scale_rewards(dataset: dict[str, np.ndarray]) -> None:
    """Rewards times ``1000 / (max - min episode return)``, in place."""
    returns = episode_returns(dataset)
    spread = float(returns.max() - returns.min())
    if spread > 0:
        dataset["rewards"] *= np.float32(1000.0 / spread)


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
    logger.info("IQL, env %s, dataset %s, seed %d", args.env, args.dataset, args.seed)
    dataset = load_dataset(args.dataset)
    digest = dataset_digest(dataset)
    if args.scale_rewards:
        scale_rewards(dataset)
    env = make_env(args.env)
    refuse_other_env(args, env, (dataset["observations"].shape[1], dataset["actions"].shape[1]))
    set_seed(args.seed)
    obs_dim, action_dim = env.observation_space.shape[0], env.action_space.shape[0]
    model = MujocoModel(obs_dim, action_dim, args.hidden)
    algorithm = IQL(model, max_steps=args.train_total_steps, beta=args.beta, device=args.device)
    agent = MujocoAgent(algorithm)
    rpm = ReplayMemory(max_size=len(dataset["rewards"]), obs_dim=obs_dim, act_dim=action_dim)
    rpm.load_from_d4rl(dataset)
    summary.set_dir(args.logdir)
    checkpoint = os.path.join(args.logdir, "checkpoint.pt")
    start = 0
    if args.resume:
        refuse_other_run(make_parser(), args, checkpoint, CHECKED_FLAGS, digest)
        counters, _ = agent.restore_checkpoint(checkpoint)
        start = int(counters["total_steps"])
        logger.info("resumed from %s at step %d", args.logdir, start)

    def save(total_steps: int) -> None:
        flags = {flag: getattr(args, flag) for flag in CHECKED_FLAGS}
        extra = {"dataset": args.dataset, "dataset_digest": digest, **flags}
        agent.save_checkpoint(checkpoint, {"total_steps": total_steps}, extra)

    avg_reward = float("nan")
    for step in tqdm(
        range(start, args.train_total_steps), initial=start, total=args.train_total_steps,
        disable=not args.progress,
    ):  # fmt: skip
        critic_loss, value_loss, actor_loss = agent.learn(*rpm.sample_batch(args.batch_size))
        if step % 1000 == 0:
            summary.add_scalar("train/critic_loss", critic_loss, step)
            summary.add_scalar("train/value_loss", value_loss, step)
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
        env="Hopper-v5",
        action_space="continuous",
        algorithm="IQL",
        defaults={
            "train_total_steps": 1_000_000,
            "test_every_steps": 5_000,
            "eval_episodes": EVAL_EPISODES,
            "logdir": os.path.join("train_log", "IQL"),
        },
        skip=["xparl_addr"],
        help={
            "env": "MuJoCo gymnasium env id the policy is evaluated on",
            "train_total_steps": "gradient updates to train for",
            "test_every_steps": "evaluate and write a checkpoint every this many updates",
        },
    )
    parser.add_argument(
        "--dataset",
        required=True,
        help="offline dataset on local disk: a D4RL .hdf5 file, or a Minari dataset id or folder "
        "(required, no default)",
    )
    parser.add_argument(
        "--no_scale_rewards",
        dest="scale_rewards",
        action="store_false",
        help="keep the dataset's rewards as they are",
    )
    parser.add_argument(
        "--batch_size", default=BATCH_SIZE, type=positive_int, help="transitions per update"
    )
    parser.add_argument(
        "--hidden", default=256, type=positive_int, help="width of the hidden layers"
    )
    parser.add_argument(
        "--beta",
        default=3.0,
        type=non_negative_float,
        help="inverse temperature of the policy's advantage weights; 0 weighs every transition "
        "alike, which is behaviour cloning (default: 3.0, PARL's and the paper's for MuJoCo)",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    refuse_resume_without_checkpoint(parser, args.resume, args.logdir)
    return args


if __name__ == "__main__":
    main()
