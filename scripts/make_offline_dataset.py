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
The online part (steps, collection, the SAC run) is in ``offline_sac.py`` beside this script.
The SAC run is kept under ``--workdir``: ``medium/`` and ``expert/`` (the policy, the training
checkpoint and every step trained on); a later ``--kinds expert`` continues from ``medium/``, a
larger ``--expert_steps`` from ``expert/``. Every ``--save_every`` steps the training so far is
kept too (``medium-partial/``, ``expert-partial/``), and so is the run at the end of the episode
under way on Ctrl-C or SIGTERM (a second one stops at once): the same command, rerun, continues
where it stopped and ends with the policy of one uninterrupted run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from offline_sac import SACRun, StepLog, Stopped, collect, load_policy, make_env, staged_folder

import parl
from parl.utils import logger, set_seed
from parl.utils.offline_data import D4RL_REF_SCORES, d4rl_normalized_score
from parl.utils.train_flags import add_common_flags, example_parser, finite_float

__all__ = ["StepLog", "main", "make_datasets", "staged_folder", "write_dataset"]

TASKS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")  # the ones with D4RL reference scores
KINDS = ("random", "medium", "medium-replay", "expert", "medium-expert")
# which stage of the SAC run each kind needs
NEEDS_MEDIUM = {"medium", "medium-replay", "medium-expert"}
NEEDS_EXPERT = {"expert", "medium-expert"}


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


# -- writing ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def minari_root(folder: Path) -> Iterator[None]:
    """Minari writes under ``MINARI_DATASETS_PATH``: point it at ``folder`` for the block. The
    path is made absolute: Minari joins a relative one to itself when it sizes the files."""
    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(Path(folder).resolve())
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


def refuse_bad_plan(args: argparse.Namespace) -> None:
    """Refuse, before any work, datasets that exist (without ``--overwrite``) and policies
    that cannot give the kinds asked for."""
    task_of(args.env)
    for kind in args.kinds:
        final = Path(args.out) / dataset_id(args.env, kind)
        if final.exists() and not args.overwrite:
            raise FileExistsError(f"{final} exists: pass --overwrite to replace it, leave "
                                  f"{kind} out of --kinds, or choose another --out")  # fmt: skip
    if args.policy and ("medium-replay" in args.kinds):
        raise ValueError("medium-replay is the SAC run's own training data: it cannot come from "
                         "--policy; drop --policy to train here")  # fmt: skip
    if args.policy and set(args.kinds) & NEEDS_EXPERT and not args.expert_policy:
        raise ValueError("with --policy (the medium policy), expert data needs --expert_policy "
                         "too, or drop --policy to train both here")  # fmt: skip
    if args.expert_policy and not args.policy and set(args.kinds) & NEEDS_MEDIUM:
        raise ValueError("--expert_policy without --policy: give the medium policy too, or "
                         "drop --expert_policy to train both here")  # fmt: skip


def make_datasets(args: argparse.Namespace) -> dict[str, Path]:
    """Make every kind in ``--kinds``; returns each one's folder.

    Raises:
        Stopped: Ctrl-C or SIGTERM while SAC trained, with the run so far kept in ``--workdir``.
    """
    written: dict[str, Path] = {}
    try:
        return _make_datasets(args, written)
    except Stopped as stopped:
        if not written:
            raise
        raise Stopped(
            stopped.signum,
            f"{stopped} (with {' '.join(written)} left out of --kinds: "
            f"{', '.join(str(p) for p in written.values())} were written)",
        ) from None


def _make_datasets(args: argparse.Namespace, written: dict[str, Path]) -> dict[str, Path]:
    refuse_bad_plan(args)
    torch.set_num_threads(args.torch_threads)
    set_seed(args.seed)
    run = None
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
    parser.add_argument("--medium_return", type=finite_float, default=None,
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
        "--save_every",
        type=int,
        default=50_000,
        help="keep the SAC run so far in --workdir every this many training steps; a run "
        "interrupted later continues from there",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace datasets that already exist in --out"
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    for name in ("samples", "medium_max_steps", "expert_steps", "max_episode_steps", "batch_size",
                 "hidden", "save_every"):  # fmt: skip
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be 1 or more, got {getattr(args, name)}")
    if args.warmup_steps < 0:
        parser.error(f"--warmup_steps must be 0 or more, got {args.warmup_steps}")
    for name in ("out", "workdir"):
        if getattr(args, name) is not None and Path(getattr(args, name)).is_file():
            parser.error(f"--{name} {getattr(args, name)} is a file: give a folder")
    try:
        task = task_of(args.env)
    except ValueError as error:
        parser.error(str(error))
    if args.medium_return is None:
        args.medium_return = D4RL_REF_SCORES[task][1] / 3
    args.kinds = [kind for kind in KINDS if kind in args.kinds]
    if args.workdir is None:
        args.workdir = str(Path(args.out) / f"sac-{task}-seed{args.seed}")
    try:
        refuse_bad_plan(args)
    except (FileExistsError, ValueError) as error:
        parser.error(str(error))
    return args


def main(argv: list[str] | None = None) -> dict[str, Path]:
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        written = make_datasets(args)
    except Stopped as stopped:
        logger.warning("%s", stopped)
        raise SystemExit(128 + stopped.signum) from None
    logger.info("made %s in %.1f s", ", ".join(str(p) for p in written.values()),
                time.perf_counter() - started)  # fmt: skip
    return written


if __name__ == "__main__":
    main()
