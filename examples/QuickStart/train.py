"""PARL QuickStart: a policy-gradient agent learns CartPole-v1.

    python examples/QuickStart/train.py                # about 10 s on 2 CPU cores
    tensorboard --logdir train_log                      # returns and losses

Each episode is one update: the actions' log-probabilities are weighted by the normalised
reward-to-go. The greedy policy is evaluated every ``--eval_every`` episodes on 10 episodes;
training stops once that average reaches ``--target_return`` (500 is CartPole-v1's maximum).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch
from cartpole_agent import CartpoleAgent
from cartpole_model import CartpoleModel
from tqdm import tqdm

from parl.algorithms import PolicyGradient
from parl.utils import calc_discount_sum_rewards, logger, set_seed, summary
from parl.utils.train_flags import add_common_flags, add_hidden_alias, example_parser


@dataclass
class Config:
    """Hyperparameters and run settings (the command-line flags of ``main``)."""

    env: str = "CartPole-v1"
    max_episodes: int = 1000
    lr: float = 1e-3
    gamma: float = 0.99
    hidden_size: int = 64
    seed: int = 1
    eval_every: int = 20
    eval_episodes: int = 10
    target_return: float = 475.0
    logdir: str = os.path.join("train_log", "QuickStart")
    device: str = "cpu"  # acting step by step with a tiny network is fastest on the CPU
    progress: bool = True
    tensorboard: bool = True


@dataclass
class TrainResult:
    episodes: int  # training episodes run
    eval_return: float  # mean return of the last evaluation
    eval_history: list[tuple[int, float]] = field(default_factory=list)  # (episode, mean return)
    checkpoint: str = ""
    seconds: float = 0.0


def run_train_episode(agent: CartpoleAgent, env: gym.Env) -> tuple[list, list, list]:
    """Play one episode with sampled actions; returns its observations, actions and rewards."""
    obs_list, action_list, reward_list = [], [], []
    obs, _ = env.reset()
    while True:
        obs_list.append(obs)
        action = agent.sample(obs)
        obs, reward, terminated, truncated, _ = env.step(action)
        action_list.append(action)
        reward_list.append(float(reward))
        if terminated or truncated:
            return obs_list, action_list, reward_list


def run_evaluate_episodes(
    agent: CartpoleAgent, env: gym.Env, eval_episodes: int = 10, seed: int | None = None
) -> float:
    """Mean return of ``eval_episodes`` greedy episodes (episode ``i`` reset with ``seed + i``)."""
    agent.eval()
    returns = []
    for i in range(eval_episodes):
        obs, _ = env.reset(seed=None if seed is None else seed + i)
        episode_return, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(agent.predict(obs))
            episode_return += float(reward)
            done = terminated or truncated
        returns.append(episode_return)
    agent.train()
    return float(np.mean(returns))


def calc_reward_to_go(reward_list: list[float], gamma: float) -> np.ndarray:
    """Discounted reward-to-go, normalised to zero mean and unit variance."""
    returns = calc_discount_sum_rewards(np.asarray(reward_list, dtype=np.float32), gamma)
    return (returns - returns.mean()) / (returns.std() + 1e-8)


def train(config: Config) -> TrainResult:
    """Train until the evaluation return reaches ``config.target_return`` or
    ``config.max_episodes`` have run; save the model and return the results."""
    start = time.perf_counter()
    env = gym.make(config.env)
    eval_env = gym.make(config.env)
    set_seed(config.seed, env)
    eval_seed = config.seed + 10_000
    obs_space, act_space = env.observation_space, env.action_space
    if not (
        isinstance(obs_space, gym.spaces.Box)
        and len(obs_space.shape) == 1
        and isinstance(act_space, gym.spaces.Discrete)
    ):
        raise ValueError(
            f"--env {config.env}: the QuickStart needs a flat Box observation and Discrete "
            f"actions (as CartPole-v1 has), got {obs_space} and {act_space}; for continuous "
            "actions see examples/DDPG, examples/SAC or examples/PPO --continuous_action"
        )
    obs_dim, act_dim = obs_space.shape[0], int(act_space.n)

    model = CartpoleModel(obs_dim, act_dim, hidden_size=config.hidden_size)
    alg = PolicyGradient(model, lr=config.lr, device=config.device)
    agent = CartpoleAgent(alg)
    if config.tensorboard:
        summary.set_dir(config.logdir)

    result = TrainResult(episodes=0, eval_return=float("nan"))
    bar = tqdm(range(1, config.max_episodes + 1), disable=not config.progress, unit="ep")
    for episode in bar:
        obs_list, action_list, reward_list = run_train_episode(agent, env)
        loss = agent.learn(
            np.asarray(obs_list, dtype=np.float32),
            np.asarray(action_list, dtype=np.int64),
            calc_reward_to_go(reward_list, config.gamma),
        )
        episode_return = sum(reward_list)
        result.episodes = episode
        bar.set_postfix(ret=f"{episode_return:.0f}", eval=f"{result.eval_return:.1f}")
        if config.tensorboard:
            summary.add_scalar("train/episode_return", episode_return, episode)
            summary.add_scalar("train/loss", loss, episode)
        if episode % config.eval_every == 0:
            result.eval_return = run_evaluate_episodes(
                agent, eval_env, config.eval_episodes, eval_seed
            )
            result.eval_history.append((episode, result.eval_return))
            if config.tensorboard:
                summary.add_scalar("eval/mean_return", result.eval_return, episode)
            if result.eval_return >= config.target_return:
                break
    bar.close()

    result.checkpoint = str(agent.save(os.path.join(config.logdir, "model.ckpt")))
    # Evaluate what was saved: restore the checkpoint into a fresh agent.
    fresh = CartpoleAgent(
        PolicyGradient(
            CartpoleModel(obs_dim, act_dim, config.hidden_size), lr=config.lr, device=config.device
        )
    )
    fresh.restore(result.checkpoint)
    result.eval_return = run_evaluate_episodes(fresh, eval_env, config.eval_episodes, eval_seed)
    if config.tensorboard:
        summary.flush()
    env.close()
    eval_env.close()
    result.seconds = time.perf_counter() - start
    return result


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    defaults = Config()
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env=defaults.env,
        defaults={"eval_episodes": defaults.eval_episodes, "logdir": defaults.logdir},
        skip=["train_total_steps", "test_every_steps", "resume", "xparl_addr"],
        aliases={
            "no_progress": ["--no-progress"],
            "torch_threads": ["--torch-threads"],
        },
        help={
            "env": "gymnasium environment id (a Box observation and Discrete actions)",
            "torch_threads": "threads torch may use; one is fastest for this small network",
        },
    )
    parser.set_defaults(seed=defaults.seed)
    parser.add_argument(
        "--max_episodes", type=int, default=defaults.max_episodes, help="training episodes at most"
    )
    parser.add_argument(
        "--eval_every",
        type=int,
        default=defaults.eval_every,
        help="evaluate every this many episodes",
    )
    parser.add_argument(
        "--target_return",
        type=float,
        default=defaults.target_return,
        help="stop once an evaluation averages this much",
    )
    parser.add_argument("--lr", type=float, default=defaults.lr, help="learning rate of Adam")
    parser.add_argument("--gamma", type=float, default=defaults.gamma, help="discount factor")
    parser.add_argument(
        "--hidden_size", type=int, default=defaults.hidden_size, help="width of the hidden layer"
    )
    for old in ("--max-episodes", "--eval-every", "--target-return", "--hidden-size"):
        add_hidden_alias(parser, old, old.replace("-", "_").replace("__", "--"))
    return parser


def main(argv: list[str] | None = None) -> TrainResult:
    parser = make_parser()
    args = parser.parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    config = Config(**{k: v for k, v in vars(args).items() if k != "torch_threads"})
    logger.info("training PolicyGradient on %s: %s", config.env, config)
    result = train(config)
    logger.info(
        "done: %d episodes in %.1f s; saved %s; evaluation return of the saved model over "
        "%d episodes: %.1f",
        result.episodes,
        result.seconds,
        result.checkpoint,
        config.eval_episodes,
        result.eval_return,
    )
    return result


if __name__ == "__main__":
    main()
