"""Synchronous A2C (PARL's A2C example) on CartPole (default) or an Atari game.

    python examples/A2C/train.py                                  # CartPole-v1
    python examples/A2C/train.py --env PongNoFrameskip-v4 --actor_num 2
    python examples/A2C/train.py --env PongNoFrameskip-v4 --xparl_addr localhost:8010

The envs run in ``parl.env.RemoteVectorEnv`` actors (``--actor_num``) or in this process; each
iteration collects ``sample_batch_steps`` steps of every env, computes GAE per env
(``parl.utils.rl_utils.calc_gae``) and takes one A2C step with PARL's schedules.
"""

from __future__ import annotations

import argparse
import functools
import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from a2c_config import atari_config, cartpole_config
from model import AtariModel, CartpoleModel
from tqdm import tqdm

import parl
from parl.algorithms import A2C
from parl.env import RemoteVectorEnv
from parl.utils import logger, set_seed, summary
from parl.utils.rl_utils import calc_gae
from parl.utils.scheduler import LinearDecayScheduler, PiecewiseScheduler


def make_env(env_name: str, test: bool = False) -> gym.Env:
    if env_name.startswith("CartPole"):
        return gym.wrappers.RecordEpisodeStatistics(gym.make(env_name))
    from parl.env.atari_wrappers import wrap_deepmind

    return wrap_deepmind(gym.make(env_name), obs_format="NCHW", test=test, compat=False)


class A2CAgent(parl.Agent):
    """numpy in and out; the learning-rate and entropy schedules of PARL's AtariAgent."""

    alg: A2C

    def __init__(self, algorithm: A2C, config: dict[str, Any]) -> None:
        super().__init__(algorithm)
        self.lr_scheduler = LinearDecayScheduler(config["start_lr"], config["max_sample_steps"])
        self.entropy_coeff_scheduler = PiecewiseScheduler(config["entropy_coeff_scheduler"])

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        return self.to_tensor(obs, dtype=None if obs.dtype == np.uint8 else torch.float32).float()

    def sample(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        actions, values = self.alg.sample(self._obs(obs))
        return self.to_numpy(actions), self.to_numpy(values)

    def predict(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.predict(self._obs(obs)))

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self.to_numpy(self.alg.value(self._obs(obs)))

    def learn(self, obs, actions, advantages, target_values) -> tuple[float, ...]:
        lr = self.lr_scheduler.value
        self.lr_scheduler.step(obs.shape[0])
        entropy_coeff = self.entropy_coeff_scheduler.step()
        total, pi, vf, entropy = self.alg.learn(
            self._obs(obs),
            self.to_tensor(actions, dtype=torch.int64),
            self.to_tensor(advantages),
            self.to_tensor(target_values),
            lr,
            entropy_coeff,
        )
        return float(total), float(pi), float(vf), float(entropy), lr, entropy_coeff


def evaluate(agent: A2CAgent, env: gym.Env, episodes: int, seed: int) -> float:
    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    while len(returns) < episodes:
        obs, _, terminated, truncated, info = env.step(int(agent.predict(obs[None])[0]))
        if "episode" in info:
            returns.append(float(info["episode"]["r"]))
        if terminated or truncated:
            obs, _ = env.reset()
    return float(np.mean(returns))


def train(config: dict[str, Any]) -> list[tuple[int, float]]:
    """Returns the evaluation history ``[(steps, mean return), ...]``."""
    set_seed(config["seed"])
    fns = [functools.partial(make_env, config["env_name"])] * config["env_num"]
    mode = gym.vector.AutoresetMode.SAME_STEP
    if config.get("xparl_addr"):
        parl.connect(config["xparl_addr"])
    if config["actor_num"] > 0 or config.get("xparl_addr"):
        envs: Any = RemoteVectorEnv(fns, max(1, config["actor_num"]), mode, infos=False)
    else:
        envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    eval_env = make_env(config["env_name"], test=True)
    act_dim = int(envs.single_action_space.n)
    if config["env_name"].startswith("CartPole"):
        model: Any = CartpoleModel(int(envs.single_observation_space.shape[0]), act_dim)
    else:
        model = AtariModel(act_dim)
    agent = A2CAgent(A2C(model, config, device=config.get("device", "cpu")), config)
    if config.get("tensorboard", True):
        summary.set_dir(config["logdir"])
    n, steps = config["env_num"], config["sample_batch_steps"]
    obs, _ = envs.reset(seed=config["seed"])
    history: list[tuple[int, float]] = []
    total, next_eval = 0, config["test_every_steps"]
    bar = tqdm(total=config["max_sample_steps"], disable=not config.get("progress", True))
    while total < config["max_sample_steps"]:
        batch_obs = np.zeros((steps, n) + obs.shape[1:], obs.dtype)
        actions, rewards, dones, values = (np.zeros((steps, n), np.float32) for _ in range(4))
        for t in range(steps):
            batch_obs[t] = obs
            action, values[t] = agent.sample(obs)
            obs, rewards[t], terminated, truncated, info = envs.step(action)
            actions[t], dones[t] = action, terminated | truncated
            cut = truncated & ~terminated  # a time limit is not an end: bootstrap through it
            for i in np.nonzero(cut)[0]:
                rewards[t, i] += config["gamma"] * agent.value(info["final_obs"][i][None])[0]
        advantages = calc_gae(
            rewards, values, agent.value(obs), config["gamma"], config["lambda"], dones
        )
        total_loss, *_ = agent.learn(
            batch_obs.reshape((-1,) + obs.shape[1:]),
            actions.reshape(-1),
            advantages.reshape(-1),
            (advantages + values).reshape(-1),
        )
        total += steps * n
        bar.update(steps * n)
        if total >= next_eval:
            next_eval += config["test_every_steps"]
            mean = evaluate(agent, eval_env, config["eval_episodes"], config["seed"] + 10_000)
            history.append((total, mean))
            logger.info("step %d: evaluation %.1f", total, mean)
            if config.get("tensorboard", True):
                summary.add_scalar("eval/episode_reward", mean, total)
                summary.add_scalar("train/total_loss", total_loss, total)
            if config.get("target_return") is not None and mean >= config["target_return"]:
                break
    bar.close()
    agent.save(os.path.join(config["logdir"], "model.ckpt"))
    envs.close()
    return history


def main(argv: list[str] | None = None) -> list[tuple[int, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--actor_num", type=int, default=None)
    parser.add_argument("--env_num", type=int, default=None)
    parser.add_argument("--xparl_addr", default=None)
    parser.add_argument("--max_sample_steps", type=int, default=None)
    parser.add_argument("--test_every_steps", type=int, default=None)
    parser.add_argument("--target_return", type=float, default=None)
    parser.add_argument("--logdir", default=None)
    parser.add_argument("--no_progress", dest="progress", action="store_false")
    args = parser.parse_args(argv)
    base = cartpole_config if args.env.startswith("CartPole") else atari_config
    config = {**base, "env_name": args.env}
    config.update({k: v for k, v in vars(args).items() if v is not None and k != "env"})
    config.setdefault("logdir", os.path.join("train_log", f"A2C_{args.env}"))
    torch.set_num_threads(1)
    return train(config)


if __name__ == "__main__":
    main()
