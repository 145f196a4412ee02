"""parl.algorithms.ES: centred ranks, the shared noise table, the optimizers and the update on
a quadratic objective; the observation filter merged across actors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import parl
from parl.algorithms import ES
from parl.algorithms.es import compute_centered_ranks
from parl.algorithms.es_noise import SharedNoiseTable
from parl.algorithms.es_optimizers import make_optimizer
from parl.utils.obs_filter import MeanStdFilter, RunningStat

from .nets import state_copy


class Point(parl.Model):
    """A bare parameter vector; the objective lives outside."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs @ self.w


def test_centered_ranks_by_hand() -> None:
    ranks = compute_centered_ranks(np.array([[10.0, -3.0], [7.0, 100.0]]))
    np.testing.assert_allclose(ranks, [[1 / 6, -0.5], [-1 / 6, 0.5]], rtol=1e-6)


def test_noise_table_is_deterministic_and_sliced_by_offset() -> None:
    a = SharedNoiseTable(10_000, seed=3, shared=False)
    b = SharedNoiseTable(10_000, seed=3, shared=True)
    assert parl.shm.is_shared(b.noise) and not parl.shm.is_shared(a.noise)
    np.testing.assert_array_equal(a.get(17, 5), b.get(17, 5))
    np.testing.assert_array_equal(a.get(17, 5), a.noise[17:22])
    assert abs(float(a.noise.std()) - 1.0) < 0.05
    with pytest.raises(IndexError, match="outside a table"):
        a.get(9_998, 5)


@pytest.mark.parametrize(("optimizer", "stepsize"), [("adam", 0.05), ("momentum", 0.5),
                                                     ("sgd", 0.5)])  # fmt: skip
def test_es_update_moves_towards_the_optimum_of_a_quadratic(
    optimizer: str, stepsize: float
) -> None:
    dim, target = 8, np.linspace(-1.0, 1.0, 8).astype(np.float32)
    table = SharedNoiseTable(100_000, seed=0, shared=False)
    alg = ES(Point(dim), table, noise_stdev=0.1, stepsize=stepsize, l2_coeff=0.0,
             optimizer=optimizer)  # fmt: skip
    rng = np.random.default_rng(0)

    def fitness(theta: np.ndarray) -> float:
        return -float(np.sum((theta - target) ** 2))

    start = np.linalg.norm(alg.get_flat_weights() - target)
    for _ in range(150):
        theta = alg.get_flat_weights()
        indices = np.array([table.sample_index(dim, rng) for _ in range(20)])
        rewards = np.array(
            [[fitness(theta + alg.perturbation(i)), fitness(theta - alg.perturbation(i))]
             for i in indices]
        )  # fmt: skip
        result = alg.learn(rewards, indices)
    end = np.linalg.norm(alg.get_flat_weights() - target)
    assert end < 0.2 * start, (optimizer, start, end)
    assert result.update_ratio > 0


def test_es_first_step_follows_the_mirrored_gradient_and_weight_decay() -> None:
    table = SharedNoiseTable(1_000, seed=1, shared=False)
    alg = ES(Point(3), table, stepsize=0.1, l2_coeff=0.0, optimizer="sgd")
    # one pair: +eps did better -> ranks [0.5, -0.5] -> g = eps / 2
    alg.learn(np.array([[2.0, 1.0]]), np.array([5]))
    np.testing.assert_allclose(alg.get_flat_weights(), 0.1 * table.get(5, 3) / 2, rtol=1e-6)
    decayed = ES(Point(3), table, stepsize=0.1, l2_coeff=0.5, optimizer="sgd")
    decayed.set_flat_weights(np.ones(3, np.float32))
    # two pairs on the same noise with opposite outcomes cancel: only the decay is left
    decayed.learn(np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([5, 5]))
    np.testing.assert_allclose(decayed.get_flat_weights(), np.full(3, 1 - 0.1 * 0.5), rtol=1e-6)
    with pytest.raises(ValueError, match="mirrored pairs"):
        alg.learn(np.ones((2, 3)), np.array([1, 2]))
    with pytest.raises(ValueError, match="optimizer must be one of"):
        make_optimizer("rmsprop", 3, 0.1)
    with pytest.raises(ValueError, match="raise noise_size"):
        ES(Point(50), SharedNoiseTable(10, shared=False))


