"""Make D4RL-style offline datasets of a MuJoCo task with this package's SAC, in Minari's format.

    python scripts/make_offline_dataset.py --env HalfCheetah-v5 --out datasets
    python scripts/make_offline_dataset.py --env Hopper-v5 --out datasets --kinds random medium medium-replay
    python scripts/make_offline_dataset.py --env HalfCheetah-v5 --out datasets --kinds medium --policy train_log/SAC/model.ckpt
    python examples/CQL/train.py --env HalfCheetah-v5 --dataset datasets/halfcheetah-medium-v0

The recipe is D4RL's (Fu et al. 2020, https://arxiv.org/abs/2004.07219), with
``examples/SAC``'s model, agent and defaults as the online learner:

- ``random``: ``--samples`` steps of uniformly random actions;
- ``medium``: SAC trained online until its deterministic evaluation return reaches
  ``--medium_return`` (by default a third of D4RL's expert reference return) or
  ``--medium_max_steps``, then ``--samples`` steps of its stochastic actions;
- ``medium-replay``: every transition that training saw until then;
- ``expert``: the same training continued to ``--expert_steps`` steps in all, then ``--samples``
  steps of its stochastic actions;
- ``medium-expert``: the medium episodes followed by the expert ones.

Each dataset is written to ``--out/<task>-<kind>-v0`` (a Minari dataset, id ``<task>-<kind>-v0``)
with D4RL's reference scores, ``terminations`` and ``truncations`` kept apart, and a
``generation.json`` that says how it was made. A dataset is written in a hidden folder beside its
final place and renamed into it at the end, so an interrupted run leaves no half-written dataset.
The SAC run is kept under ``--workdir``: ``medium/`` (the policy, the training checkpoint and
every step trained on) and ``expert/``; a later ``--kinds expert`` continues from ``medium/``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "SAC"))

from mujoco_agent import MujocoAgent  # noqa: E402
from mujoco_model import MujocoModel  # noqa: E402

import parl  # noqa: E402
from parl.algorithms import SAC  # noqa: E402
from parl.core.checkpoint import load_file  # noqa: E402
from parl.utils import ReplayMemory, logger, set_seed  # noqa: E402
from parl.utils.offline_data import D4RL_REF_SCORES, d4rl_normalized_score  # noqa: E402
from parl.utils.train_flags import add_common_flags, example_parser  # noqa: E402

TASKS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")  # the ones with D4RL reference scores
KINDS = ("random", "medium", "medium-replay", "expert", "medium-expert")
# which stage of the SAC run each kind needs
NEEDS_MEDIUM = {"medium", "medium-replay", "medium-expert"}
NEEDS_EXPERT = {"expert", "medium-expert"}
# examples/SAC's defaults
GAMMA, TAU, ALPHA, LR = 0.99, 0.005, 0.2, 3e-4
MEMORY_SIZE = 1_000_000
# what must match for a run kept in --workdir to be reused
RUN_SETTINGS = ("env", "seed", "hidden", "batch_size", "warmup_steps", "max_episode_steps",
                "medium_return", "medium_max_steps", "test_every_steps", "eval_episodes")  # fmt: skip


def task_of(env_id: str) -> str:
    """``"HalfCheetah-v5"`` -> ``"halfcheetah"``; an env without D4RL reference scores is an
    error that lists the ones with."""
    task = env_id.lower().split("-")[0]
    if task not in D4RL_REF_SCORES:
        raise ValueError(
            f"--env {env_id!r}: no D4RL reference scores for this task, so its datasets could "
            f"not be normalized; choose one of {TASKS}"
        )
    return task


def dataset_id(env_id: str, kind: str) -> str:
    return f"{task_of(env_id)}-{kind}-v0"


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
        self.rpm = ReplayMemory(max_size=min(MEMORY_SIZE, max(args.expert_steps, 1)),
                                obs_dim=obs_dim, act_dim=act_dim)  # fmt: skip
        self.log = StepLog(obs_dim, act_dim)
        self.counters = {"total_steps": 0, "updates": 0, "next_eval": args.test_every_steps}
        self.eval_return, self.eval_at = float("nan"), -1
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

    def train_until(self, stop: Callable[[], bool], limit: int, what: str) -> None:
        """Whole episodes until ``stop()`` after an evaluation, or ``limit`` steps."""
        bar = tqdm(total=limit, initial=len(self.log), desc=what, disable=not self.args.progress)
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
        bar.close()

    def policy(self) -> Policy:
        """The policy now, evaluated at this step."""
        if self.eval_at != self.counters["total_steps"]:
            self.eval_return = evaluate(self.agent, self.args)
            self.eval_at = self.counters["total_steps"]
        return Policy(self.agent, "trained here", self.eval_return,
                      self.counters["total_steps"], self.counters["updates"])  # fmt: skip

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
            info = {**self.settings, "steps": len(self.log), "updates": self.counters["updates"],
                    "eval_return": self.eval_return, "eval_at": self.eval_at}  # fmt: skip
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
        if (folder / "steps.npz").is_file():  # the replay memory: every step, in order
            self.log = StepLog.load(folder / "steps.npz")
            log = self.log
            self.rpm = ReplayMemory(self.rpm.max_size, self.rpm.obs_shape, self.rpm.act_shape)
            self.rpm.append_batch(log.column("observations"), log.column("actions"),
                                  log.column("rewards"), log.column("next_observations"),
                                  log.column("terminations"))  # fmt: skip
        logger.info("continuing the SAC run kept in %s (%d steps)", folder, len(self.log))

    def medium(self) -> tuple[Policy, StepLog]:
        """Train to the medium level (or reuse the one kept in ``--workdir``)."""
        args = self.args
        if self.saved("medium") is not None:
            self.restore("medium")
            return self.policy(), self.log
        self.train_until(lambda: self.eval_return >= args.medium_return, args.medium_max_steps,
                         "SAC to medium")  # fmt: skip
        self.policy()  # evaluated at its last step, for the record
        if not self.eval_return >= args.medium_return:
            logger.warning(
                "SAC reached only %.1f (wanted %.1f) in %d steps (--medium_max_steps): the medium "
                "datasets come from this policy", self.eval_return, args.medium_return,
                len(self.log))  # fmt: skip
        self.save("medium", with_steps=True)
        return self.policy(), self.log

    def expert(self) -> Policy:
        """Train on to ``--expert_steps`` (from the medium stage, kept or trained now)."""
        if self.saved("expert") is not None:
            self.restore("expert")
            return self.policy()
        self.medium()
        self.train_until(lambda: False, self.args.expert_steps, "SAC to expert")
        self.policy()  # evaluated at its last step, for the record
        self.save("expert", with_steps=False)
        return self.policy()


# -- writing ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def minari_root(folder: Path) -> Iterator[None]:
    """Minari writes under ``MINARI_DATASETS_PATH``: point it at ``folder`` for the block."""
    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = before


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def write_dataset(args: argparse.Namespace, kind: str, episodes: list[dict[str, np.ndarray]],
                  how: dict[str, Any]) -> Path:  # fmt: skip
    """Write ``episodes`` as the Minari dataset ``--out/<task>-<kind>-v0``, with D4RL's reference
    scores and a ``generation.json`` holding ``how`` and the dataset's figures."""
    from minari import create_dataset_from_buffers
    from minari.data_collector import EpisodeBuffer

    name = dataset_id(args.env, kind)
    final = Path(args.out) / name
    ref_min, ref_max = D4RL_REF_SCORES[task_of(args.env)]
    returns = np.array([float(e["rewards"].sum()) for e in episodes])
    record = {
        "dataset_id": name,
        "kind": kind,
        "env": args.env,
        "max_episode_steps": args.max_episode_steps,
        "samples": int(sum(len(e["rewards"]) for e in episodes)),
        "episodes": len(episodes),
        "terminated_episodes": int(sum(bool(e["terminations"][-1]) for e in episodes)),
        "mean_episode_return": float(returns.mean()),
        "normalized_score": float(d4rl_normalized_score(args.env, returns.mean())),
        "ref_min_score": ref_min,
        "ref_max_score": ref_max,
        "seed": args.seed,
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "parl_version": parl.__version__,
        **how,
    }
    env = make_env(args)
    buffers = [EpisodeBuffer(id=i, observations=e["observations"], actions=e["actions"],
                             rewards=e["rewards"], terminations=e["terminations"],
                             truncations=e["truncations"], infos={})
               for i, e in enumerate(episodes)]  # fmt: skip
    started = time.perf_counter()
    with staged_folder(final) as staging, minari_root(staging), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Minari's notes on unset optional fields
        create_dataset_from_buffers(
            name, buffers, env=env.spec, eval_env=env.spec,
            algorithm_name=how["algorithm"], author="parl-torch", author_email="none",
            code_permalink="scripts/make_offline_dataset.py", ref_min_score=ref_min,
            ref_max_score=ref_max, description=json.dumps(record),
        )  # fmt: skip
        # Minari made <staging>/<name>/data; the dataset's folder is <staging>/<name>
        inner = staging / name
        (inner / "generation.json").write_text(json.dumps(record, indent=1) + "\n")
        for item in inner.iterdir():
            item.rename(staging / item.name)
        inner.rmdir()
    logger.info(
        "wrote %s: %d samples in %d episodes, mean episode return %.1f (normalized %.1f), "
        "%.1f MB, written in %.1f s", final, record["samples"], record["episodes"],
        record["mean_episode_return"], record["normalized_score"], folder_size(final) / 1e6,
        time.perf_counter() - started)  # fmt: skip
    return final


