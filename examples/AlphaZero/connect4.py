"""Connect Four's rules on a numpy board: 6 rows by 7 columns, 1 for the first player's stones,
-1 for the second's, 0 for empty; row 0 is the top, so a stone falls to the highest free row
index of its column.

A position is a ``Connect4`` state: the board, whose turn it is and how the last move ended.
``canonical()`` is the board from the view of the player to move (their stones +1), which is
what the network and the search see; ``symmetries`` gives the left-right mirror image used to
double the training examples.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ROWS, COLUMNS, IN_A_ROW = 6, 7, 4
ACTIONS = COLUMNS
# (row step, column step) of the four lines through a stone: vertical, horizontal, two diagonals
DIRECTIONS = ((1, 0), (0, 1), (1, 1), (1, -1))


class InvalidMoveError(ValueError):
    """A move into a full column, outside the board, or after the game ended."""


@dataclass
class Connect4:
    """A Connect Four position.

    ``player`` is the player to move (1 moves first). ``winner`` is 1 or -1 once a player has
    four in a row, 0 otherwise; ``moves`` counts the stones on the board.
    """

    board: np.ndarray = field(default_factory=lambda: np.zeros((ROWS, COLUMNS), np.int8))
    player: int = 1
    winner: int = 0
    moves: int = 0

    def copy(self) -> Connect4:
        return Connect4(self.board.copy(), self.player, self.winner, self.moves)

    @property
    def done(self) -> bool:
        """Someone has won, or the board is full (a draw)."""
        return self.winner != 0 or self.moves == ROWS * COLUMNS

    def valid_moves(self) -> np.ndarray:
        """A ``(7,)`` bool mask of the columns that take a stone (none once the game is over)."""
        if self.done:
            return np.zeros(COLUMNS, bool)
        return self.board[0] == 0

    def play(self, column: int) -> Connect4:
        """The position after the player to move drops a stone in ``column`` (0-6)."""
        if self.done:
            raise InvalidMoveError(f"column {column}: the game is over")
        if not 0 <= column < COLUMNS:
            raise InvalidMoveError(f"column must be 0 to {COLUMNS - 1}, got {column}")
        empty = np.flatnonzero(self.board[:, column] == 0)
        if len(empty) == 0:
            raise InvalidMoveError(f"column {column} is full")
        row = int(empty[-1])
        after = Connect4(self.board.copy(), -self.player, 0, self.moves + 1)
        after.board[row, column] = self.player
        if wins_at(after.board, row, column):
            after.winner = self.player
        return after

    def outcome(self, player: int) -> float:
        """The result for ``player`` of a finished game: 1 win, -1 loss, 0 draw."""
        return float(self.winner * player)

    def canonical(self) -> np.ndarray:
        """The board from the view of the player to move: their stones +1, the other's -1."""
        return self.board * np.int8(self.player)


def wins_at(board: np.ndarray, row: int, column: int) -> bool:
    """Whether the stone at ``(row, column)`` makes four in a row in any direction."""
    stone = board[row, column]
    if stone == 0:
        return False
    for dr, dc in DIRECTIONS:
        count = 1
        for sign in (1, -1):  # walk both ways along the line from the stone
            r, c = row + sign * dr, column + sign * dc
            while 0 <= r < ROWS and 0 <= c < COLUMNS and board[r, c] == stone:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= IN_A_ROW:
            return True
    return False


def winning_moves(state: Connect4, player: int) -> list[int]:
    """The columns where ``player`` would complete four in a row if it were their turn."""
    found = []
    for column in np.flatnonzero(state.valid_moves()):
        row = int(np.flatnonzero(state.board[:, column] == 0)[-1])
        state.board[row, column] = player  # try the stone in place, then take it back
        if wins_at(state.board, row, int(column)):
            found.append(int(column))
        state.board[row, column] = 0
    return found


def symmetries(board: np.ndarray, pi: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The example and its mirror image: Connect Four is symmetric under a left-right flip,
    which reverses the board's columns and the move probabilities alike."""
    return [(board, pi), (board[:, ::-1].copy(), pi[::-1].copy())]
