"""Synchronous A2C (PARL's A2C example) on CartPole (default), an Atari game or a MuJoCo task.

    python examples/A2C/train.py                                  # CartPole-v1, 2 actors
    python examples/A2C/train.py --env HalfCheetah-v5             # Gaussian policy
    python examples/A2C/train.py --env PongNoFrameskip-v4 --actor_num 2
    python examples/A2C/train.py --env PongNoFrameskip-v4 --xparl_addr localhost:8010
    python examples/A2C/train.py --mode vector_env --actor_num 2  # envs on actors, acting here
    python examples/A2C/train.py --resume                         # go on from the checkpoint

``--mode actors`` (default, PARL's): each of ``actor_num`` actors owns ``env_num`` envs and a
copy of the model, steps them ``sample_batch_steps`` times, computes GAE and returns the batch;
the learner takes one A2C step on all batches and broadcasts the weights (a shared weight
buffer locally, one value per call on a cluster). ``--mode vector_env``: the envs live in
``parl.env.RemoteVectorEnv`` actors (or in this process with ``--actor_num 0``) and this
process picks every action. Where the time went is printed and logged to TensorBoard.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from a2c_config import atari_config, cartpole_config, mujoco_config
from actor import FIELDS, Actor, batch_arrays, build_agent
from agent import A2CAgent, is_mujoco, make_env
from tqdm import tqdm

import parl
from parl.env import RemoteVectorEnv
from parl.utils import TimeBreakdown, WindowStat, logger, set_seed, summary
from parl.utils.rl_utils import calc_gae
from parl.utils.train_flags import (
    add_common_flags,
    example_parser,
    refuse_resume_without_checkpoint,
    require_checkpoint,
)
from parl.utils.weight_sync import SharedWeights, flat_state


def evaluate(agent: A2CAgent, env: gym.Env, episodes: int, seed: int) -> float:
    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    while len(returns) < episodes:
        action = agent.predict(obs[None])[0]
        obs, _, terminated, truncated, info = env.step(
            action if agent.alg.continuous_action else int(action)
        )
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


def _died(exc: parl.ActorDiedError, i: int, n: int) -> parl.ActorDiedError:
    return parl.ActorDiedError(
        f"A2C: actor {i} of {n} died while sampling ({exc}); training stops (the other "
        f"actors are closed; start the run again).",
        exc.type_name,
        exc.remote_traceback,
    )


class VectorEnvSampler:
    """Mode ``vector_env``: envs in ``RemoteVectorEnv`` actors (or here), actions picked here."""

    def __init__(self, config: dict[str, Any], agent: A2CAgent, times: TimeBreakdown) -> None:
        self.config, self.agent, self.times = config, agent, times
        actors = config["actor_num"]
        fns = [functools.partial(make_env, config["env_name"])] * (
            config["env_num"] * max(1, actors)
        )
        mode = gym.vector.AutoresetMode.SAME_STEP
        if actors > 0 or config.get("xparl_addr"):
            self.envs: Any = RemoteVectorEnv(fns, max(1, actors), mode, infos=False)
        else:
            self.envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
        self.obs, _ = self.envs.reset(seed=config["seed"])
        self.actors: list[Any] = []

    def collect(self) -> dict[str, np.ndarray]:
        steps, gamma, obs = self.config["sample_batch_steps"], self.config["gamma"], self.obs
        n = obs.shape[0]
        with self.times.section("sampling"):
            batch_obs = np.zeros((steps, n) + obs.shape[1:], obs.dtype)
            rewards, dones, values = (np.zeros((steps, n), np.float32) for _ in range(3))
            act_shape = self.envs.single_action_space.shape
            actions = np.zeros((steps, n, *act_shape), np.float32)
            for t in range(steps):
                batch_obs[t] = obs
                action, values[t] = self.agent.sample(obs)
                obs, rewards[t], terminated, truncated, info = self.envs.step(action)
                actions[t], dones[t] = action, terminated | truncated
                for i in np.nonzero(truncated & ~terminated)[0]:  # bootstrap through time limits
                    rewards[t, i] += gamma * self.agent.value(info["final_obs"][i][None])[0]
            advantages = calc_gae(
                rewards, values, self.agent.value(obs), gamma, self.config["lambda"], dones
            )
        self.obs = obs
        return {
            "obs": batch_obs.reshape((-1,) + obs.shape[1:]),
            "actions": actions.reshape(steps * n, *act_shape),
            "advantages": advantages.reshape(-1),
            "target_values": (advantages + values).reshape(-1),
        }

    def publish(self) -> None:
        pass

    def actor_breakdown(self) -> TimeBreakdown:
        return TimeBreakdown()

    def close(self) -> None:
        self.envs.close()


class ActorSampler:
    """Mode ``actors`` (PARL's): every actor samples a batch with the newest weights."""

    def __init__(self, config: dict[str, Any], agent: A2CAgent, times: TimeBreakdown) -> None:
        self.config, self.agent, self.times = config, agent, times
        self.shared = not config.get("xparl_addr")  # shared memory only for local actors
        if self.shared:  # the worker pool imports these once; actors start in milliseconds
            parl.connect("local", preload=["torch", "gymnasium"])
        else:
            parl.connect(config["xparl_addr"])
        probe = make_env(config["env_name"])
        space, action_space = probe.observation_space, probe.action_space
        probe.close()
        self.weights = SharedWeights(agent.alg.model) if self.shared else None
        self.slots = [
            batch_arrays(config, space, action_space, parl.shm.empty) if self.shared else None
            for _ in range(config["actor_num"])
        ]
        self.actors = [
            Actor(config, config["seed"] + 1000 * (i + 1), self.weights, slot)
            for i, slot in enumerate(self.slots)
        ]
        self.actor_times: dict[int, dict[str, float]] = {}
        self.episode_returns: list[float] = []

    def collect(self) -> dict[str, np.ndarray]:
        flat = None if self.shared else flat_state(self.agent.alg.model)
        futures = []
        for i, actor in enumerate(self.actors):
            try:  # a death noticed earlier shows when the call is sent
                futures.append(actor.sample(flat))
            except parl.ActorDiedError as exc:
                raise _died(exc, i, len(self.actors)) from exc
        with self.times.section("waiting"):
            parl.wait(futures, num_returns=len(futures))
        parts = []
        for i, future in enumerate(futures):
            try:
                result = future.get()
            except parl.ActorDiedError as exc:
                raise _died(exc, i, len(self.actors)) from exc
            self.actor_times[i] = result["times"]
            self.episode_returns.extend(result["episodes"])
            parts.append(result["data"] if "data" in result else self.slots[i])
        with self.times.section("batching"):
            return {k: np.concatenate([p[k] for p in parts]) for k in FIELDS}

    def publish(self) -> None:
        with self.times.section("publishing"):
            if self.weights is not None:
                self.weights.publish(self.agent.alg.model)

    def actor_breakdown(self) -> TimeBreakdown:
        """The actors' sections summed over actors, with ``idle = alive - busy``."""
        out = TimeBreakdown()
        for times in self.actor_times.values():
            out.add("sampling", times["sampling"])
            out.add("weights", times["weights"])
            out.add("idle", max(0.0, times["alive"] - times["sampling"] - times["weights"]))
        return out

    def close(self) -> None:
        for actor in self.actors:
            parl.close_actor(actor)
        self.actors = []


class Learner:
    """The agent and its sampler (``config["mode"]``); ``step()`` is one batch and one update."""

    def __init__(self, config: dict[str, Any]) -> None:
        config = {"mode": "actors", **config}
        self.config = config
        set_seed(config["seed"])
        self.eval_env = make_env(config["env_name"], test=True)
        self.agent = build_agent(
            config, self.eval_env.observation_space, self.eval_env.action_space
        )
        self.times = TimeBreakdown()
        if config["mode"] not in ("actors", "vector_env"):
            raise ValueError(f"--mode must be 'actors' or 'vector_env', got {config['mode']!r}")
        if config["mode"] == "actors" and config["actor_num"] < 1:
            raise ValueError("--mode actors needs --actor_num 1 or more (or --mode vector_env)")
        self.sample_steps = self.train_steps = 0
        self.checkpoint = os.path.join(config["logdir"], "checkpoint.pt")
        if config.get("resume"):
            self.restore()
        sampler_cls = ActorSampler if config["mode"] == "actors" else VectorEnvSampler
        # actors act on the CPU whatever device the learner trains on
        self.sampler: Any = sampler_cls({**config, "device": "cpu"}, self.agent, self.times)
        self.actors = self.sampler.actors
        self.start = time.perf_counter()

    def save(self) -> None:
        """Write the checkpoint ``--resume`` continues from: models, optimizer, random states,
        schedules and counters (the actors' envs start afresh)."""
        self.agent.save_checkpoint(
            self.checkpoint,
            counters={"sample_steps": self.sample_steps, "train_steps": self.train_steps},
            extra={
                "lr": self.agent.lr_scheduler.state_dict(),
                "entropy_coeff": self.agent.entropy_coeff_scheduler.state_dict(),
            },
        )

    def restore(self) -> None:
        require_checkpoint(self.checkpoint)
        counters, extra = self.agent.restore_checkpoint(
            self.checkpoint, map_location=self.agent.alg.device
        )
        self.sample_steps, self.train_steps = counters["sample_steps"], counters["train_steps"]
        self.agent.lr_scheduler.load_state_dict(extra["lr"])
        self.agent.entropy_coeff_scheduler.load_state_dict(extra["entropy_coeff"])
        logger.info("resumed from %s at step %d", self.checkpoint, self.sample_steps)

    def step(self) -> tuple[float, ...]:
        batch = self.sampler.collect()
        with self.times.section("learning"):
            losses = self.agent.learn(*(batch[k] for k in FIELDS))
        self.sampler.publish()
        self.sample_steps += len(batch["actions"])
        self.train_steps += 1
        return losses

    def close(self) -> None:
        self.sampler.close()


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
    try:
        while learner.sample_steps < config["max_sample_steps"]:
            before = learner.sample_steps
            total_loss, *_ = learner.step()
            bar.update(learner.sample_steps - before)
            for episode_return in getattr(learner.sampler, "episode_returns", []):
                returns.add(episode_return)
            if hasattr(learner.sampler, "episode_returns"):
                learner.sampler.episode_returns.clear()
            if learner.sample_steps < next_eval:
                continue
            total = learner.sample_steps
            next_eval += config["test_every_steps"]
            with learner.times.section("evaluating"):
                mean = evaluate(learner.agent, learner.eval_env, config["eval_episodes"],
                                config["seed"] + 10_000)  # fmt: skip
            result.history.append((total, mean))
            learner.save()
            logger.info("step %d: evaluation %.1f, train return %s", total, mean, returns.mean)
            if tensorboard:
                summary.add_scalar("eval/episode_reward", mean, total)
                summary.add_scalar("train/total_loss", total_loss, total)
                learner.times.to_summary(total, time.perf_counter() - learner.start)
            if config.get("target_return") is not None and mean >= config["target_return"]:
                break
    finally:
        bar.close()
        result.seconds = time.perf_counter() - learner.start
        actors = learner.sampler.actor_breakdown()
        learner.close()
    learner.save()
    result.sample_steps, result.train_steps = learner.sample_steps, learner.train_steps
    result.learner_times = dict(learner.times.seconds)
    result.actor_times = dict(actors.seconds)
    logger.info("%d steps, %d updates in %.1f s (%.0f steps/s)", result.sample_steps,
                result.train_steps, result.seconds, result.sample_steps / result.seconds)  # fmt: skip
    logger.info(learner.times.report(result.seconds, "learner time"))
    if actors.seconds:
        logger.info(actors.report(None, f"actor time, {config['actor_num']} actors"))
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
        preset="the env's preset in a2c_config.py",
        help={
            "logdir": "folder of the TensorBoard logs, the checkpoint and the final model "
            "(default: train_log/A2C_<env>)"
        },
        dest={"train_total_steps": "max_sample_steps"},
        aliases={"train_total_steps": ["--max_sample_steps"], "no_progress": ["--no-progress"]},
    )
    parser.add_argument(
        "--mode",
        choices=["actors", "vector_env"],
        default="actors",
        help="actors: each actor samples with its own model copy (PARL's); vector_env: envs "
        "on actors, actions picked here",
    )
    parser.add_argument(
        "--actor_num", type=int, default=None, help="sampling actors (default: from the preset)"
    )
    parser.add_argument(
        "--env_num", type=int, default=None, help="envs per actor (default: from the preset)"
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
    if args.env.startswith("CartPole"):
        base = cartpole_config
    else:
        base = mujoco_config if is_mujoco(args.env) else atari_config
    config = {**base, "env_name": args.env}
    config.update({k: v for k, v in vars(args).items() if v is not None and k != "env"})
    config.setdefault("logdir", os.path.join("train_log", f"A2C_{args.env}"))
    refuse_resume_without_checkpoint(parser, bool(config.get("resume")), config["logdir"])
    return config


def main(argv: list[str] | None = None) -> TrainResult:
    config = parse_config(argv)
    torch.set_num_threads(config["torch_threads"])
    return train(config)


if __name__ == "__main__":
    main()
