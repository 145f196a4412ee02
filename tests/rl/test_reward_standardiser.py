"""``parl.utils.reward_standardiser.RewardStandardiser``: EPyMARL's reward standardisation, as
the QMIX and COMA examples use it."""

from __future__ import annotations

import numpy as np
import pytest

from parl.utils.reward_standardiser import (
    RewardStandardiser,
    load_standardiser_state,
    standardiser_state,
)


def test_statistics_are_those_of_the_real_steps_and_rewards_are_standardised_by_them() -> None:
    standardise = RewardStandardiser()
    rng = np.random.default_rng(0)
    seen = []
    for _ in range(3):
        reward = rng.normal(2.0, 3.0, size=(4, 6, 1)).astype(np.float32)
        real = np.ones((4, 6, 1), bool)
        real[:, 4:] = False  # padding: its rewards must not enter the statistics
        reward[~real] = 1000.0
        out = standardise(reward, real)
        assert out.dtype == np.float32 and out.shape == reward.shape
        seen.append(reward[real].astype(np.float64))
        everything = np.concatenate(seen)
        # gymnasium's statistics start from one pseudo-observation of mean 0 and variance 1
        assert standardise.mean == pytest.approx(everything.mean(), rel=1e-3)
        assert standardise.var == pytest.approx(everything.var(), rel=1e-3)
        expected = (reward - standardise.mean) / np.sqrt(standardise.var)
        np.testing.assert_allclose(out[real], expected[real], rtol=1e-5)
    assert standardise.count == pytest.approx(3 * 16, abs=1e-3)


def test_a_restored_standardiser_continues_as_the_one_it_was_saved_from() -> None:
    rng = np.random.default_rng(1)
    batches = [rng.normal(size=(5, 3)).astype(np.float32) for _ in range(4)]
    real = np.ones((5, 3), bool)
    straight = RewardStandardiser()
    for batch in batches[:2]:
        straight(batch, real)
    restored = RewardStandardiser()
    restored.load_state_dict(straight.state_dict())
    for batch in batches[2:]:
        np.testing.assert_array_equal(straight(batch, real), restored(batch, real))
    assert restored.state_dict() == straight.state_dict()


def test_a_batch_of_padding_only_leaves_the_statistics_as_they_were() -> None:
    standardise = RewardStandardiser()
    standardise(np.array([1.0, 3.0], np.float32), np.ones(2, bool))
    before = standardise.state_dict()
    out = standardise(np.zeros(3, np.float32), np.zeros(3, bool))
    assert standardise.state_dict() == before and np.isfinite(out).all()


def test_a_mask_of_another_shape_is_refused() -> None:
    with pytest.raises(ValueError, match=r"real has shape \(4,\), the rewards \(4, 1\)"):
        RewardStandardiser()(np.zeros((4, 1)), np.ones(4, bool))


def test_a_checkpoint_of_the_other_kind_of_run_is_refused_by_flag() -> None:
    standardise = RewardStandardiser()
    standardise(np.array([2.0, 4.0], np.float32), np.ones(2, bool))
    state = standardiser_state(standardise)
    assert standardiser_state(None) is None
    with pytest.raises(ValueError, match="ComaAgent: .*--standardise_rewards or not"):
        load_standardiser_state(None, state, "ComaAgent")
    with pytest.raises(ValueError, match="QMixAgent: .*--standardise_rewards or not"):
        load_standardiser_state(RewardStandardiser(), None, "QMixAgent")
    restored = RewardStandardiser()
    load_standardiser_state(restored, state, "ComaAgent")
    assert restored.state_dict() == standardise.state_dict()
