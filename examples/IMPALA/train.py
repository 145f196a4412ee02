"""IMPALA (PARL's example, on PyTorch): actors sample, one learner trains on V-trace targets.

    python examples/IMPALA/train.py                                  # CartPole-v1, 2 actors
    python examples/IMPALA/train.py --env PongNoFrameskip-v4 --actor_num 2
    python examples/IMPALA/train.py --env HalfCheetah-v5             # Gaussian policy, MuJoCo
    python examples/IMPALA/train.py --xparl_addr localhost:8010 --actor_num 8   # on a cluster
    python examples/IMPALA/train.py --resume                         # go on from the checkpoint

The learner keeps two ``sample`` calls in flight per actor (one per trajectory slot), takes
whichever actor finishes first (``parl.wait(futures, num_returns=1)``), queues that actor's next
call, and trains as soon as ``train_batch_size`` steps have arrived, so actors do not wait for
the learner and sample with weights up to a few updates old. Where the time went (learner: waiting, batching, learning,
publishing weights; actors: sampling, receiving weights, idle) is printed and logged to
TensorBoard under ``time/``.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from actor import FIELDS, Actor, build_algorithm, is_mujoco, make_env, trajectory_arrays
from agent import ImpalaAgent
from impala_config import atari_config, cartpole_config, mujoco_config
from tqdm import tqdm

import parl
from parl.utils import TimeBreakdown, WindowStat, logger, set_seed, summary
from parl.utils.scheduler import PiecewiseScheduler
from parl.utils.train_flags import (
    add_common_flags,
    example_parser,
    refuse_resume_without_checkpoint,
    require_checkpoint,
)
from parl.utils.weight_sync import SharedWeights, flat_state


@dataclass
class TrainResult:
    history: list[tuple[int, float]] = field(default_factory=list)  # (steps, eval return)
    sample_steps: int = 0
    train_steps: int = 0
    seconds: float = 0.0
    learner_times: dict[str, float] = field(default_factory=dict)
    actor_times: dict[str, float] = field(default_factory=dict)


class Learner:
    """Creates the actors, gathers their trajectories and trains; ``step()`` is one update."""

    def __init__(self, config: dict[str, Any]) -> None:
        if config["actor_num"] < 1:  # no actor: nothing would ever arrive
            raise ValueError(f"IMPALA needs --actor_num 1 or more, got {config['actor_num']}")
        self.config = config
        set_seed(config["seed"])
        self.eval_env = make_env(config, test=True)
        obs_space, action_space = self.eval_env.observation_space, self.eval_env.action_space
        self.agent = ImpalaAgent(build_algorithm(config, obs_space.shape, action_space))
        self.lr_scheduler = PiecewiseScheduler(config["lr_scheduler"])
        self.entropy_coeff_scheduler = PiecewiseScheduler(config["entropy_coeff_scheduler"])
        self.times = TimeBreakdown()
        self.episode_returns = WindowStat(100)
        self.sample_steps = self.train_steps = 0
        self.checkpoint = os.path.join(config["logdir"], "checkpoint.pt")
        if config.get("resume"):
            self.restore()
        # shared memory only for local actors; transport="values" ships everything as call
        # values, as on a cluster (to measure what the shared slots save)
        self.shared = not config.get("xparl_addr") and config.get("transport", "shm") == "shm"
        if config.get("xparl_addr"):
            parl.connect(config["xparl_addr"])
        else:  # the worker pool imports these once; actors start in milliseconds
            parl.connect("local", preload=["torch", "gymnasium"])
        model = self.agent.alg.model
        self.weights = SharedWeights(model) if self.shared else None
        self.sent_version: list[int] = []
        self.actors: list[Any] = []
        self.slots: list[list[dict[str, np.ndarray]]] = []
        for i in range(config["actor_num"]):
            slots = (
                [
                    trajectory_arrays(config, obs_space, action_space, parl.shm.empty)
                    for _ in range(2)
                ]
                if self.shared
                else []
            )
            self.slots.append(slots)
            seed = config["seed"] + 1000 * (i + 1)
            # actors act on the CPU whatever device the learner trains on
            actor_config = {**config, "device": "cpu"}
            self.actors.append(Actor(actor_config, seed, self.weights, slots or None))
            self.sent_version.append(-1)
        self.version = 0
        self.futures: dict[Any, tuple[int, int]] = {}
        for i in range(len(self.actors)):  # two calls in flight: an actor never waits
            self._issue(i, 0)
            self._issue(i, 1)
        self.batch: list[dict[str, np.ndarray]] = []
        self.actor_times: dict[int, dict[str, float]] = {}
        self.start = time.perf_counter()

    def save(self) -> None:
        """Write the checkpoint ``--resume`` continues from: model, optimizer, random states,
        schedules and counters (the actors' envs start afresh)."""
        self.agent.save_checkpoint(
            self.checkpoint,
            counters={"sample_steps": self.sample_steps, "train_steps": self.train_steps},
            extra={
                "lr": self.lr_scheduler.state_dict(),
                "entropy_coeff": self.entropy_coeff_scheduler.state_dict(),
            },
        )

    def restore(self) -> None:
        require_checkpoint(self.checkpoint)
        counters, extra = self.agent.restore_checkpoint(
            self.checkpoint, map_location=self.agent.alg.device
        )
        self.sample_steps, self.train_steps = counters["sample_steps"], counters["train_steps"]
        self.lr_scheduler.load_state_dict(extra["lr"])
        self.entropy_coeff_scheduler.load_state_dict(extra["entropy_coeff"])
        logger.info("resumed from %s at step %d", self.checkpoint, self.sample_steps)

    def _issue(self, i: int, slot: int) -> None:
        """Queue actor ``i``'s next trajectory batch (with the weights, on a cluster)."""
        flat = None
        if not self.shared and self.sent_version[i] != self.version:
            flat = flat_state(self.agent.alg.model)
            self.sent_version[i] = self.version
        future = self.actors[i].sample(slot if self.shared else None, flat)
        self.futures[future] = (i, slot)

    def _receive(self) -> int:
        """Wait for the first actor done, queue its next call, keep its trajectories."""
        with self.times.section("waiting"):
            done, _ = parl.wait(list(self.futures), num_returns=1)
        future = done[0]
        i, slot = self.futures.pop(future)
        try:
            result = future.get()
            with self.times.section("batching"):
                if "data" in result:  # arrived as values: already this process's own
                    self.batch.append({k: result["data"][k] for k in FIELDS})
                else:  # copy the shared slot out before the actor reuses it
                    self.batch.append({k: self.slots[i][slot][k].copy() for k in FIELDS})
            # a reply that came in before the actor died is good; queueing its next call
            # is where such a death shows
            self._issue(i, slot)
        except parl.ActorDiedError as exc:
            raise parl.ActorDiedError(
                f"IMPALA: actor {i} of {len(self.actors)} died while sampling ({exc}); "
                f"training stops (the other actors are closed; start the run again).",
                exc.type_name,
                exc.remote_traceback,
            ) from exc
        for episode_return, _ in result["episodes"]:
            self.episode_returns.add(episode_return)
        self.actor_times[i] = result["times"]
        self.sample_steps += result["steps"]
        return result["steps"]

    def step(self) -> tuple[float, ...]:
        """Gather ``train_batch_size`` steps, take one IMPALA step, publish the weights."""
        while sum(len(b["actions"]) for b in self.batch) < self.config["train_batch_size"]:
            self._receive()
        with self.times.section("batching"):
            batch = {k: np.concatenate([b[k] for b in self.batch]) for k in FIELDS}
            self.batch = []
        lr = self.lr_scheduler.value
        entropy_coeff = self.entropy_coeff_scheduler.value
        with self.times.section("learning"):
            losses = self.agent.learn(*(batch[k] for k in FIELDS), lr, entropy_coeff)
        self.train_steps += 1
        self.lr_scheduler.step()
        self.entropy_coeff_scheduler.step()
        with self.times.section("publishing"):
            self.version += 1
            if self.weights is not None:
                self.weights.publish(self.agent.alg.model)
        return (*losses, lr, entropy_coeff)

    def actor_breakdown(self) -> TimeBreakdown:
        """The actors' sections summed over actors, with ``idle = alive - busy``."""
        out = TimeBreakdown()
        for times in self.actor_times.values():
            out.add("sampling", times["sampling"])
            out.add("weights", times["weights"])
            out.add("idle", max(0.0, times["alive"] - times["sampling"] - times["weights"]))
        return out

    def evaluate(self, episodes: int) -> float:
        returns: list[float] = []
        obs, _ = self.eval_env.reset(seed=self.config["seed"] + 10_000)
        while len(returns) < episodes:
            action = self.agent.predict(obs[None])[0]
            obs, _, terminated, truncated, info = self.eval_env.step(
                action if self.agent.alg.continuous_action else int(action)
            )
            if "episode" in info:
                returns.append(float(info["episode"]["r"]))
            if terminated or truncated:
                obs, _ = self.eval_env.reset()
        return float(np.mean(returns))

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
    every = config["test_every_steps"]
    next_eval, next_log = (learner.sample_steps // every + 1) * every, time.perf_counter()
    bar = tqdm(
        total=config["max_sample_steps"],
        initial=learner.sample_steps,
        disable=not config.get("progress", True),
    )
    try:
        while learner.sample_steps < config["max_sample_steps"]:
            total, pi, vf, entropy, kl, lr, entropy_coeff = learner.step()
            steps = learner.sample_steps
            bar.update(steps - bar.n)
            if time.perf_counter() >= next_log:
                next_log += config["log_metrics_interval_s"]
                logger.info(
                    "steps %d updates %d: train return %s, loss %.2f (pi %.2f vf %.2f) "
                    "entropy %.2f kl %.4f lr %.2g",
                    steps, learner.train_steps, learner.episode_returns.mean, total, pi, vf,
                    entropy, kl, lr,
                )  # fmt: skip
                if tensorboard:
                    for name, value in (("total_loss", total), ("pi_loss", pi), ("vf_loss", vf),
                                        ("entropy", entropy), ("kl", kl), ("lr", lr),
                                        ("entropy_coeff", entropy_coeff)):  # fmt: skip
                        summary.add_scalar(f"train/{name}", value, steps)
                    if learner.episode_returns.mean is not None:
                        summary.add_scalar("train/episode_reward", learner.episode_returns.mean,
                                           steps)  # fmt: skip
                    learner.times.to_summary(steps, time.perf_counter() - learner.start)
            if steps >= next_eval:
                next_eval += config["test_every_steps"]
                with learner.times.section("evaluating"):
                    mean = learner.evaluate(config["eval_episodes"])
                result.history.append((steps, mean))
                learner.save()
                logger.info("step %d: evaluation %.1f", steps, mean)
                if tensorboard:
                    summary.add_scalar("eval/episode_reward", mean, steps)
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
    result.learner_times = dict(learner.times.seconds)
    result.actor_times = dict(actors.seconds)
    logger.info("%d steps, %d updates in %.1f s (%.0f steps/s)", result.sample_steps,
                result.train_steps, result.seconds, result.sample_steps / result.seconds)  # fmt: skip
    logger.info(learner.times.report(result.seconds, "learner time"))
    logger.info(actors.report(None, f"actor time, {len(learner.actor_times)} actors"))
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
        preset="the env's preset in impala_config.py",
        help={
            "logdir": "folder of the TensorBoard logs, the checkpoint and the final model "
            "(default: train_log/IMPALA_<env>)"
        },
        dest={"train_total_steps": "max_sample_steps"},
        aliases={"train_total_steps": ["--max_sample_steps"]},
    )
    preset = " (default: from the preset)"
    parser.add_argument("--actor_num", type=int, default=None, help="sampling actors" + preset)
    parser.add_argument("--env_num", type=int, default=None, help="envs per actor" + preset)
    parser.add_argument(
        "--sample_batch_steps", type=int, default=None, help="steps per trajectory" + preset
    )
    parser.add_argument(
        "--train_batch_size", type=int, default=None, help="steps per update" + preset
    )
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="a constant learning rate (default: the preset's schedule)",
    )
    parser.add_argument(
        "--transport",
        choices=["shm", "values"],
        default=None,
        help="how local actors hand back trajectories: shm (shared slots, written in place) "
        "or values (shipped with the reply, as on a cluster) (default: shm)",
    )
    parser.add_argument(
        "--target_return",
        type=float,
        default=None,
        help="stop once an evaluation reaches this return (default: train all steps)",
    )
    parser.add_argument(
        "--log_metrics_interval_s",
        type=float,
        default=None,
        help="seconds between two training-metric logs" + preset,
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
    if args.env.startswith("CartPole"):
        base = cartpole_config
    else:
        base = mujoco_config if is_mujoco(args.env) else atari_config
    config = {**base, "env_name": args.env}
    config.update({k: v for k, v in vars(args).items() if v is not None and k not in ("env", "lr")})
    if args.lr is not None:
        config["lr_scheduler"] = [(0, args.lr)]
    config.setdefault("logdir", os.path.join("train_log", f"IMPALA_{args.env}"))
    refuse_resume_without_checkpoint(parser, bool(config.get("resume")), config["logdir"])
    return config


def main(argv: list[str] | None = None) -> TrainResult:
    config = parse_config(argv)
    torch.set_num_threads(config["torch_threads"])
    return train(config)


if __name__ == "__main__":
    main()
