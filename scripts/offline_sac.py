"""The online side of ``make_offline_dataset.py``: steps kept in order, episodes collected with
a policy, and SAC (``examples/SAC``'s model, agent and defaults) trained here in stages kept on
disk, or read from an ``examples/SAC`` checkpoint."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "SAC"))

from mujoco_agent import MujocoAgent
from mujoco_model import MujocoModel

from parl.algorithms import SAC
from parl.core.checkpoint import load_file
from parl.utils import ReplayMemory, logger, set_seed
from parl.utils.interrupts import stop_requests

# examples/SAC's defaults
GAMMA, TAU, ALPHA, LR = 0.99, 0.005, 0.2, 3e-4
MEMORY_SIZE = 1_000_000
STOPPING = ("stopping at the end of this episode, with the SAC run kept on disk; once more to stop "
            "at once, losing the steps since the last stage kept")  # fmt: skip
# what must match for a run kept in --workdir to be reused
RUN_SETTINGS = ("env", "seed", "hidden", "batch_size", "warmup_steps", "max_episode_steps",
                "medium_return", "medium_max_steps", "test_every_steps", "eval_episodes")  # fmt: skip


class Stopped(Exception):
    """Training stopped on request (Ctrl-C, SIGTERM) with the run so far kept on disk."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum


# -- steps and episodes --------------------------------------------------------------------------
class StepLog:
    """Steps in the order they were taken, in arrays that grow as needed. An episode ends at a
    step that is terminated (the task ended) or truncated (a time limit, or the sample budget,
    cut it); the two flags are kept apart."""

    FIELDS = ("observations", "actions", "rewards", "next_observations", "terminations",
              "truncations")  # fmt: skip

    def __init__(self, obs_dim: int, act_dim: int, capacity: int = 4096) -> None:
        self.size = 0
        self.arrays = {
            "observations": np.zeros((capacity, obs_dim)),
            "actions": np.zeros((capacity, act_dim), dtype=np.float32),
            "rewards": np.zeros(capacity),
            "next_observations": np.zeros((capacity, obs_dim)),
            "terminations": np.zeros(capacity, dtype=bool),
            "truncations": np.zeros(capacity, dtype=bool),
        }

    def __len__(self) -> int:
        return self.size

    def append(self, obs: Any, action: Any, reward: float, next_obs: Any, terminated: bool,
               truncated: bool) -> None:  # fmt: skip
        if self.size == len(self.arrays["rewards"]):  # double the room, keeping what is there
            self.arrays = {k: np.concatenate([v, np.zeros_like(v)]) for k, v in self.arrays.items()}
        row = (obs, action, reward, next_obs, terminated, truncated)
        for name, value in zip(self.FIELDS, row, strict=True):
            self.arrays[name][self.size] = value
        self.size += 1

    def column(self, name: str) -> np.ndarray:
        return self.arrays[name][: self.size]

    def episodes(self) -> list[dict[str, np.ndarray]]:
        """Each episode's ``observations`` (``T + 1`` rows: the last is the observation its
        last step led to), ``actions``, ``rewards``, ``terminations`` and ``truncations``
        (``T``)."""
        ends = np.flatnonzero(self.column("terminations") | self.column("truncations"))
        if self.size and (not len(ends) or ends[-1] != self.size - 1):
            raise ValueError("the log's last episode has no end (neither terminated nor truncated)")
        episodes, start = [], 0
        for end in ends + 1:
            part = slice(start, end)
            episodes.append({
                "observations": np.concatenate([self.column("observations")[part],
                                                self.column("next_observations")[end - 1 : end]]),
                **{k: self.column(k)[part] for k in ("actions", "rewards", "terminations",
                                                     "truncations")},
            })  # fmt: skip
            start = end
        return episodes

    def save(self, path: Path) -> None:
        np.savez(path, **{name: self.column(name) for name in self.FIELDS})

    @classmethod
    def load(cls, path: Path) -> StepLog:
        with np.load(path) as data:
            log = cls(data["observations"].shape[1], data["actions"].shape[1], capacity=1)
            log.arrays = {name: data[name] for name in cls.FIELDS}
        log.size = len(log.arrays["rewards"])
        return log


