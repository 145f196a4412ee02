"""AlphaZero (Silver et al., 2017 and 2018; PARL's AlphaZero benchmark) learning Connect Four by
self-play: actors play games with MCTS guided by the network, the learner trains on a window of
recent games, and an arena keeps the new network only if it beats the previous one.

    python examples/AlphaZero/train.py                               # 2 local actors
    python examples/AlphaZero/train.py --actors_num 4 --xparl_addr localhost:8010  # a cluster
    python examples/AlphaZero/train.py --xparl_addr ray              # actors on Ray
    python examples/AlphaZero/train.py --resume                      # go on from the checkpoint
    tensorboard --logdir train_log

A step of ``--train_total_steps`` is one iteration: ``--games_per_iter`` self-play games shared
among the ``--actors_num`` actors; ``--epochs`` passes over the examples of the last
``--window_iterations`` iterations; ``--arena_games`` games of the trained network against the
one it started from, kept if it wins at least ``--update_threshold`` of the decided games (PARL's
rule); every ``--test_every_steps`` iterations ``--eval_episodes`` games each against a random
player and a one-move-lookahead player. Win rates, losses and self-play games per second go to
the log and TensorBoard; a checkpoint after each iteration lets ``--resume`` continue exactly.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from actor import ActorConfig, SelfPlayActor
from agent import AlphaZeroAgent, Examples, build_agent
from arena import Score
from mcts import SearchConfig
from tqdm import tqdm

import parl
from parl.utils import logger, set_seed, summary
from parl.utils.train_flags import (
    add_common_flags,
    add_hidden_alias,
    example_parser,
    refuse_resume_without_checkpoint,
    require_checkpoint,
)

CHECKPOINT = "checkpoint.pt"
# what each seed of an iteration is for: self-play, learning, arena, evaluation
SELF_PLAY, LEARNING, ARENA, EVALUATION = range(4)


@dataclass
class TrainResult:
    iterations: int = 0
    accepted: int = 0  # iterations whose network won the arena
    history: list[dict[str, float]] = field(default_factory=list)  # one row per evaluation
    self_play_games: int = 0
    self_play_seconds: float = 0.0


def seed_of(seed: int, iteration: int, purpose: int, part: int = 0) -> int:
    """The seed of one call: a function of the run's seed and where the call sits in the run,
    so a resumed run draws exactly what the uninterrupted one would have."""
    return int(np.random.SeedSequence([seed, iteration, purpose, part]).generate_state(1)[0])


def shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` counts that differ by at most one."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class Coach:
    """The learner's side: the agent, the window of examples and the actors."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.agent: AlphaZeroAgent = build_agent(
            args.channels, args.blocks, args.lr, args.weight_decay, args.device
        )
        self.window: deque[Examples] = deque(maxlen=args.window_iterations)
        self.iteration = 0
        self.result = TrainResult()
        self.checkpoint = os.path.join(args.logdir, CHECKPOINT)
        search = SearchConfig(
            args.mcts_sims, args.c_puct, args.dirichlet_alpha, args.noise_fraction
        )
        self.config = ActorConfig(args.channels, args.blocks, search, args.temperature_moves)
        if args.resume:  # before any actor starts: a missing checkpoint fails at once
            self.restore()
        if args.xparl_addr:
            parl.connect(args.xparl_addr)
        else:  # the worker pool imports torch once; actors start in milliseconds
            parl.connect("local", preload=["torch"])
        self.actors = [SelfPlayActor(self.config) for _ in range(args.actors_num)]

    # -- the three phases of an iteration --------------------------------------------------
    def self_play(self) -> tuple[Examples, int, float]:
        """The iteration's self-play games on every actor: examples, games, seconds."""
        start = time.perf_counter()
        weights = self.agent.get_weights()
        futures = [
            actor.self_play(weights, games, seed_of(self.args.seed, self.iteration, SELF_PLAY, i))
            for i, (actor, games) in enumerate(self._split(self.args.games_per_iter))
        ]
        replies = [future.get() for future in futures]  # in actor order: the same every run
        examples = Examples.concatenate([Examples(r["boards"], r["pis"], r["vs"]) for r in replies])
        games = sum(r["games"] for r in replies)
        return examples, games, time.perf_counter() - start

    def pit(self, opponent: str | dict[str, np.ndarray], games: int, purpose: int) -> Score:
        """The current network against ``opponent`` over ``games`` games shared by the actors,
        moving first in every other game."""
        weights = self.agent.get_weights()
        futures, offset = [], 0
        for i, (actor, count) in enumerate(self._split(games)):
            seed = seed_of(self.args.seed, self.iteration, purpose, i)
            futures.append(actor.pit(weights, opponent, count, seed, offset % 2))
            offset += count
        score = Score()
        for future in futures:
            score = score.add(Score(*future.get()))
        return score

    def _split(self, total: int) -> list[tuple[Any, int]]:
        return [
            (a, n)
            for a, n in zip(self.actors, shares(total, len(self.actors)), strict=True)
            if n > 0
        ]

    # -- one iteration ------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        args = self.args
        self.iteration += 1
        examples, games, seconds = self.self_play()
        self.window.append(examples)
        self.result.self_play_games += games
        self.result.self_play_seconds += seconds
        previous = self.agent.get_weights()
        rng = np.random.default_rng(seed_of(args.seed, self.iteration, LEARNING))
        total_loss, pi_loss, v_loss = self.agent.learn(
            Examples.concatenate(list(self.window)), args.epochs, args.batch_size, rng
        )
        arena = self.pit(previous, args.arena_games, ARENA)
        decided = arena.wins + arena.losses
        accepted = decided > 0 and arena.wins / decided >= args.update_threshold
        if accepted:
            self.result.accepted += 1
        else:  # the trained network lost the arena: go on from the previous one
            self.agent.set_weights(previous)
        row = {
            "iteration": self.iteration,
            "games_per_second": games / seconds,
            "examples": float(sum(len(e.vs) for e in self.window)),
            "total_loss": total_loss,
            "pi_loss": pi_loss,
            "v_loss": v_loss,
            "arena_win_rate": arena.wins / decided if decided else 0.0,
            "accepted": float(accepted),
        }
        if np.isnan(total_loss):  # less than one batch in the window: no update ran
            learned = f"no update (fewer examples than a batch of {args.batch_size})"
            for key in ("total_loss", "pi_loss", "v_loss"):
                del row[key]
        else:
            learned = f"loss {total_loss:.3f} (pi {pi_loss:.3f}, v {v_loss:.3f})"
        logger.info(
            "iteration %d: %d self-play games in %.1f s (%.2f games/s), %d examples in the "
            "window; %s; arena %d-%d-%d (wins-losses-draws): %s",
            self.iteration, games, seconds, games / seconds, row["examples"], learned,
            arena.wins, arena.losses, arena.draws, "accepted" if accepted else "rejected",
        )  # fmt: skip
        return row

    def evaluate(self) -> dict[str, float]:
        """Win rates of the current network against the random and the lookahead players."""
        rates = {}
        for name in ("random", "lookahead"):
            score = self.pit(name, self.args.eval_episodes, EVALUATION)
            rates[f"win_rate_vs_{name}"] = score.win_rate
            logger.info(
                "iteration %d: against the %s player %d-%d-%d (win rate %.2f)",
                self.iteration, name, score.wins, score.losses, score.draws, score.win_rate,
            )  # fmt: skip
        return rates

    # -- checkpoints --------------------------------------------------------------------------
    def save(self) -> None:
        """The network, the optimizer, the window, the counters and the random states."""
        self.agent.save_checkpoint(
            self.checkpoint,
            counters={"iteration": self.iteration, "accepted": self.result.accepted},
            extra={
                "optimizer": self.agent.optimizer.state_dict(),
                "window": [e._asdict() for e in self.window],
                "history": self.result.history,
                "self_play": [self.result.self_play_games, self.result.self_play_seconds],
            },
        )

    def restore(self) -> None:
        require_checkpoint(self.checkpoint)
        state = self.agent.restore_checkpoint(self.checkpoint, map_location=self.agent.device)
        self.iteration = int(state.counters["iteration"])
        self.result.accepted = int(state.counters["accepted"])
        self.agent.optimizer.load_state_dict(state.extra["optimizer"])
        self.window.extend(Examples(**part) for part in state.extra["window"])
        self.result.history = list(state.extra["history"])
        games, seconds = state.extra["self_play"]
        self.result.self_play_games, self.result.self_play_seconds = int(games), float(seconds)
        logger.info("resumed from %s at iteration %d", self.checkpoint, self.iteration)

    def close(self) -> None:
        for actor in self.actors:
            parl.close_actor(actor)


