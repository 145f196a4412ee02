"""GA3C's learner: the predictor that batches the simulators' requests, the segments that turn
their steps into advantages, and the trainer that batches the segments for A3C's update.

Actors on this runtime cannot call the learner, so a simulator's request for actions is the
reply to the learner's last call: ``simulator.step(actions)`` returns a future holding the next
observations. The learner keeps one such call in flight per simulator. Each ``Learner.step()``:

1. waits (``parl.wait``) until at least one simulator has answered, then takes every answer that
   is in, oldest call first, up to ``max_predict_batch_size`` observations: no straggler is
   waited for, and no answer is overtaken by one that came in after it;
2. runs the model once on all of them (``predicting``) and sends each simulator its actions at
   once, so it steps its envs while the learner goes on;
3. records the step in the simulator's segment; a segment of ``t_max`` steps gets its advantages
   (GAE, bootstrapped from the value just predicted) and goes to the trainer;
4. updates once the trainer holds ``train_batch_size`` steps (``training``), while the
   simulators that have their actions keep stepping.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from agent import GA3CAgent, build_agent, make_env
from simulator import Simulator

import parl
from parl.utils import TimeBreakdown, logger, set_seed
from parl.utils.rl_utils import calc_gae
from parl.utils.train_flags import require_checkpoint

FIELDS = ("obs", "actions", "advantages", "target_values")


def simulator_died(exc: parl.ActorDiedError, i: int, n: int) -> parl.ActorDiedError:
    return parl.ActorDiedError(
        f"GA3C: simulator actor {i} of {n} died ({exc}); training stops (the other "
        f"simulators are closed; start the run again, with --resume to keep the progress).",
        exc.type_name,
        exc.remote_traceback,
    )


@dataclass
class Request:
    """A simulator's answer, waiting for actions."""

    simulator: int
    reply: dict[str, Any]
    seen: int  # how many batches the predictor had run when the answer was first seen


class Predictor:
    """Batches the simulators' requests for actions and answers them with one forward pass.

    ``max_batch_size`` counts observations; a request (one simulator's ``env_num``
    observations) is never split, and a batch always takes at least one. ``max_wait`` is the
    most batches a request was passed over: 0 means every request was answered by the first
    batch run after it was seen.
    """

    def __init__(self, agent: GA3CAgent, simulator_num: int, max_batch_size: int) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_predict_batch_size must be 1 or more, got {max_batch_size}")
        self.agent, self.max_batch_size = agent, max_batch_size
        self.simulator_num = simulator_num
        self.in_flight: dict[int, parl.Future] = {}  # simulator -> its call, oldest call first
        self.seen: dict[int, int] = {}  # simulator -> batch count when its answer was seen
        self.batches = self.observations = self.requests = self.max_wait = self.max_requests = 0
        self.served = [0] * simulator_num

    def submit(self, simulator: int, future: parl.Future) -> None:
        """``future`` will hold ``simulator``'s next request; it goes behind the older calls."""
        self.in_flight.pop(simulator, None)
        self.in_flight[simulator] = future

    def take(self, times: TimeBreakdown) -> list[Request]:
        """The requests that have arrived, oldest call first, up to ``max_batch_size``
        observations; blocks (``waiting``) only while none has."""
        futures = list(self.in_flight.values())
        with times.section("gathering"):
            idle = all(f.empty() for f in futures)
        if idle:
            with times.section("waiting"):
                parl.wait(futures, num_returns=1)
        with times.section("gathering"):  # reading the answers that are in
            return self._gather()

    def _gather(self) -> list[Request]:
        ready = [i for i, f in self.in_flight.items() if not f.empty()]
        for i in ready:
            self.seen.setdefault(i, self.batches)
        taken: list[Request] = []
        size = 0
        for i in ready:  # in the order the calls were sent
            try:
                reply = self.in_flight[i].get()
            except parl.ActorDiedError as exc:
                raise simulator_died(exc, i, self.simulator_num) from exc
            rows = len(reply["obs"]) + len(reply.get("truncated_obs", ()))
            if taken and size + rows > self.max_batch_size:
                break
            del self.in_flight[i]
            taken.append(Request(i, reply, self.seen.pop(i)))
            size += rows
        return taken

    def predict(self, requests: Sequence[Request]) -> list[tuple[np.ndarray, ...]]:
        """One forward pass for all ``requests``: per request ``(actions, values,
        truncated_values)``, the last the values of its time-limited episodes' last
        observations (in the order of its ``truncated_obs``)."""
        parts = []
        for request in requests:
            parts.append(request.reply["obs"])
            parts.extend(o[None] for o in request.reply.get("truncated_obs", {}).values())
        actions, values = self.agent.sample(np.concatenate(parts))
        answers, row = [], 0
        for request in requests:
            n, cut = len(request.reply["obs"]), len(request.reply.get("truncated_obs", ()))
            answers.append((actions[row : row + n], values[row : row + n],
                            values[row + n : row + n + cut]))  # fmt: skip
            row += n + cut
            self.served[request.simulator] += 1
            self.max_wait = max(self.max_wait, self.batches - request.seen)
        self.batches += 1
        self.requests += len(requests)
        self.max_requests = max(self.max_requests, len(requests))
        self.observations += row
        return answers

    def stats(self) -> dict[str, float]:
        """Batches run, mean observations and requests per batch, the most requests in one
        batch, the longest wait (in batches passed over)."""
        batches = max(1, self.batches)
        return {
            "batches": self.batches,
            "mean_batch_size": self.observations / batches,
            "mean_requests": self.requests / batches,
            "max_requests": self.max_requests,
            "max_wait": self.max_wait,
        }