def test_obs_filter_merged_across_actors_equals_one_filter_over_all_data() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(300, 4))
    learner, actors = MeanStdFilter(4), [MeanStdFilter(4), MeanStdFilter(4)]
    for i, chunk in enumerate(np.array_split(data, 7)):
        actors[i % 2](chunk)  # each actor sees part of the stream
    for actor in actors:
        learner.apply_changes(actor.flush())
    np.testing.assert_allclose(learner.state.mean, data.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(learner.state.std, data.std(axis=0, ddof=1), rtol=1e-10)
    actors[0].sync(learner.state)
    out = actors[0](data[:2], update=False)
    np.testing.assert_allclose(out, (data[:2] - data.mean(0)) / (data.std(0, ddof=1) + 1e-8),
                               rtol=1e-5)  # fmt: skip
    assert actors[0].flush().n == 0 and RunningStat.empty((4,)).n == 0


@pytest.mark.parametrize("optimizer", ["adam", "momentum", "sgd"])
def test_es_training_checkpoint_resumes_exactly(optimizer: str, tmp_path) -> None:
    """``Agent.save_checkpoint`` keeps the ES optimizer's moments and step count: a run saved
    after 3 updates and resumed in a fresh agent takes the same next steps as the original."""
    table = SharedNoiseTable(50_000, seed=4, shared=False)
    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(6, 2)), rng.integers(0, 40_000, 6)) for _ in range(6)]

    def agent() -> parl.Agent:
        torch.manual_seed(0)
        return parl.Agent(ES(nn.Linear(3, 2), table, stepsize=0.05, optimizer=optimizer))

    original = agent()
    for rewards, indices in batches[:3]:
        original.alg.learn(rewards, indices)
    original.save_checkpoint(tmp_path / "es.pt")
    for rewards, indices in batches[3:]:
        original.alg.learn(rewards, indices)

    resumed = agent()
    resumed.restore_checkpoint(tmp_path / "es.pt")
    assert resumed.alg.es_optimizer.t == 3
    for rewards, indices in batches[3:]:
        resumed.alg.learn(rewards, indices)
    np.testing.assert_array_equal(resumed.alg.get_flat_weights(), original.alg.get_flat_weights())
    other = parl.Agent(
        ES(nn.Linear(3, 2), table, optimizer="sgd" if optimizer != "sgd" else "adam")
    )
    with pytest.raises(
        ValueError, match="optimizer .es_optimizer. was [A-Za-z]+ in the run that wrote it"
    ):
        other.restore_checkpoint(tmp_path / "es.pt")


# -- batches ES refuses or leaves alone --------------------------------------------------------


def test_es_refuses_an_empty_batch_instead_of_nan_weights() -> None:
    model = nn.Linear(3, 2)
    es = ES(model, SharedNoiseTable(1000, 0, shared=False))
    before = state_copy(model)
    with pytest.raises(ValueError, match=r"N >= 1, got \(0, 2\)"):
        es.learn(np.zeros((0, 2)), np.zeros(0, np.int64))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, before[name])


def test_es_pairs_with_equal_returns_do_not_move_the_policy() -> None:
    """A solved CartPole: every episode returns 500; ties used to rank +eps below -eps."""
    model = nn.Linear(3, 2)
    es = ES(model, SharedNoiseTable(1000, 0, shared=False), l2_coeff=0.0)
    before = state_copy(model)
    result = es.learn(np.full((6, 2), 500.0), np.arange(6) * 10)
    assert result.gradient_norm == 0.0
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, before[name])
    ranks = compute_centered_ranks(np.array([[3.0, 1.0], [3.0, 2.0]]))  # the 3s share rank 2.5
    np.testing.assert_allclose(ranks, [[1 / 3, -0.5], [1 / 3, -1 / 6]], rtol=1e-6)


def test_es_refuses_non_finite_returns() -> None:
    """A NaN return sorts as the largest value: it would rank as the best episode."""
    model = torch.nn.Linear(2, 1)
    table = SharedNoiseTable(10_000, seed=1, shared=False)
    es = ES(model, table, noise_stdev=0.02, stepsize=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    rewards = np.array([[1.0, 2.0], [float("nan"), 0.0]])
    with pytest.raises(ValueError, match=r"noisy_rewards\[1, 0\] is nan"):
        es.learn(rewards, np.array([0, 5]))
    for p, b in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, b)


def test_mean_std_filter_takes_numpy_sizes_and_names_a_bad_one():
    assert MeanStdFilter(np.int64(4)).shape == (4,)
    assert MeanStdFilter((np.int64(2), 3)).shape == MeanStdFilter([2, 3]).shape == (2, 3)
    assert type(MeanStdFilter(np.int64(4)).shape[0]) is int
    with pytest.raises(ValueError, match="MeanStdFilter: shape must be an int >= 1, got 0"):
        MeanStdFilter(0)
    with pytest.raises(ValueError, match="MeanStdFilter: clip must be a float > 0"):
        MeanStdFilter(4, clip=-1.0)