def make_env(args: argparse.Namespace) -> gym.Env:
    env = gym.make(args.env, max_episode_steps=args.max_episode_steps)
    space = env.action_space
    if not (
        isinstance(space, gym.spaces.Box) and np.all(space.low == -1) and np.all(space.high == 1)
    ):
        raise ValueError(f"--env {args.env}: actions must lie in [-1, 1], got {space}")
    return env


def collect(args: argparse.Namespace, policy: Callable[[np.ndarray], np.ndarray], seed: int,
            what: str) -> StepLog:  # fmt: skip
    """``--samples`` steps of ``policy`` in fresh episodes; an episode still running when the
    budget is spent is marked truncated."""
    env = make_env(args)
    log = StepLog(env.observation_space.shape[0], env.action_space.shape[0], args.samples)
    obs, _ = env.reset(seed=seed)
    for _ in tqdm(range(args.samples), desc=what, disable=not args.progress):
        action = policy(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        truncated = truncated or len(log) == args.samples - 1
        log.append(obs, action, float(reward), next_obs, terminated, truncated)
        obs = env.reset()[0] if terminated or truncated else next_obs
    return log


# -- SAC, trained here or read from a checkpoint -------------------------------------------------
@dataclass
class Policy:
    """A SAC policy and how it came about, for the datasets' metadata."""

    agent: MujocoAgent
    source: str  # "trained here" or the checkpoint's path
    eval_return: float
    steps_trained: int | None
    updates: int | None
    train_seconds: float | None = None  # wall time of the SAC training, over every run of it

    def record(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "agent"}


def build_agent(args: argparse.Namespace, obs_dim: int, act_dim: int, hidden: int) -> MujocoAgent:
    model = MujocoModel(obs_dim, act_dim, hidden)
    algorithm = SAC(model, gamma=GAMMA, tau=TAU, alpha=ALPHA, actor_lr=LR, critic_lr=LR,
                    device=args.device)  # fmt: skip
    return MujocoAgent(algorithm)


def evaluate(agent: MujocoAgent, args: argparse.Namespace) -> float:
    """Mean return of ``--eval_episodes`` deterministic episodes (seeds ``seed + 10000 + i``)."""
    env, total = make_env(args), 0.0
    for i in range(args.eval_episodes):
        obs, _ = env.reset(seed=args.seed + 10_000 + i)
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(agent.predict(obs))
            total += float(reward)
            done = terminated or truncated
    return total / args.eval_episodes


def load_policy(args: argparse.Namespace, path: str) -> Policy:
    """The actor of an ``examples/SAC`` ``model.ckpt`` or ``checkpoint.pt`` (a file or the
    folder holding one), checked against ``--env``'s sizes."""
    file = Path(path).expanduser()
    if file.is_dir():
        file = next((file / n for n in ("model.ckpt", "checkpoint.pt") if (file / n).is_file()),
                    file / "model.ckpt")  # fmt: skip
    payload = load_file(file)
    counters: dict[str, Any] = {}
    state = payload
    if isinstance(payload, dict) and payload.get("format") == "parl.training_checkpoint":
        state, counters = payload["models"]["model"], payload["counters"]
    elif (file.parent / "checkpoint.pt").is_file():
        counters = load_file(file.parent / "checkpoint.pt").get("counters", {})
    first, heads = state.get("actor_model.body.0.weight"), state.get("actor_model.heads.weight")
    if first is None or heads is None:
        raise ValueError(f"--policy {path}: not a checkpoint of examples/SAC's model (it holds "
                         f"{sorted(state)[:4]}...)")  # fmt: skip
    env = make_env(args)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    if (first.shape[1], heads.shape[0] // 2) != (obs_dim, act_dim):
        raise ValueError(
            f"--policy {path}: its policy takes {first.shape[1]} observation values and gives "
            f"{heads.shape[0] // 2} actions, but {args.env} has {obs_dim} and {act_dim}; pass "
            "the --env it was trained on"
        )
    agent = build_agent(args, obs_dim, act_dim, hidden=first.shape[0])
    agent.alg.model.load_state_dict(state)
    steps = counters.get("total_steps")
    updates = counters.get("updates")
    return Policy(agent, str(file), evaluate(agent, args),
                  None if steps is None else int(steps), None if updates is None else int(updates))  # fmt: skip


@contextlib.contextmanager
def staged_folder(final: Path) -> Iterator[Path]:
    """A fresh hidden folder beside ``final``, renamed to ``final`` if the block ends well and
    removed if it does not (an error, Ctrl-C): ``final`` is never half written. An existing
    ``final`` is replaced only once the new one is complete."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    try:
        yield staging
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.{os.getpid()}.old")
            final.rename(old)
        staging.rename(final)
        if old is not None:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class SACRun:
    """Online SAC as ``examples/SAC`` trains it, whole episodes at a time, with every step kept
    in a :class:`StepLog` (the medium-replay data) and stages saved under ``--workdir``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.env = make_env(args)
        obs_dim, act_dim = self.env.observation_space.shape[0], self.env.action_space.shape[0]
        self.agent = build_agent(args, obs_dim, act_dim, args.hidden)
        # the same memory whatever the budget (its pages are taken only as steps fill them), so
        # a run continued to more --expert_steps samples as one run to them would
        self.rpm = ReplayMemory(max_size=MEMORY_SIZE, obs_dim=obs_dim, act_dim=act_dim)
        self.log = StepLog(obs_dim, act_dim)
        self.counters = {"total_steps": 0, "updates": 0, "next_eval": args.test_every_steps}
        self.eval_return, self.eval_at = float("nan"), -1
        self.train_seconds = 0.0  # summed over the runs that continued one another
        self.settings = {name: getattr(args, name) for name in RUN_SETTINGS}
        set_seed(args.seed)
        self.env.reset(seed=args.seed)

    def episode(self) -> None:
        args, act_dim = self.args, self.env.action_space.shape[0]
        obs, _ = self.env.reset()
        done = False
        while not done:
            if len(self.log) < args.warmup_steps:
                action = np.random.uniform(-1, 1, size=act_dim).astype(np.float32)
            else:
                action = self.agent.sample(obs)
            next_obs, reward, terminated, truncated, _ = self.env.step(action)
            self.log.append(obs, action, float(reward), next_obs, terminated, truncated)
            self.rpm.append(obs, action, float(reward), next_obs, terminated)
            if len(self.log) >= args.warmup_steps:
                self.agent.learn(*self.rpm.sample_batch(args.batch_size))
                self.counters["updates"] += 1
            obs, done = next_obs, terminated or truncated
        self.counters["total_steps"] = len(self.log)

    def train_until(self, stop: Callable[[], bool], limit: int, what: str, partial: str,
                    requested: Callable[[], signal.Signals | None]) -> None:  # fmt: skip
        """Whole episodes until ``stop()`` after an evaluation, or ``limit`` steps. Every
        ``--save_every`` steps the run so far is kept as the stage ``partial``, which a run
        interrupted later (a lost machine) continues from; so it is when ``requested()`` (Ctrl-C,
        SIGTERM: :func:`parl.utils.interrupts.stop_requests`) says to stop, at the end of the
        episode under way.

        Raises:
            Stopped: on request, once the stage is kept.
        """
        every = self.args.save_every
        next_save = (len(self.log) // every + 1) * every
        bar = tqdm(total=limit, initial=len(self.log), desc=what, disable=not self.args.progress)
        started = time.perf_counter()

        def keep() -> None:
            nonlocal started
            now = time.perf_counter()
            self.train_seconds, started = self.train_seconds + now - started, now
            self.save(partial, with_steps=True)

        while len(self.log) < limit:
            before = len(self.log)
            self.episode()
            bar.update(len(self.log) - before)
            if len(self.log) >= self.counters["next_eval"]:
                while self.counters["next_eval"] <= len(self.log):
                    self.counters["next_eval"] += self.args.test_every_steps
                self.eval_return, self.eval_at = evaluate(self.agent, self.args), len(self.log)
                logger.info(
                    "SAC: %d steps, evaluation return %.1f", len(self.log), self.eval_return
                )
                bar.set_postfix(eval=f"{self.eval_return:.0f}")
                if stop():
                    break
            signum = requested()
            if signum is not None and len(self.log) < limit:
                keep()
                bar.close()
                raise Stopped(signum, f"stopped by {signum.name} at {len(self.log):,} steps, "
                              f"the run so far kept in {Path(self.args.workdir) / partial}: "
                              "the same command, rerun, continues it")  # fmt: skip
            if next_save <= len(self.log) < limit:
                keep()
                next_save = (len(self.log) // every + 1) * every
        self.train_seconds += time.perf_counter() - started
        bar.close()

    def stop_if(self, requested: Callable[[], signal.Signals | None], stage: str) -> None:
        """Raise :class:`Stopped` if a stop was requested while the stage ``stage``, now kept,
        finished."""
        signum = requested()
        if signum is not None:
            raise Stopped(signum, f"stopped by {signum.name} with the {stage} stage kept in "
                          f"{Path(self.args.workdir) / stage}: the same command, rerun, continues "
                          "from there")  # fmt: skip

    def policy(self) -> Policy:
        """The policy now, evaluated at this step."""
        if self.eval_at != self.counters["total_steps"]:
            self.eval_return = evaluate(self.agent, self.args)
            self.eval_at = self.counters["total_steps"]
        return Policy(self.agent, "trained here", self.eval_return, self.counters["total_steps"],
                      self.counters["updates"], round(self.train_seconds, 1))  # fmt: skip

    # -- stages kept in --workdir ----------------------------------------------------------------
    def save(self, stage: str, with_steps: bool) -> None:
        folder = Path(self.args.workdir) / stage
        with staged_folder(folder) as staging:
            extra = {"env_rng": json.dumps(self.env.unwrapped.np_random.bit_generator.state),
                     "algorithm": {"total_it": getattr(self.agent.alg, "total_it", 0)}}  # fmt: skip
            counters = {"total_steps": len(self.log), "updates": self.counters["updates"],
                        "next_eval": self.counters["next_eval"]}  # fmt: skip
            self.agent.save_checkpoint(staging / "checkpoint.pt", counters, extra)
            self.agent.save(staging / "model.ckpt")
            if with_steps:
                self.log.save(staging / "steps.npz")
            info = {**self.settings, "expert_steps": self.args.expert_steps,
                    "steps": len(self.log), "updates": self.counters["updates"],
                    "eval_return": self.eval_return, "eval_at": self.eval_at,
                    "train_seconds": self.train_seconds}  # fmt: skip
            (staging / "info.json").write_text(json.dumps(info, indent=1))
        logger.info("saved the SAC run's %s stage in %s", stage, folder)

    def saved(self, stage: str) -> dict[str, Any] | None:
        """The info of a stage kept in ``--workdir`` by an earlier run with the same settings."""
        info_file = Path(self.args.workdir) / stage / "info.json"
        if not info_file.is_file():
            return None
        info = json.loads(info_file.read_text())
        differ = {k: (info.get(k), v) for k, v in self.settings.items() if info.get(k) != v}
        if differ:
            raise ValueError(
                f"{info_file.parent} was made with other settings (saved, now): {differ}; give "
                "another --workdir, or the same settings to reuse it"
            )
        return info

    def restore(self, stage: str) -> None:
        folder = Path(self.args.workdir) / stage
        counters, extra = self.agent.restore_checkpoint(folder / "checkpoint.pt")
        self.env.unwrapped.np_random.bit_generator.state = json.loads(extra["env_rng"])
        for key, value in extra["algorithm"].items():
            setattr(self.agent.alg, key, value)
        self.counters = {k: int(v) for k, v in counters.items()}
        info = json.loads((folder / "info.json").read_text())
        self.eval_return, self.eval_at = info["eval_return"], info["eval_at"]
        self.train_seconds = float(info.get("train_seconds", 0.0))
        if (folder / "steps.npz").is_file():  # the replay memory: every step, in order
            self.log = StepLog.load(folder / "steps.npz")
            log = self.log
            self.rpm = ReplayMemory(self.rpm.max_size, self.rpm.obs_shape, self.rpm.act_shape)
            self.rpm.append_batch(log.column("observations"), log.column("actions"),
                                  log.column("rewards"), log.column("next_observations"),
                                  log.column("terminations"))  # fmt: skip
        logger.info("continuing the SAC run kept in %s (%d steps)", folder, len(self.log))

    def drop(self, stage: str) -> None:
        shutil.rmtree(Path(self.args.workdir) / stage, ignore_errors=True)

    def medium(self) -> tuple[Policy, StepLog]:
        """Train to the medium level (or reuse the one kept in ``--workdir``, or continue the
        part of it kept there)."""
        args = self.args
        if self.saved("medium") is not None:
            self.restore("medium")
            return self.policy(), self.log
        if self.saved("medium-partial") is not None:
            self.restore("medium-partial")
        with stop_requests(announce=STOPPING) as requested:
            self.train_until(lambda: self.eval_return >= args.medium_return,
                             args.medium_max_steps, "SAC to medium", "medium-partial",
                             requested)  # fmt: skip
            self.policy()  # evaluated at its last step, for the record
            if not self.eval_return >= args.medium_return:
                logger.warning(
                    "SAC reached only %.1f (wanted %.1f) in %d steps (--medium_max_steps): the "
                    "medium datasets come from this policy", self.eval_return, args.medium_return,
                    len(self.log))  # fmt: skip
            self.save("medium", with_steps=True)
            self.drop("medium-partial")
            self.stop_if(requested, "medium")
        return self.policy(), self.log

    def expert(self) -> Policy:
        """Train on to ``--expert_steps``: from the furthest stage kept in ``--workdir`` (an
        expert trained for fewer steps, the part of one, or the medium stage), else from the
        start. A kept expert asked for the same steps is reused as it is."""
        args = self.args
        kept = {stage: info for stage in ("expert", "expert-partial")
                if (info := self.saved(stage)) is not None}  # fmt: skip
        if kept.get("expert", {}).get("expert_steps") == args.expert_steps:
            self.restore("expert")
            return self.policy()
        if kept:
            stage = max(kept, key=lambda name: kept[name]["steps"])
            if kept[stage]["steps"] > args.expert_steps:
                raise ValueError(
                    f"{Path(args.workdir) / stage} was trained for {kept[stage]['steps']} steps, "
                    f"more than --expert_steps {args.expert_steps}: ask for that many or more, "
                    "or give another --workdir"
                )
            if not (Path(args.workdir) / stage / "steps.npz").is_file():
                raise ValueError(f"{Path(args.workdir) / stage} was kept without its training "
                                 "steps, so it cannot be trained on: give another --workdir")  # fmt: skip
            self.restore(stage)
        else:
            self.medium()
            if len(self.log) >= args.expert_steps:  # the expert would be the medium policy
                raise ValueError(
                    f"the medium policy trained for {len(self.log)} steps, --expert_steps "
                    f"{args.expert_steps} or more, so the expert would be the medium policy: "
                    "ask for more --expert_steps"
                )
        with stop_requests(announce=STOPPING) as requested:
            self.train_until(lambda: False, args.expert_steps, "SAC to expert", "expert-partial",
                             requested)  # fmt: skip
            self.policy()  # evaluated at its last step, for the record
            self.save("expert", with_steps=True)
            self.drop("expert-partial")
            self.stop_if(requested, "expert")
        return self.policy()
