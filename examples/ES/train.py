"""Evolution strategies (PARL's ES example, OpenAI's algorithm) on MuJoCo or CartPole.

    python examples/ES/train.py                               # HalfCheetah-v5, 2 actors
    python examples/ES/train.py --env CartPole-v1
    python examples/ES/train.py --xparl_addr localhost:8010 --actor_num 16   # on a cluster
    python examples/ES/train.py --resume                      # go on from the checkpoint

Each update: every actor evaluates mirrored perturbation pairs of the current weights (rounds
of calls until ``min_episodes_per_batch`` episodes and ``min_steps_per_batch`` steps are in),
the learner ranks the returns, rebuilds each perturbation from its noise-table offset and steps
its optimizer, then merges the actors' observation statistics. The noise table is allocated
once in shared memory and handed to local actors by handle. Where the time went is printed and
logged to TensorBoard.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from actor import Actor
from agent import ESAgent, make_env
from es_config import cartpole_config, mujoco_config
from tqdm import tqdm

import parl
from parl.algorithms.es_noise import SharedNoiseTable
from parl.utils import TimeBreakdown, logger, set_seed, summary
from parl.utils.obs_filter import RunningStat
from parl.utils.train_flags import (
    add_common_flags,
    example_parser,
    refuse_resume_without_checkpoint,
    require_checkpoint,
)


@dataclass
class TrainResult:
    history: list[tuple[int, float]] = field(default_factory=list)  # (steps, eval return)
    sample_steps: int = 0
    train_steps: int = 0
    seconds: float = 0.0
    sampling_seconds: float = 0.0  # learner wall time spent in sampling rounds
    learner_times: dict[str, float] = field(default_factory=dict)
    actor_times: dict[str, float] = field(default_factory=dict)


class Learner:
    def __init__(self, config: dict[str, Any]) -> None:
        if config["actor_num"] < 1:  # no actor: nothing would ever arrive
            raise ValueError(f"ES needs --actor_num 1 or more, got {config['actor_num']}")
        if config["min_episodes_per_batch"] < 1 and config["min_steps_per_batch"] < 1:
            raise ValueError(
                "ES needs --min_episodes_per_batch or --min_steps_per_batch of 1 or more: an "
                "update with no episodes has nothing to learn from"
            )
        self.config = config
        set_seed(config["seed"])
        self.shared = not config.get("xparl_addr")
        if self.shared:
            parl.connect("local", preload=["torch", "gymnasium"])
        else:
            parl.connect(config["xparl_addr"])
        self.times = TimeBreakdown()
        with self.times.section("noise_table"):
            noise = SharedNoiseTable(config["noise_size"], config["noise_seed"], shared=self.shared)
        self.env = make_env(config)
        self.agent = ESAgent(config, self.env, noise)
        self.rng = np.random.default_rng(config["seed"])
        self.sample_steps = self.train_steps = 0
        self.checkpoint = os.path.join(config["logdir"], "checkpoint.pt")
        if config.get("resume"):
            self.restore()
        actor_config = {**config, "device": "cpu"}  # actors act on the CPU
        self.actors = [
            Actor(actor_config, config["seed"] + 1000 * (i + 1), noise if self.shared else None)
            for i in range(config["actor_num"])
        ]
        self.actor_times: dict[int, dict[str, float]] = {}
        self.sampling_seconds = 0.0
        self.start = time.perf_counter()

    def save(self) -> None:
        """Write the checkpoint ``--resume`` continues from: model, the ES optimizer's moments,
        observation statistics, random states and counters."""
        state = self.agent.obs_filter.state
        self.agent.save_checkpoint(
            self.checkpoint,
            counters={"sample_steps": self.sample_steps, "train_steps": self.train_steps},
            extra={
                "obs_filter": {"n": state.n, "mean": state.mean, "m2": state.m2},
                "eval_rng": self.rng.bit_generator.state,
            },
        )

    def restore(self) -> None:
        require_checkpoint(self.checkpoint)
        counters, extra = self.agent.restore_checkpoint(
            self.checkpoint, map_location=self.agent.alg.device
        )
        self.sample_steps, self.train_steps = counters["sample_steps"], counters["train_steps"]
        stats = extra["obs_filter"]
        self.agent.obs_filter.sync(RunningStat(int(stats["n"]), stats["mean"], stats["m2"]))
        self.rng.bit_generator.state = extra["eval_rng"]
        logger.info("resumed from %s at update %d", self.checkpoint, self.train_steps)

    def _round(self, flat: np.ndarray) -> list[dict[str, Any]]:
        state = self.agent.obs_filter.state
        futures = []
        for i, actor in enumerate(self.actors):
            try:  # a death noticed earlier shows when the call is sent
                futures.append(actor.sample(flat, state))
            except parl.ActorDiedError as exc:
                raise self._died(exc, i) from exc
        with self.times.section("waiting"):
            parl.wait(futures, num_returns=len(futures))
        results = []
        for i, future in enumerate(futures):
            try:
                results.append(future.get())
            except parl.ActorDiedError as exc:
                raise self._died(exc, i) from exc
            self.actor_times[i] = results[-1]["times"]
        return results

    def _died(self, exc: parl.ActorDiedError, i: int) -> parl.ActorDiedError:
        return parl.ActorDiedError(
            f"ES: actor {i} of {len(self.actors)} died while sampling ({exc}); "
            f"training stops (the other actors are closed; start the run again).",
            exc.type_name,
            exc.remote_traceback,
        )

    def step(self) -> dict[str, float]:
        """One ES update; returns its metrics."""
        flat = self.agent.alg.get_flat_weights()
        results: list[dict[str, Any]] = []
        episodes = steps = 0
        begin = time.perf_counter()
        while (episodes < self.config["min_episodes_per_batch"]
               or steps < self.config["min_steps_per_batch"]):  # fmt: skip
            for result in self._round(flat):
                results.append(result)
                episodes += 2 * len(result["noise_indices"])
                steps += int(np.sum(result["noisy_lengths"]))
        self.sampling_seconds += time.perf_counter() - begin
        indices = np.concatenate([r["noise_indices"] for r in results])
        rewards = np.concatenate([r["noisy_rewards"] for r in results])
        with self.times.section("learning"):
            learned = self.agent.alg.learn(rewards, indices)
        with self.times.section("obs_filter"):
            for result in results:
                self.agent.obs_filter.apply_changes(result["filter_buffer"])
        self.sample_steps += steps
        self.train_steps += 1
        return {"episodes_this_iter": episodes, "timesteps_this_iter": steps,
                "noisy_reward_mean": float(rewards.mean()),
                "update_ratio": learned.update_ratio}  # fmt: skip

    def evaluate(self, episodes: int) -> float:
        returns = [
            self.agent.play_episode(self.env, self.rng, update=False)[0] for _ in range(episodes)
        ]
        return float(np.mean(returns))

    def actor_breakdown(self) -> TimeBreakdown:
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


def train(config: dict[str, Any]) -> TrainResult:
    learner = Learner(config)
    tensorboard = config.get("tensorboard", True)
    if tensorboard:
        summary.set_dir(config["logdir"])
    result = TrainResult()
    step_budget = config.get("train_total_steps") or float("inf")
    every = config.get("test_every_steps")
    next_eval = (learner.sample_steps // every + 1) * every if every else 0
    bar = tqdm(
        total=config["train_steps"],
        initial=learner.train_steps,
        unit="update",
        disable=not config.get("progress", True),
    )
    try:
        while learner.train_steps < config["train_steps"] and learner.sample_steps < step_budget:
            metrics = learner.step()
            bar.update(1)
            if every:  # in environment steps
                if learner.sample_steps < next_eval:
                    continue
                next_eval = (learner.sample_steps // every + 1) * every
            elif learner.train_steps % config["test_every_train_steps"] != 0:
                continue
            with learner.times.section("evaluating"):
                mean = learner.evaluate(config["eval_episodes"])
            steps = learner.sample_steps
            result.history.append((steps, mean))
            learner.save()
            logger.info("update %d, step %d: evaluation %.1f, noisy mean %.1f, ratio %.4f",
                        learner.train_steps, steps, mean, metrics["noisy_reward_mean"],
                        metrics["update_ratio"])  # fmt: skip
            if tensorboard:
                summary.add_scalar("eval/episode_reward", mean, steps)
                for name, value in metrics.items():
                    summary.add_scalar(f"train/{name}", value, steps)
                learner.times.to_summary(steps, time.perf_counter() - learner.start)
            target = config.get("target_return")
            if target is not None and mean >= target:
                break
    finally:
        bar.close()
        result.seconds = time.perf_counter() - learner.start
        actors = learner.actor_breakdown()
        learner.close()
    learner.save()
    result.sample_steps, result.train_steps = learner.sample_steps, learner.train_steps
    result.sampling_seconds = learner.sampling_seconds
    result.learner_times = dict(learner.times.seconds)
    result.actor_times = dict(actors.seconds)
    logger.info("%d steps, %d updates in %.1f s (%.0f steps/s while sampling)",
                result.sample_steps, result.train_steps, result.seconds,
                result.sample_steps / max(result.sampling_seconds, 1e-9))  # fmt: skip
    logger.info(learner.times.report(result.seconds, "learner time"))
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
        env="HalfCheetah-v5",
        preset="the env's preset in es_config.py",
        help={
            "logdir": "folder of the TensorBoard logs, the checkpoint and the final model "
            "(default: train_log/ES_<env>)",
            "train_total_steps": "environment steps to train for at most (default: no bound "
            "but --train_steps)",
            "test_every_steps": "evaluate and write a checkpoint every this many environment "
            "steps (default: every --test_every_train_steps updates)",
        },
    )
    preset = " (default: from the preset)"
    parser.add_argument("--actor_num", type=int, default=None, help="sampling actors" + preset)
    parser.add_argument(
        "--train_steps", type=int, default=None, help="ES updates to run at most" + preset
    )
    parser.add_argument(
        "--test_every_train_steps",
        type=int,
        default=None,
        help="evaluate every this many updates, unless --test_every_steps is given" + preset,
    )
    parser.add_argument(
        "--min_episodes_per_batch", type=int, default=None, help="episodes per update" + preset
    )
    parser.add_argument(
        "--min_steps_per_batch",
        type=int,
        default=None,
        help="environment steps per update, at least" + preset,
    )
    parser.add_argument(
        "--noise_size", type=int, default=None, help="floats in the shared noise table" + preset
    )
    parser.add_argument(
        "--noise_stdev", type=float, default=None, help="std of the perturbations" + preset
    )
    parser.add_argument("--stepsize", type=float, default=None, help="learning rate" + preset)
    parser.add_argument(
        "--optimizer",
        choices=["adam", "momentum", "sgd"],
        default=None,
        help="the optimizer of the flat weights" + preset,
    )
    parser.add_argument(
        "--target_return",
        type=float,
        default=None,
        help="stop once an evaluation reaches this return (default: train all updates)",
    )
    parser.add_argument(
        "--no_tensorboard",
        dest="tensorboard",
        action="store_false",
        help="write no TensorBoard events",
    )
    return parser


def parse_config(argv: list[str] | None = None) -> dict[str, Any]:
    """The preset of ``--env`` with the flags given on the command line laid over it."""
    parser = make_parser()
    args = parser.parse_args(argv)
    base = cartpole_config if args.env.startswith("CartPole") else mujoco_config
    config = {**base, "env_name": args.env}
    config.update({k: v for k, v in vars(args).items() if v is not None and k != "env"})
    config.setdefault("logdir", os.path.join("train_log", f"ES_{args.env}"))
    refuse_resume_without_checkpoint(parser, bool(config.get("resume")), config["logdir"])
    return config


def main(argv: list[str] | None = None) -> TrainResult:
    config = parse_config(argv)
    torch.set_num_threads(config["torch_threads"])
    return train(config)


if __name__ == "__main__":
    main()