def make_datasets(args: argparse.Namespace) -> dict[str, Path]:
    """Make every kind in ``--kinds``; returns each one's folder."""
    task_of(args.env)
    for kind in args.kinds:
        final = Path(args.out) / dataset_id(args.env, kind)
        if final.exists() and not args.overwrite:
            raise FileExistsError(f"{final} exists: pass --overwrite to replace it, or choose "
                                  "another --out")  # fmt: skip
    if args.policy and ("medium-replay" in args.kinds):
        raise ValueError("medium-replay is the SAC run's own training data: it cannot come from "
                         "--policy; drop --policy to train here")  # fmt: skip
    if args.policy and set(args.kinds) & NEEDS_EXPERT and not args.expert_policy:
        raise ValueError("with --policy (the medium policy), expert data needs --expert_policy "
                         "too, or drop --policy to train both here")  # fmt: skip
    if args.expert_policy and not args.policy and set(args.kinds) & NEEDS_MEDIUM:
        raise ValueError("--expert_policy without --policy: give the medium policy too, or "
                         "drop --expert_policy to train both here")  # fmt: skip
    torch.set_num_threads(args.torch_threads)
    set_seed(args.seed)
    written, run = {}, None
    if not args.policy and set(args.kinds) & (NEEDS_MEDIUM | NEEDS_EXPERT):
        run = SACRun(args)

    def make(kind: str, episodes: list[dict[str, np.ndarray]], how: dict[str, Any],
             seconds: float) -> None:  # fmt: skip
        if kind in args.kinds:
            written[kind] = write_dataset(
                args, kind, episodes, {**how, "seconds": round(seconds, 1)}
            )

    started = time.perf_counter()
    if "random" in args.kinds:
        rng = np.random.default_rng(args.seed + 1)
        act_dim = make_env(args).action_space.shape[0]
        log = collect(args, lambda obs: rng.uniform(-1, 1, act_dim).astype(np.float32),
                      args.seed + 1, "random")  # fmt: skip
        make("random", log.episodes(), {"algorithm": "uniformly random actions"},
             time.perf_counter() - started)  # fmt: skip
    medium_episodes: list[dict[str, np.ndarray]] = []
    if set(args.kinds) & NEEDS_MEDIUM:
        started = time.perf_counter()
        if run is None:
            policy = load_policy(args, args.policy)
        else:
            policy, replay = run.medium()
            make("medium-replay", replay.episodes(),
                 {"algorithm": "SAC's replay: every step of its training", "policy": policy.record()},
                 time.perf_counter() - started)  # fmt: skip
        logger.info("medium policy: evaluation return %.1f", policy.eval_return)
        medium_episodes = collect(args, policy.agent.sample, args.seed + 2, "medium").episodes()
        how = {"algorithm": "SAC, stochastic actions", "policy": policy.record()}
        make("medium", medium_episodes, how, time.perf_counter() - started)
    if set(args.kinds) & NEEDS_EXPERT:
        started = time.perf_counter()
        policy = load_policy(args, args.expert_policy) if run is None else run.expert()
        logger.info("expert policy: evaluation return %.1f", policy.eval_return)
        expert_episodes = collect(args, policy.agent.sample, args.seed + 3, "expert").episodes()
        how = {"algorithm": "SAC, stochastic actions", "policy": policy.record()}
        make("expert", expert_episodes, how, time.perf_counter() - started)
        make("medium-expert", medium_episodes + expert_episodes,
             {"algorithm": "SAC, stochastic actions: the medium episodes, then the expert ones"},
             time.perf_counter() - started)  # fmt: skip
    return written


