"""examples/AlphaZero: Connect Four's rules, the search finding a forced win and blocking a
forced loss, the fixed players, and the training script run end to end with two local actors:
a stopped-and-resumed run (its parts with actors of their own) equals a run straight through,
so the seed decides the network."""

from __future__ import annotations

import glob
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest
import torch

from .conftest import REPO_ROOT, RunPython
from .example_mains import imported_example, run_ok

EXAMPLE = REPO_ROOT / "examples" / "AlphaZero"
MODULES = ("connect4", "mcts", "arena", "model", "agent")


@pytest.fixture(scope="module")
def az() -> Iterator[SimpleNamespace]:
    """The example's game, search and players, imported from its folder (and forgotten after,
    so another example's modules of the same names are not shadowed)."""
    saved = {name: sys.modules.pop(name) for name in MODULES if name in sys.modules}
    sys.path.insert(0, str(EXAMPLE))
    try:
        yield SimpleNamespace(**{name: importlib.import_module(name) for name in MODULES})
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in MODULES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def play(az: SimpleNamespace, *columns: int) -> ModuleType:
    state = az.connect4.Connect4()
    for column in columns:
        state = state.play(column)
    return state


def uniform(boards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A network that knows nothing: every move equally likely, every position even."""
    return np.full((len(boards), 7), 1 / 7), np.zeros(len(boards))


# -- the rules ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("moves", "direction"),
    [
        ((0, 1, 0, 1, 0, 1, 0), "vertical"),
        ((0, 0, 1, 1, 2, 2, 3), "horizontal"),
        ((0, 1, 1, 2, 2, 3, 2, 3, 3, 6, 3), "rising diagonal"),
        ((6, 5, 5, 4, 4, 3, 4, 3, 3, 0, 3), "falling diagonal"),
    ],
)
def test_four_in_a_row_wins_in_every_direction(az, moves, direction) -> None:
    before = play(az, *moves[:-1])
    assert before.winner == 0 and not before.done, direction
    after = before.play(moves[-1])
    assert after.winner == 1 and after.done, direction
    assert after.outcome(1) == 1.0 and after.outcome(-1) == -1.0
    assert not after.valid_moves().any()


def test_a_full_board_without_four_in_a_row_is_a_draw(az) -> None:
    # columns filled in pairs so that no line of four forms: 0,1 then 2,3 then 4,5, then 6
    order = [0, 1] * 3 + [1, 0] * 3 + [2, 3] * 3 + [3, 2] * 3 + [4, 5] * 3 + [5, 4] * 3 + [6] * 6
    state = play(az, *order)
    assert state.moves == 42 and state.done and state.winner == 0
    assert state.outcome(1) == 0.0 and state.outcome(-1) == 0.0


def test_invalid_moves_raise(az) -> None:
    full = play(az, *([3] * 6))
    assert not full.valid_moves()[3] and full.valid_moves().sum() == 6
    with pytest.raises(az.connect4.InvalidMoveError, match="column 3 is full"):
        full.play(3)
    with pytest.raises(az.connect4.InvalidMoveError, match="0 to 6, got 7"):
        full.play(7)
    won = play(az, 0, 1, 0, 1, 0, 1, 0)
    with pytest.raises(az.connect4.InvalidMoveError, match="the game is over"):
        won.play(2)


def test_canonical_board_and_mirror_image(az) -> None:
    state = play(az, 0, 6, 1)  # the second player is to move
    board = state.canonical()
    assert board[5, 0] == -1 and board[5, 1] == -1 and board[5, 6] == 1
    pi = np.arange(7, dtype=np.float32) / 21
    (same, same_pi), (flipped, flipped_pi) = az.connect4.symmetries(board, pi)
    assert np.array_equal(same, board) and np.array_equal(flipped, board[:, ::-1])
    assert np.array_equal(flipped_pi, pi[::-1])


# -- the search -------------------------------------------------------------------------------
def test_mcts_plays_a_win_in_one(az) -> None:
    state = play(az, 0, 6, 1, 6, 2, 5)  # the first player has 0, 1, 2 on the bottom row
    config = az.mcts.SearchConfig(simulations=50, noise_fraction=0.0)
    (pi,) = az.mcts.search([state], uniform, config, np.random.default_rng(0))
    assert int(np.argmax(pi)) == 3 and pi[3] > 0.5


def test_mcts_blocks_the_opponents_win_in_one(az) -> None:
    state = play(az, 0, 6, 1, 6, 2)  # the second player must take column 3
    config = az.mcts.SearchConfig(simulations=200, noise_fraction=0.0)
    (pi,) = az.mcts.search([state], uniform, config, np.random.default_rng(0))
    assert int(np.argmax(pi)) == 3 and pi[3] > 0.4


def test_root_noise_changes_the_priors_but_keeps_illegal_moves_out(az) -> None:
    state = play(az, *([3] * 6))
    config = az.mcts.SearchConfig(simulations=20)
    tree = az.mcts.Search(state, config, np.random.default_rng(0), noise=True)
    tree.expand(tree.leaf(), np.full(7, 1 / 7), 0.0)
    assert tree.root.prior[3] == 0.0 and tree.root.prior.sum() == pytest.approx(1.0)
    assert not np.allclose(tree.root.prior[tree.root.state.valid_moves()], 1 / 6)


# -- the players and the arena ------------------------------------------------------------------
def test_lookahead_player_wins_when_it_can_and_blocks_when_it_must(az) -> None:
    player, rng = az.arena.LookaheadPlayer(), np.random.default_rng(0)
    win = play(az, 0, 6, 1, 6, 2, 5)  # it can win at 3 (and its opponent threatens nothing)
    block = play(az, 0, 6, 1, 6, 2)  # the opponent wins at 3 unless it is blocked
    both = play(az, 0, 6, 1, 6, 2, 6)  # it can win at 3 and the opponent threatens 6: win
    assert player.choose([win, block, both] * 5, rng) == [3, 3, 3] * 5
    free = play(az, 3)
    moves = player.choose([free] * 50, rng)
    assert len(set(moves)) > 1 and all(0 <= m < 7 for m in moves)  # otherwise at random


def test_learning_from_fewer_examples_than_a_batch_is_no_update(az) -> None:
    """The window can hold less than one batch early on: no step is taken and the losses are
    NaN (the script logs "no update"), not a mean of zeros that reads as a perfect fit."""
    torch.manual_seed(0)
    agent = az.agent.build_agent(channels=4, blocks=1, lr=1e-2, weight_decay=0.0)
    rng = np.random.default_rng(0)
    boards = rng.integers(-1, 2, (3, 6, 7)).astype(np.int8)
    pis = np.full((3, 7), 1 / 7, np.float32)
    examples = az.agent.Examples(boards, pis, np.array([1.0, -1.0, 0.0], np.float32))
    before = {k: v.copy() for k, v in agent.get_weights().items()}
    losses = agent.learn(examples, epochs=2, batch_size=4, rng=rng)
    assert all(np.isnan(loss) for loss in losses)
    assert all(np.array_equal(before[k], v) for k, v in agent.get_weights().items())
    losses = agent.learn(examples, epochs=2, batch_size=3, rng=rng)
    assert all(np.isfinite(loss) for loss in losses)
    assert any(not np.array_equal(before[k], v) for k, v in agent.get_weights().items())


def test_arena_alternates_who_starts_and_counts_every_game(az) -> None:
    rng = np.random.default_rng(0)
    score = az.arena.play_games(az.arena.LookaheadPlayer(), az.arena.RandomPlayer(), 40, rng)
    assert score.games == 40 and score.win_rate > 0.8
    first_mover = az.arena.play_games(_FirstColumn(), _FirstColumn(), 2, rng)
    assert (first_mover.wins, first_mover.losses) == (1, 1)  # column 0 stacked: the starter wins


class _FirstColumn:
    """Plays the leftmost legal column."""

    def choose(self, states, rng) -> list[int]:
        return [int(np.flatnonzero(s.valid_moves())[0]) for s in states]


# -- the training script ------------------------------------------------------------------------
SMALL = ["--games_per_iter", "4", "--mcts_sims", "6", "--arena_games", "2", "--eval_episodes",
         "2", "--epochs", "1", "--batch_size", "16", "--channels", "8", "--blocks", "1",
         "--actors_num", "2", "--no_progress", "--torch_threads", "1", "--train_total_steps",
         "2", "--test_every_steps", "2"]  # fmt: skip


def weights(logdir: Path) -> dict[str, torch.Tensor]:
    return torch.load(logdir / "model.pt", weights_only=True)


@pytest.mark.slow  # the example script, with actors in worker processes
def test_example_trains_with_two_local_actors_and_resumes_exactly(
    run_python: RunPython, tmp_path: Path
) -> None:
    """A run stopped after its first iteration and resumed in another interpreter ends with
    the straight run's network. Each part starts its own two actors, which answer in whatever
    order they finish: the same network shows that the seed decides everything. The straight
    run and the first part run in one interpreter, the resume in a second."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    straight_log, stopped_log = run_ok(
        run_python,
        [
            ("AlphaZero", [*SMALL, "--logdir", str(straight)]),
            ("AlphaZero", [*SMALL, "--logdir", str(resumed), "--stop_after_steps", "1"]),
        ],
    )
    assert "iteration 2: against the lookahead player" in straight_log, straight_log[-2000:]
    assert "games/s" in straight_log and "done: 2 iterations" in straight_log
    assert "done: 1 iterations" in stopped_log, stopped_log[-2000:]
    assert glob.glob(str(straight / "events.out.tfevents.*"))
    assert (straight / "checkpoint.pt").is_file()
    (log,) = run_ok(run_python, [("AlphaZero", [*SMALL, "--logdir", str(resumed), "--resume"])])
    assert "resumed from" in log and "done: 2 iterations" in log, log[-2000:]
    # the seed decides everything: which actor answers first does not matter
    for key, value in weights(straight).items():
        torch.testing.assert_close(weights(resumed)[key], value, rtol=0, atol=0)


