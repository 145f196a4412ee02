"""Players and the arena that makes them play each other.

A player chooses moves for several positions at once (``choose``), so that an MCTS player can
search all of an arena's games together. Three kinds play here: the network through MCTS, a
uniformly random player, and a one-move lookahead player (it wins when it can, blocks the
opponent's immediate win when it must, and plays at random otherwise), the two yardsticks every
evaluation measures the network against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from connect4 import Connect4, winning_moves
from mcts import Evaluator, SearchConfig, choose_move, search


class Player(Protocol):
    def choose(self, states: Sequence[Connect4], rng: np.random.Generator) -> list[int]:
        """A move for each of ``states``, each a game not yet over."""
        ...


class RandomPlayer:
    """A legal move drawn uniformly."""

    def choose(self, states: Sequence[Connect4], rng: np.random.Generator) -> list[int]:
        return [int(rng.choice(np.flatnonzero(s.valid_moves()))) for s in states]


class LookaheadPlayer:
    """Looks one move ahead: takes a winning move, else blocks the opponent's winning move,
    else plays a legal move at random."""

    def choose(self, states: Sequence[Connect4], rng: np.random.Generator) -> list[int]:
        moves = []
        for state in states:
            wins = winning_moves(state, state.player)
            threats = winning_moves(state, -state.player)
            options = wins or threats or np.flatnonzero(state.valid_moves()).tolist()
            moves.append(int(rng.choice(options)))
        return moves


@dataclass
class MCTSPlayer:
    """The network through MCTS, without exploration noise: the most visited move, except for
    the first ``sampled_moves`` moves of a game (counted over both players), drawn in
    proportion to the visits so that games between fixed players differ."""

    evaluate: Evaluator
    config: SearchConfig
    sampled_moves: int = 2

    def choose(self, states: Sequence[Connect4], rng: np.random.Generator) -> list[int]:
        pis = search(states, self.evaluate, self.config, rng, noise=False)
        return [
            choose_move(pi, rng, 1.0 if state.moves < self.sampled_moves else 0.0)
            for state, pi in zip(states, pis, strict=True)
        ]


@dataclass
class Score:
    """An arena's results, from the first-named player's side."""

    wins: int = 0
    losses: int = 0
    draws: int = 0

    @property
    def games(self) -> int:
        return self.wins + self.losses + self.draws

    @property
    def win_rate(self) -> float:
        """Wins per game played (draws count as games not won)."""
        return self.wins / self.games if self.games else 0.0

    def add(self, other: Score) -> Score:
        return Score(self.wins + other.wins, self.losses + other.losses, self.draws + other.draws)


def play_games(
    player: Player, opponent: Player, games: int, rng: np.random.Generator, first: int = 0
) -> Score:
    """Play ``games`` games, ``player`` moving first in every other one (in the even-numbered
    games, counted from ``first``); all games advance together, one ply per round."""
    states = [Connect4() for _ in range(games)]
    # +1: ``player`` holds the stones of the side that moves first, -1 the other side's
    sides = [1 if (first + g) % 2 == 0 else -1 for g in range(games)]
    while True:
        live = [g for g in range(games) if not states[g].done]
        if not live:
            break
        for who, side in ((player, 1), (opponent, -1)):
            # a game the other player has just finished in this round is skipped
            turn = [g for g in live if not states[g].done and states[g].player == sides[g] * side]
            if turn:
                for g, move in zip(turn, who.choose([states[g] for g in turn], rng), strict=True):
                    states[g] = states[g].play(move)
    score = Score()
    for state, side in zip(states, sides, strict=True):
        result = state.outcome(side)
        if result > 0:
            score.wins += 1
        elif result < 0:
            score.losses += 1
        else:
            score.draws += 1
    return score