def make_parser() -> argparse.ArgumentParser:
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="HalfCheetah-v5",
        defaults={"test_every_steps": 5_000, "eval_episodes": 5},
        skip=["train_total_steps", "logdir", "resume", "xparl_addr"],
        help={
            "env": "MuJoCo task with D4RL reference scores: HalfCheetah, Hopper or Walker2d",
            "test_every_steps": "evaluate the SAC policy every this many training steps",
            "eval_episodes": "deterministic episodes per evaluation of a policy",
        },
    )
    parser.add_argument("--out", required=True, help="folder the datasets go into (required)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                        help="datasets to make (default: all)")  # fmt: skip
    parser.add_argument("--samples", type=int, default=1_000_000,
                        help="steps in each collected dataset (D4RL's: 1,000,000)")  # fmt: skip
    parser.add_argument("--medium_return", type=float, default=None,
                        help="the evaluation return at which SAC's training stops for the medium "
                        "data (default: a third of D4RL's expert reference return)")  # fmt: skip
    parser.add_argument("--medium_max_steps", type=int, default=1_000_000,
                        help="training steps after which the medium policy is taken even below "
                        "--medium_return")  # fmt: skip
    parser.add_argument(
        "--expert_steps",
        type=int,
        default=1_000_000,
        help="training steps in all for the expert policy",
    )
    parser.add_argument("--policy", default=None, metavar="CHECKPOINT",
                        help="collect medium from this examples/SAC model.ckpt or checkpoint.pt "
                        "instead of training (default: train here)")  # fmt: skip
    parser.add_argument(
        "--expert_policy",
        default=None,
        metavar="CHECKPOINT",
        help="with --policy: collect expert from this checkpoint (default: none)",
    )
    parser.add_argument(
        "--workdir",
        default=None,
        help="where the SAC run is kept (default: OUT/sac-<task>-seed<seed>)",
    )
    parser.add_argument(
        "--max_episode_steps",
        type=int,
        default=1000,
        help="time limit of an episode (the tasks' own: 1000)",
    )
    parser.add_argument(
        "--warmup_steps", type=int, default=10_000, help="random-action steps before SAC learns"
    )
    parser.add_argument("--batch_size", type=int, default=256, help="SAC's batch size")
    parser.add_argument("--hidden", type=int, default=256, help="SAC's hidden layer width")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace datasets that already exist in --out"
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    for name in ("samples", "medium_max_steps", "expert_steps", "max_episode_steps", "batch_size",
                 "hidden"):  # fmt: skip
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be 1 or more, got {getattr(args, name)}")
    if args.warmup_steps < 0:
        parser.error(f"--warmup_steps must be 0 or more, got {args.warmup_steps}")
    try:
        task = task_of(args.env)
    except ValueError as error:
        parser.error(str(error))
    if args.medium_return is None:
        args.medium_return = D4RL_REF_SCORES[task][1] / 3
    args.kinds = [kind for kind in KINDS if kind in args.kinds]
    if args.workdir is None:
        args.workdir = str(Path(args.out) / f"sac-{task}-seed{args.seed}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Path]:
    args = parse_args(argv)
    started = time.perf_counter()
    written = make_datasets(args)
    logger.info("made %s in %.1f s", ", ".join(str(p) for p in written.values()),
                time.perf_counter() - started)  # fmt: skip
    return written


if __name__ == "__main__":
    main()