def bootstrap_time_limits(
    rewards: np.ndarray, truncated_obs: dict[int, np.ndarray], values: np.ndarray, gamma: float
) -> np.ndarray:
    """``rewards (env_num,)`` with ``gamma * V(last obs)`` added for the episodes a time limit
    cut (``truncated_obs``' envs, ``values`` in its order): the step is marked done, so GAE
    does not look past it, but its return goes on. An episode that terminated gets nothing."""
    rewards = rewards.copy()
    for env, value in zip(truncated_obs, values, strict=True):
        rewards[env] += gamma * value
    return rewards


class Segment:
    """One simulator's last ``t_max`` steps, time-major ``(t_max, env_num)``."""

    def __init__(self, t_max: int, env_num: int, obs: np.ndarray) -> None:
        """``obs``: the first observations, ``(env_num, *obs_shape)`` (for shape and dtype)."""
        self.t = 0
        self.obs = np.zeros((t_max, *obs.shape), obs.dtype)
        self.actions = np.zeros((t_max, env_num), np.int64)
        self.values, self.rewards, self.dones = (np.zeros((t_max, env_num), np.float32)
                                                 for _ in range(3))  # fmt: skip

    def act(self, obs: np.ndarray, actions: np.ndarray, values: np.ndarray) -> None:
        self.obs[self.t], self.actions[self.t], self.values[self.t] = obs, actions, values
        self.t += 1

    def outcome(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        self.rewards[self.t - 1], self.dones[self.t - 1] = rewards, dones

    def full(self) -> bool:
        return self.t == len(self.obs)

    def close(self, next_values: np.ndarray, gamma: float, lam: float) -> dict[str, np.ndarray]:
        """The segment's training data, flattened to ``(t_max * env_num, ...)``; starts anew."""
        advantages = calc_gae(self.rewards, self.values, next_values, gamma, lam, self.dones)
        self.t = 0
        return {
            "obs": self.obs.reshape(-1, *self.obs.shape[2:]).copy(),
            "actions": self.actions.reshape(-1).copy(),
            "advantages": advantages.reshape(-1).astype(np.float32),
            "target_values": (advantages + self.values).reshape(-1).astype(np.float32),
        }


class Trainer:
    """Segments in, batches of exactly ``batch_size`` steps out; the rest waits for the next."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.parts: list[dict[str, np.ndarray]] = []
        self.size = 0

    def add(self, part: dict[str, np.ndarray]) -> None:
        self.parts.append(part)
        self.size += len(part["actions"])

    def ready(self) -> bool:
        return self.size >= self.batch_size

    def batch(self) -> dict[str, np.ndarray]:
        joined = {k: np.concatenate([p[k] for p in self.parts]) for k in FIELDS}
        rest = {k: v[self.batch_size :] for k, v in joined.items()}
        self.parts = [rest] if len(rest["actions"]) else []
        self.size -= self.batch_size
        return {k: v[: self.batch_size] for k, v in joined.items()}


class Learner:
    """The agent, ``actor_num`` simulators, the predictor and the trainer; ``step()`` is one
    prediction batch (and one update when a training batch is complete)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        # checked before any simulator starts: each would fail later inside numpy or gymnasium
        for name in ("actor_num", "env_num", "t_max", "train_batch_size"):
            if config[name] < 1:
                raise ValueError(f"GA3C needs --{name} 1 or more, got {config[name]}")
        set_seed(config["seed"])
        self.eval_env = make_env(config["env_name"], config.get("env_dim", 42), test=True)
        self.agent = build_agent(
            config, self.eval_env.observation_space, self.eval_env.action_space
        )
        self.times = TimeBreakdown()
        self.sample_steps = self.train_steps = 0
        self.checkpoint = os.path.join(config["logdir"], "checkpoint.pt")
        if config.get("resume"):
            self.restore()
        if config.get("xparl_addr"):
            parl.connect(config["xparl_addr"])
        else:  # the worker pool imports these once; simulators start in milliseconds
            parl.connect("local", preload=["gymnasium"])
        n = config["actor_num"]
        self.actors = [Simulator(config, config["seed"] + 1000 * (i + 1)) for i in range(n)]
        self.predictor = Predictor(self.agent, n, config["max_predict_batch_size"])
        self.trainer = Trainer(config["train_batch_size"])
        self.segments: list[Segment | None] = [None] * n
        self.actor_times: dict[int, dict[str, float]] = {}
        self.episode_returns: list[float] = []
        for i, actor in enumerate(self.actors):
            self._send(i, actor.reset)
        self.start = time.perf_counter()

    def _send(self, i: int, method: Any, *args: Any) -> None:
        try:  # a death noticed earlier shows when the call is sent
            self.predictor.submit(i, method(*args))
        except parl.ActorDiedError as exc:
            raise simulator_died(exc, i, len(self.actors)) from exc

    def step(self) -> tuple[float, ...] | None:
        """Answer the simulators that have asked; update if a batch is complete. Returns the
        update's ``(total, pi, vf, entropy, lr, entropy_coeff)``, or None without one."""
        requests = self.predictor.take(self.times)
        with self.times.section("predicting"):
            answers = self.predictor.predict(requests)
        with self.times.section("answering"):
            for request, answer in zip(requests, answers, strict=True):
                # the simulator steps its envs while this process records and trains
                self._send(request.simulator, self.actors[request.simulator].step, answer[0])
        with self.times.section("batching"):
            for request, answer in zip(requests, answers, strict=True):
                self._record(request, *answer)
        if not self.trainer.ready():
            return None
        batch = self.trainer.batch()
        with self.times.section("training"):
            losses = self.agent.learn(*(batch[k] for k in FIELDS))
        self.train_steps += 1
        return losses

    def _record(
        self, request: Request, actions: np.ndarray, values: np.ndarray, cut_values: np.ndarray
    ) -> None:
        """Add the step a simulator reports to its segment; hand a full segment to the trainer,
        its advantages bootstrapped from ``values`` (those of the observations just sent)."""
        i, reply, gamma = request.simulator, request.reply, self.config["gamma"]
        self.actor_times[i] = reply["times"]
        segment = self.segments[i]
        if segment is None:  # the reply to reset(): no step to record
            segment = self.segments[i] = Segment(
                self.config["t_max"], len(reply["obs"]), reply["obs"]
            )
        else:
            rewards = bootstrap_time_limits(
                reply["rewards"], reply["truncated_obs"], cut_values, gamma
            )
            segment.outcome(rewards, reply["dones"])
            self.sample_steps += len(rewards)
            self.episode_returns.extend(reply["episodes"])
            if segment.full():
                self.trainer.add(segment.close(values, gamma, self.config["lambda"]))
        segment.act(reply["obs"], actions, values)

    def actor_breakdown(self) -> TimeBreakdown:
        """The simulators' time summed over simulators: stepping envs, and the rest, waiting
        for a prediction (the round trip to the learner included)."""
        out = TimeBreakdown()
        for times in self.actor_times.values():
            out.add("simulating", times["simulating"])
            out.add("waiting for a prediction", max(0.0, times["alive"] - times["simulating"]))
        return out

    def save(self) -> None:
        """Write the checkpoint ``--resume`` continues from: model, optimizer, random states,
        schedules and counters (the simulators' envs start afresh)."""
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

    def close(self) -> None:
        self.predictor.in_flight.clear()
        for actor in self.actors:
            parl.close_actor(actor)
        self.actors = []
