"""ObsNormalizer: the running statistics match numpy's over the whole stream whatever the batch
split, match gymnasium's RunningMeanStd, travel with the weights, and clip."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.wrappers.utils import RunningMeanStd
from hypothesis import given, settings
from hypothesis import strategies as st

from parl.utils import ObsNormalizer, SharedWeights
from parl.utils.weight_sync import flat_state, load_flat_state


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_running_statistics_match_gymnasiums_whatever_the_split(sizes, seed) -> None:
    rng = np.random.default_rng(seed)
    norm, reference = ObsNormalizer(3), RunningMeanStd(shape=(3,))
    for size in sizes:
        batch = rng.normal(5.0, 3.0, size=(size, 3))
        norm.update(torch.as_tensor(batch, dtype=torch.float32))
        reference.update(batch.astype(np.float32).astype(np.float64))
    np.testing.assert_allclose(norm.mean.numpy(), reference.mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(norm.var.numpy(), reference.var, rtol=1e-5, atol=1e-6)
    assert float(norm.count) == pytest.approx(reference.count)


def test_forward_normalises_and_clips() -> None:
    norm = ObsNormalizer(2, clip=5.0)
    data = torch.tensor([[0.0, 100.0], [2.0, 300.0]] * 50)
    norm.update(data)
    out = norm(torch.tensor([[1.0, 200.0], [1e6, -1e6]]))
    torch.testing.assert_close(out[0], torch.zeros(2), atol=1e-3, rtol=0)
    assert out[1].tolist() == [5.0, -5.0]
    with pytest.raises(ValueError, match="clip must be > 0"):
        ObsNormalizer(2, clip=0)


def test_statistics_travel_with_the_weights_and_the_state_dict() -> None:
    learner, actor = torch.nn.Sequential(ObsNormalizer(2)), torch.nn.Sequential(ObsNormalizer(2))
    learner[0].update(torch.tensor([[1.0, 2.0], [3.0, 6.0]]))
    load_flat_state(actor, flat_state(learner))
    torch.testing.assert_close(actor[0].mean, learner[0].mean)
    torch.testing.assert_close(actor[0].var, learner[0].var)
    shared, other = SharedWeights(learner), torch.nn.Sequential(ObsNormalizer(2))
    assert shared.pull(other)
    torch.testing.assert_close(other[0].count, learner[0].count)
    assert set(learner.state_dict()) == {"0.count", "0.mean", "0.var"}


def test_obs_normalizer_counts_past_float32_precision() -> None:
    from parl.utils import ObsNormalizer

    norm = ObsNormalizer(1)
    norm.count.fill_(2.0**25)
    norm.update(torch.zeros(1, 1))
    assert float(norm.count) == 2.0**25 + 1  # a float32 count would stay at 2**25
