"""Monte Carlo tree search guided by a policy-value network (AlphaZero's PUCT search).

Each simulation walks from the root to a position not yet evaluated, picking at every node the
move with the highest ``Q(s, a) + c_puct * P(s, a) * sqrt(N(s)) / (1 + N(s, a))``, where ``P``
is the network's prior, ``N`` counts visits and ``Q`` is the mean value of the move for the
player making it. The network then gives that position's priors and value (a finished game's
value is its outcome instead), and the value is backed up along the path, changing sign at each
ply since the players alternate. The search's answer is the root's visit distribution.

Several searches (one per game) advance together, one simulation each per round, so that the
positions they need evaluated go through the network in one batch: with ``G`` games a forward
pass sees ``G`` boards instead of one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from connect4 import ACTIONS, Connect4

# canonical boards (B, 6, 7) -> move probabilities (B, 7) and values (B,) for the player to move
Evaluator = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class SearchConfig:
    """How one move is searched.

    Attributes:
        simulations: simulations per move (after the root's own evaluation).
        c_puct: weight of the prior against the mean value (PARL: 4).
        dirichlet_alpha: concentration of the noise mixed into the root's priors (PARL: 1.0).
        noise_fraction: share of that noise in the root's priors (AlphaZero: 0.25); 0 for none.
    """

    simulations: int = 50
    c_puct: float = 4.0
    dirichlet_alpha: float = 1.0
    noise_fraction: float = 0.25


class Node:
    """A position in the tree and the statistics of the moves out of it."""

    __slots__ = ("children", "prior", "state", "value_sum", "visits")

    def __init__(self, state: Connect4) -> None:
        self.state = state
        self.prior: np.ndarray | None = None  # set once the network has evaluated the position
        self.visits = np.zeros(ACTIONS)
        self.value_sum = np.zeros(ACTIONS)  # summed values for the player to move here
        self.children: dict[int, Node] = {}

    def select(self, c_puct: float) -> int:
        """The move with the highest PUCT score; ties go to the lowest column."""
        assert self.prior is not None
        total = self.visits.sum()
        q = np.divide(self.value_sum, self.visits, out=np.zeros(ACTIONS), where=self.visits > 0)
        # before any visit sqrt(N) would be 0 and hide the priors: count the root's own visit
        u = c_puct * self.prior * math.sqrt(max(total, 1.0)) / (1.0 + self.visits)
        score = np.where(self.state.valid_moves(), q + u, -np.inf)
        return int(np.argmax(score))


class Search:
    """One tree rooted at ``state``; ``leaf()`` and ``expand()`` make one simulation."""

    def __init__(
        self, state: Connect4, config: SearchConfig, rng: np.random.Generator, noise: bool
    ) -> None:
        self.root = Node(state)
        self.config, self.rng, self.noise = config, rng, noise
        self.path: list[tuple[Node, int]] = []

    def leaf(self) -> Node:
        """Walk down to a position that is new or finished; remember the path taken."""
        node, self.path = self.root, []
        while node.prior is not None and not node.state.done:
            move = node.select(self.config.c_puct)
            self.path.append((node, move))
            child = node.children.get(move)
            if child is None:
                child = node.children[move] = Node(node.state.play(move))
            node = child
        return node

    def expand(self, leaf: Node, prior: np.ndarray | None, value: float) -> None:
        """Give ``leaf`` its masked priors (none for a finished game) and back ``value`` up:
        ``value`` is for the player to move at ``leaf``."""
        if prior is not None and leaf.prior is None:
            valid = leaf.state.valid_moves()
            prior = np.where(valid, prior, 0.0)
            # a network that puts no mass on any legal move: fall back to uniform
            prior = prior / prior.sum() if prior.sum() > 0 else valid / valid.sum()
            if leaf is self.root and self.noise and self.config.noise_fraction > 0:
                noise = np.zeros(ACTIONS)
                noise[valid] = self.rng.dirichlet([self.config.dirichlet_alpha] * valid.sum())
                eps = self.config.noise_fraction
                prior = (1 - eps) * prior + eps * noise
            leaf.prior = prior
        for node, move in reversed(self.path):
            value = -value  # the player who moved at ``node`` is the other one
            node.visits[move] += 1
            node.value_sum[move] += value

    def policy(self) -> np.ndarray:
        """The root's visit distribution (uniform over legal moves before any visit)."""
        visits = self.root.visits
        if visits.sum() == 0:
            valid = self.root.state.valid_moves()
            return valid / valid.sum()
        return visits / visits.sum()


def search(
    states: Sequence[Connect4],
    evaluate: Evaluator,
    config: SearchConfig,
    rng: np.random.Generator,
    noise: bool = False,
) -> list[np.ndarray]:
    """Search every position of ``states`` at once; their visit distributions ``(7,)``.

    Each round makes one simulation in every tree and evaluates the new positions in one call
    of ``evaluate``; finished games are scored by their outcome without the network.
    """
    trees = [Search(state, config, rng, noise) for state in states]
    for _ in range(config.simulations + 1):  # the first round evaluates the roots
        leaves = [tree.leaf() for tree in trees]
        open_ = [i for i, leaf in enumerate(leaves) if not leaf.state.done]
        priors: dict[int, np.ndarray] = {}
        values: dict[int, float] = {}
        if open_:
            boards = np.stack([leaves[i].state.canonical() for i in open_])
            pi, v = evaluate(boards)
            for row, i in enumerate(open_):
                priors[i], values[i] = pi[row], float(v[row])
        for i, (tree, leaf) in enumerate(zip(trees, leaves, strict=True)):
            if leaf.state.done:  # the value of a finished game for the player to move there
                tree.expand(leaf, None, leaf.state.outcome(leaf.state.player))
            else:
                tree.expand(leaf, priors[i], values[i])
    return [tree.policy() for tree in trees]


def choose_move(pi: np.ndarray, rng: np.random.Generator, temperature: float) -> int:
    """A move from the visit distribution ``pi``: drawn in proportion to ``pi ** (1 /
    temperature)``, or (``temperature`` 0) the most visited, ties drawn at random."""
    if temperature == 0:
        best = np.flatnonzero(pi == pi.max())
        return int(rng.choice(best))
    weights = pi ** (1.0 / temperature)
    return int(rng.choice(len(pi), p=weights / weights.sum()))
