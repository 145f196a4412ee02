"""The self-play actor: it holds its own copy of the network, receives the learner's weights
with every call, and plays games on its CPU: self-play games that become training examples,
arena games between two networks, and evaluation games against the fixed players.

Every call carries its own seed, so what an actor returns depends only on its arguments: the
run is the same whichever actor answers first, on this machine, on a cluster or on Ray.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from agent import AlphaZeroAgent, build_agent
from arena import LookaheadPlayer, MCTSPlayer, Player, RandomPlayer, play_games
from connect4 import ACTIONS, COLUMNS, ROWS, Connect4, symmetries
from mcts import SearchConfig, choose_move, search

import parl


@dataclass(frozen=True)
class ActorConfig:
    """What an actor needs to build its network and play.

    Attributes:
        channels: width of the network's residual tower.
        blocks: residual blocks.
        search: the MCTS settings.
        temperature_moves: self-play moves (over both players) drawn in proportion to the visits
            before the most visited move is always played (PARL: 15).
        sampled_moves: arena and evaluation moves drawn in proportion to the visits at the
            start of each game, so that games between fixed players differ.
    """

    channels: int
    blocks: int
    search: SearchConfig
    temperature_moves: int = 15
    sampled_moves: int = 2


def self_play_games(
    agent: AlphaZeroAgent, config: ActorConfig, games: int, rng: np.random.Generator
) -> dict[str, Any]:
    """Play ``games`` self-play games together (the root's priors noisy); every position becomes
    two examples (itself and its mirror image) labelled with the game's outcome for the player
    who was to move there."""
    states = [Connect4() for _ in range(games)]
    history: list[list[tuple[np.ndarray, int, np.ndarray]]] = [[] for _ in range(games)]
    boards, pis, vs = [], [], []
    moves = 0
    while live := [g for g in range(games) if not states[g].done]:
        found = search([states[g] for g in live], agent.predict, config.search, rng, noise=True)
        for g, pi in zip(live, found, strict=True):
            state = states[g]
            history[g].append((state.canonical(), state.player, pi))
            temperature = 1.0 if state.moves < config.temperature_moves else 0.0
            states[g] = state.play(choose_move(pi, rng, temperature))
            moves += 1
            if states[g].done:
                for board, player, target in history[g]:
                    for b, p in symmetries(board, target):
                        boards.append(b)
                        pis.append(p)
                        vs.append(states[g].outcome(player))
    return {
        "boards": np.array(boards, np.int8).reshape(-1, ROWS, COLUMNS),
        "pis": np.array(pis, np.float32).reshape(-1, ACTIONS),
        "vs": np.array(vs, np.float32),
        "games": games,
        "moves": moves,
    }


@parl.remote_class(wait=False)
class SelfPlayActor:
    """Plays games with the weights it is sent (a state dict of numpy arrays)."""

    def __init__(self, config: ActorConfig) -> None:
        torch.set_num_threads(1)  # one core per actor: games in parallel, not matrix products
        self.config = config
        self.agent = build_agent(config.channels, config.blocks, lr=1e-3, weight_decay=0.0)
        self.opponent = build_agent(config.channels, config.blocks, lr=1e-3, weight_decay=0.0)

    def getpid(self) -> int:
        return os.getpid()

    def self_play(self, weights: dict[str, np.ndarray], games: int, seed: int) -> dict[str, Any]:
        """``games`` self-play games; their examples, game and move counts, and seconds."""
        start = time.perf_counter()
        self.agent.set_weights(weights)
        result = self_play_games(self.agent, self.config, games, np.random.default_rng(seed))
        return {**result, "seconds": time.perf_counter() - start}

    def pit(
        self,
        weights: dict[str, np.ndarray],
        opponent: str | dict[str, np.ndarray],
        games: int,
        seed: int,
        first: int = 0,
    ) -> tuple[int, int, int]:
        """``(wins, losses, draws)`` of the network ``weights`` in ``games`` games against
        ``opponent``: another network's weights, ``"random"`` or ``"lookahead"``; it moves
        first in the games ``first``, ``first + 2``, ..."""
        self.agent.set_weights(weights)
        player = MCTSPlayer(self.agent.predict, self.config.search, self.config.sampled_moves)
        other: Player
        if opponent == "random":
            other = RandomPlayer()
        elif opponent == "lookahead":
            other = LookaheadPlayer()
        elif isinstance(opponent, dict):
            self.opponent.set_weights(opponent)
            other = MCTSPlayer(self.opponent.predict, self.config.search, self.config.sampled_moves)
        else:
            raise ValueError(f"opponent must be weights, 'random' or 'lookahead', got {opponent!r}")
        score = play_games(player, other, games, np.random.default_rng(seed), first)
        return score.wins, score.losses, score.draws