def test_search_flags_out_of_range_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """These used to start the actors anyway: a negative --dirichlet_alpha failed there with
    numpy's "alpha < 0", the others ran a meaningless search (priors below 0 with
    --noise_fraction 2) or, with --stop_after_steps -1, no iteration at all."""
    refused = {
        "--c_puct 0": "--c_puct must be above 0, got 0.0",
        "--dirichlet_alpha -1": "--dirichlet_alpha must be above 0, got -1.0",
        "--dirichlet_alpha 0": "--dirichlet_alpha must be above 0, got 0.0",
        "--noise_fraction 2": "--noise_fraction must be in [0, 1] (0: no noise), got 2.0",
        "--noise_fraction -0.5": "--noise_fraction must be in [0, 1] (0: no noise), got -0.5",
        "--temperature_moves -5": "--temperature_moves must be 0 or more, got -5",
        "--stop_after_steps -1": "--stop_after_steps must be 0 or more, got -1",
    }
    with imported_example("examples/AlphaZero") as train:
        for flags, message in refused.items():
            with pytest.raises(SystemExit) as exit_:
                train.parse_args(flags.split())
            assert exit_.value.code == 2, flags
            assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"error: {message}")
        train.parse_args(["--noise_fraction", "0", "--temperature_moves", "0"])  # accepted
