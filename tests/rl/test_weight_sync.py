"""SharedWeights: a learner's weights reach a local actor through shared memory, versioned;
flat parameter vectors; TimeBreakdown's arithmetic."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

import parl
from parl.utils import SharedWeights, TimeBreakdown
from parl.utils.weight_sync import (
    flat_parameters,
    flat_state,
    load_flat_parameters,
    load_flat_state,
    parameter_count,
    state_size,
)


@parl.remote_class
class Holder:
    """An actor with its own copy of the network, synced from the shared buffer."""

    def __init__(self, weights: SharedWeights) -> None:
        torch.manual_seed(123)
        self.net = nn.Linear(3, 2)
        self.weights = weights

    def pull(self) -> tuple[bool, np.ndarray]:
        loaded = self.weights.pull(self.net)
        return loaded, flat_parameters(self.net)


def test_flat_parameters_round_trip_and_mismatch() -> None:
    torch.manual_seed(0)
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    load_flat_parameters(b, flat_parameters(a))
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb)
    with pytest.raises(ValueError, match="has 8 parameters"):
        load_flat_parameters(a, np.zeros(5, np.float32))


def test_loading_a_read_only_vector_copies_it_without_a_warning() -> None:
    """Ray hands actors read-only arrays: loading one neither warns nor leaves the model
    aliasing it (a later write into the vector's memory must not change the model)."""
    torch.manual_seed(0)
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    flat = flat_parameters(a)
    flat.flags.writeable = False
    params_before = [p for p in b.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_flat_parameters(b, flat)
    assert [p for p in b.parameters()] == params_before  # the same Parameter objects
    flat.flags.writeable = True
    flat[:] = 7.0
    assert not any(torch.any(p == 7.0) for p in b.parameters())
    np.testing.assert_array_equal(flat_parameters(b), flat_parameters(a))


def test_shared_weights_reach_an_actor_by_handle_once_per_version() -> None:
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    weights = SharedWeights(net)
    assert parl.shm.is_shared(weights._flat) and weights.version == 1
    with Holder(weights) as holder:
        loaded, flat = holder.pull()
        assert loaded and np.array_equal(flat, flat_parameters(net))
        assert holder.pull()[0] is False  # nothing new published
        with torch.no_grad():
            net.weight.add_(1.0)
        weights.publish(net)
        loaded, flat = holder.pull()
        assert loaded and np.array_equal(flat, flat_parameters(net)) and weights.version == 2


def test_time_breakdown_shares_and_report() -> None:
    times = TimeBreakdown()
    times.add("sampling", 3.0)
    times.merge({"learning": 1.0, "sampling": 1.0})
    assert times.seconds == {"sampling": 4.0, "learning": 1.0}
    assert times.share("sampling") == pytest.approx(0.8)
    assert times.share("learning", total=10.0) == pytest.approx(0.1)
    assert times.report(10.0).startswith("time (of 10.00 s): sampling 4.00 s (40.0%)")
    with times.section("waiting"):
        pass
    assert times.seconds["waiting"] >= 0.0


def test_flat_state_carries_floating_buffers_and_skips_integer_ones() -> None:
    """An actor normalises as the learner does: BatchNorm's running statistics (floating
    buffers) travel with the weights; its integer ``num_batches_tracked`` does not."""
    torch.manual_seed(0)
    a, b = (
        nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)),
        nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)),
    )
    a.train()
    a(torch.randn(16, 3) * 5 + 2)  # moves a's running mean and variance
    flat = flat_state(a)
    assert flat.size == state_size(a) == parameter_count(a) + 8
    load_flat_state(b, flat)
    torch.testing.assert_close(b[1].running_mean, a[1].running_mean)
    torch.testing.assert_close(b[1].running_var, a[1].running_var)
    assert int(b[1].num_batches_tracked) == 0
    with pytest.raises(ValueError, match="has 32 state values"):
        load_flat_state(b, flat_parameters(a))


def test_shared_weights_publish_buffers() -> None:
    torch.manual_seed(0)
    learner, actor = nn.BatchNorm1d(2), nn.BatchNorm1d(2)
    weights = SharedWeights(learner)
    learner(torch.tensor([[1.0, 10.0], [3.0, 30.0]]))
    weights.publish(learner)
    assert weights.pull(actor)
    torch.testing.assert_close(actor.running_mean, learner.running_mean)
    assert float(actor.running_mean[1]) != 0.0
