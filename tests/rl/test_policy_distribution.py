"""``parl.core.torch.policy_distribution`` against ``torch.distributions`` and by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal, kl_divergence

from parl.core.torch.policy_distribution import (
    CategoricalDistribution,
    DiagGaussianDistribution,
    DistributionInputError,
    SoftCategoricalDistribution,
    SoftMultiCategoricalDistribution,
)


def test_diag_gaussian_matches_torch_normal() -> None:
    torch.manual_seed(0)
    mean, logstd = torch.randn(5, 3), torch.randn(5, 3) * 0.3
    ours = DiagGaussianDistribution((mean, logstd))
    theirs = Normal(mean, logstd.exp())
    actions = torch.randn(5, 3)
    torch.testing.assert_close(ours.logp(actions), theirs.log_prob(actions).sum(1))
    torch.testing.assert_close(ours.entropy(), theirs.entropy().sum(1))
    other_mean, other_logstd = torch.randn(5, 3), torch.randn(5, 3) * 0.3
    other = DiagGaussianDistribution((other_mean, other_logstd))
    expected_kl = kl_divergence(theirs, Normal(other_mean, other_logstd.exp())).sum(1)
    torch.testing.assert_close(ours.kl(other), expected_kl)
    assert torch.count_nonzero(ours.kl(ours)) == 0
    torch.manual_seed(3)
    noise = torch.randn(5, 3)
    torch.manual_seed(3)
    torch.testing.assert_close(ours.sample(), mean + logstd.exp() * noise)


def test_categorical_matches_torch_categorical() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 4) * 3
    ours, theirs = CategoricalDistribution(logits), Categorical(logits=logits)
    actions = torch.tensor([0, 1, 2, 3, 0, 1])
    torch.testing.assert_close(ours.logp(actions, eps=0.0), theirs.log_prob(actions))
    # PARL's eps: log(p + 1e-6), finite for an action of probability 0
    certain = CategoricalDistribution(torch.tensor([[1e4, 0.0, 0.0]]))
    assert certain.logp(torch.tensor([1])).item() == pytest.approx(math.log(1e-6), rel=1e-6)
    torch.testing.assert_close(ours.entropy(), theirs.entropy())
    other_logits = torch.randn(6, 4)
    torch.testing.assert_close(
        ours.kl(CategoricalDistribution(other_logits)),
        kl_divergence(theirs, Categorical(logits=other_logits)),
    )
    torch.manual_seed(1)
    draws = CategoricalDistribution(torch.log(torch.tensor([[0.2, 0.8]])).repeat(20_000, 1))
    assert draws.sample().float().mean().item() == pytest.approx(0.8, abs=0.015)


def test_soft_categorical_is_a_gumbel_softmax_draw() -> None:
    logits = torch.tensor([[0.0, 2.0, -1.0]] * 4, requires_grad=True)
    torch.manual_seed(5)
    uniform = torch.rand(4, 3)
    torch.manual_seed(5)
    draw = SoftCategoricalDistribution(logits).sample()
    expected = torch.softmax(logits - torch.log(-torch.log(uniform)), dim=-1)
    torch.testing.assert_close(draw, expected)
    torch.testing.assert_close(draw.sum(-1), torch.ones(4))
    draw[:, 1].sum().backward()  # differentiable in the logits, as MADDPG needs
    assert logits.grad is not None and torch.any(logits.grad != 0)


def test_soft_multi_categorical_splits_by_bounds() -> None:
    low, high = np.array([0, 1]), np.array([1, 3])  # parts of 2 and 3 actions
    logits = torch.randn(4, 5)
    dist = SoftMultiCategoricalDistribution(logits, low, high)
    torch.manual_seed(2)
    sample = dist.sample()
    torch.manual_seed(2)
    first = SoftCategoricalDistribution(logits[:, :2]).sample()
    second = SoftCategoricalDistribution(logits[:, 2:]).sample()
    torch.testing.assert_close(sample, torch.cat([first, 1 + second], dim=-1))
    torch.testing.assert_close(
        dist.entropy(),
        Categorical(logits=logits[:, :2]).entropy() + Categorical(logits=logits[:, 2:]).entropy(),
    )
    assert torch.allclose(dist.kl(dist), torch.zeros(4), atol=1e-6)
    with pytest.raises(DistributionInputError, match=r"parts have \[2, 3\] actions.*needs 5"):
        SoftMultiCategoricalDistribution(torch.randn(4, 6), low, high)


@pytest.mark.parametrize(
    ("build", "pattern"),
    [
        (lambda: DiagGaussianDistribution(torch.zeros(2, 2)), "must be a \\(mean, logstd\\) pair"),
        (lambda: DiagGaussianDistribution((torch.zeros(2), torch.zeros(2))), "mean must be 2-D"),
        (lambda: CategoricalDistribution(torch.zeros(2, 1, 3)), r"got shape \(2, 1, 3\)"),
        (lambda: CategoricalDistribution(torch.zeros(2, 3)).logp(torch.zeros(2, 1)), "1-D integer"),
        (
            lambda: CategoricalDistribution(torch.zeros(2, 3)).logp(torch.tensor([0.7, 1.7])),
            r"action indices, got a torch.float32 tensor of shape \(2,\)",
        ),
        (lambda: CategoricalDistribution(torch.zeros(2, 3)).kl("x"), "needs a Categorical"),
    ],
)
def test_bad_input_names_what_was_wrong(build, pattern: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DistributionInputError, match=pattern):
        build()