def train(args: argparse.Namespace) -> TrainResult:
    coach = Coach(args)
    summary.set_dir(args.logdir)
    stop_at = min(args.train_total_steps, args.stop_after_steps or args.train_total_steps)
    bar = tqdm(total=args.train_total_steps, initial=coach.iteration, disable=not args.progress)
    try:
        while coach.iteration < stop_at:
            row = coach.step()
            if coach.iteration % args.test_every_steps == 0 or (
                coach.iteration == args.train_total_steps
            ):
                row |= coach.evaluate()
                coach.result.history.append(row)
            for key, value in row.items():
                if key != "iteration":
                    summary.add_scalar(f"alphazero/{key}", value, coach.iteration)
            bar.update(1)
            bar.set_postfix(
                {k[12:]: f"{v:.2f}" for k, v in row.items() if k.startswith("win_rate_vs_")}
            )
            coach.save()
    finally:
        bar.close()
        coach.close()
    result = coach.result
    result.iterations = coach.iteration
    coach.agent.save(os.path.join(args.logdir, "model.pt"))
    rate = result.self_play_games / max(result.self_play_seconds, 1e-9)
    logger.info(
        "done: %d iterations, %d networks accepted; %d self-play games at %.2f games/s",
        result.iterations, result.accepted, result.self_play_games, rate,
    )  # fmt: skip
    summary.flush()
    return result


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="connect4",
        gym_env=False,
        defaults={
            "train_total_steps": 30,
            "test_every_steps": 1,
            "eval_episodes": 40,
            "logdir": os.path.join("train_log", "AlphaZero"),
        },
        help={
            "env": "the game (only connect4: Connect Four, 6 rows by 7 columns)",
            "train_total_steps": "iterations to train for (self-play, training, arena); PARL "
            "runs 200",
            "test_every_steps": "play the random and the lookahead players every this many "
            "iterations (a checkpoint is written after every iteration)",
            "eval_episodes": "games against each of the random and the lookahead players per "
            "evaluation",
            "xparl_addr": "address (host:port) of an xparl cluster to run the actors on, or ray "
            "(default: none, they run on this machine)",
        },
    )
    own: Sequence[tuple[str, type, Any, str]] = (
        ("actors_num", int, 2, "self-play actors (PARL: 25)"),
        ("games_per_iter", int, 80, "self-play games per iteration (PARL: 500)"),
        ("mcts_sims", int, 50, "MCTS simulations per move (PARL: 800)"),
        ("c_puct", float, 4.0, "weight of the prior in MCTS's PUCT score (PARL: 4)"),
        ("dirichlet_alpha", float, 1.0, "Dirichlet noise's concentration at the root (PARL: 1)"),
        ("noise_fraction", float, 0.25, "share of the noise in the root's priors (PARL: 0.25)"),
        ("temperature_moves", int, 15, "self-play moves drawn from the visits before the most "
         "visited is always played (PARL: 15)"),
        ("window_iterations", int, 10, "iterations whose examples make up the training window "
         "(PARL: 20)"),
        ("epochs", int, 3, "passes over the window per iteration (PARL: 5)"),
        ("batch_size", int, 64, "examples per update (PARL: 64)"),
        ("lr", float, 1e-3, "Adam's learning rate (PARL: 1e-3)"),
        ("weight_decay", float, 1e-4, "L2 penalty of the weights (PARL: none)"),
        ("channels", int, 32, "width of the residual tower"),
        ("blocks", int, 2, "residual blocks"),
        ("arena_games", int, 30, "games of the new network against the previous one (PARL: 50)"),
        ("update_threshold", float, 0.6, "share of the decided arena games the new network "
         "must win to be kept (PARL: 0.6)"),
        ("stop_after_steps", int, 0, "end this run after this many iterations, as if "
         "interrupted (0: never)"),
    )  # fmt: skip
    for name, kind, default, text in own:
        parser.add_argument(f"--{name}", type=kind, default=default, help=text)
    add_hidden_alias(parser, "--actor_num", "--actors_num")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.env != "connect4":
        parser.error(f"--env: the only game is connect4, got {args.env!r}")
    for name in ("actors_num", "games_per_iter", "mcts_sims", "epochs", "batch_size",
                 "window_iterations", "channels", "blocks", "arena_games"):  # fmt: skip
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be 1 or more, got {getattr(args, name)}")
    for name in ("seed", "temperature_moves", "stop_after_steps"):
        if getattr(args, name) < 0:
            parser.error(f"--{name} must be 0 or more, got {getattr(args, name)}")
    # a Dirichlet distribution needs a concentration above 0; the search needs a positive
    # weight on the priors; noise is a share of the root's priors
    for name in ("c_puct", "dirichlet_alpha"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name} must be above 0, got {getattr(args, name)}")
    if not 0.0 <= args.noise_fraction <= 1.0:
        parser.error(f"--noise_fraction must be in [0, 1] (0: no noise), got {args.noise_fraction}")
    if not 0.0 <= args.update_threshold <= 1.0:
        parser.error(f"--update_threshold must be in [0, 1], got {args.update_threshold}")
    refuse_resume_without_checkpoint(parser, args.resume, args.logdir)
    return args


def main(argv: list[str] | None = None) -> TrainResult:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    set_seed(args.seed)
    logger.info(
        "AlphaZero on Connect Four: %d iterations of %d self-play games, %d actors, %d MCTS "
        "simulations per move, seed %d",
        args.train_total_steps, args.games_per_iter, args.actors_num, args.mcts_sims, args.seed,
    )  # fmt: skip
    return train(args)


if __name__ == "__main__":
    main()
