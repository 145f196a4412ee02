"""parl.algorithms.A2C: PARL's constructor and summed losses against a hand-computed case."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import parl
from parl.algorithms import A2C

from .nets import DiscreteActorCritic, seeded_obs, state_copy


class FixedModel(parl.Model):
    """Logits ``[0, ln 3]`` (probabilities 0.25, 0.75) and value 0.5 for every observation."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.tensor([0.0, math.log(3.0)]))
        self.v = nn.Parameter(torch.tensor(0.5))

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(obs.shape[0], 2)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v.expand(obs.shape[0])

    def policy_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(obs), self.value(obs)


class OnlyPolicy(parl.Model):
    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return obs

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return obs


def test_a2c_losses_match_a_hand_computed_case() -> None:
    alg = A2C(FixedModel(), {"vf_loss_coeff": 0.5, "learning_rate": 1e-3}, device="cpu")
    total, pi_loss, vf_loss, entropy = alg.learn(
        torch.zeros(2, 3),
        torch.tensor([1, 0]),
        torch.tensor([1.0, -1.0]),
        torch.tensor([1.5, 0.5]),
        lr=1e-3,
        entropy_coeff=-0.01,
    )
    expected_pi = -(math.log(0.75) * 1.0 + math.log(0.25) * -1.0)  # a sum, as in PARL
    expected_vf = 0.5 * ((0.5 - 1.5) ** 2 + 0.0)
    expected_entropy = -2 * (0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert float(pi_loss) == pytest.approx(expected_pi)
    assert float(vf_loss) == pytest.approx(expected_vf)
    assert float(entropy) == pytest.approx(expected_entropy)
    assert float(total) == pytest.approx(expected_pi + 0.5 * expected_vf - 0.01 * expected_entropy)


def test_a2c_takes_a_zero_learning_rate_as_parl_does() -> None:
    """PARL's A2C sets whatever rate it is given, 0.0 included (the end of a linear decay):
    the step leaves the weights unchanged; a negative rate is refused."""
    model = FixedModel()
    alg = A2C(model, {"vf_loss_coeff": 0.5, "learning_rate": 1e-3}, device="cpu")
    batch = (torch.zeros(2, 3), torch.tensor([1, 0]), torch.tensor([1.0, -1.0]))
    alg.learn(*batch, torch.tensor([1.5, 0.5]), lr=1e-3)
    before = [p.detach().clone() for p in model.parameters()]
    alg.learn(*batch, torch.tensor([1.5, 0.5]), lr=0.0)
    assert alg.optimizer.param_groups[0]["lr"] == 0.0
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    with pytest.raises(ValueError, match="lr must be"):
        alg.learn(*batch, torch.tensor([1.5, 0.5]), lr=-1e-3)


def test_a2c_config_keys_defaults_and_api() -> None:
    alg = A2C(FixedModel(), {"vf_loss_coeff": 0.25, "start_lr": 5e-4}, device="cpu")
    assert alg.vf_loss_coeff == 0.25 and alg.optimizer.param_groups[0]["lr"] == 5e-4
    default = A2C(FixedModel(), device="cpu")
    assert (default.vf_loss_coeff, default.learning_rate, default.max_grad_norm) == (
        0.5,
        1e-3,
        40.0,
    )
    actions, values = default.sample(torch.zeros(6, 3))
    assert actions.shape == (6,) and actions.dtype == torch.int64 and values.shape == (6,)
    probs, _ = default.prob_and_value(torch.zeros(1, 3))
    torch.testing.assert_close(probs, torch.tensor([[0.25, 0.75]]))
    assert default.predict(torch.zeros(2, 3)).tolist() == [1, 1]
    with pytest.raises(TypeError, match="policy_and_value"):
        A2C(OnlyPolicy())
    with pytest.raises(ValueError, match="vf_loss_coeff"):
        A2C(FixedModel(), {"vf_loss_coeff": -1.0})


class GaussianNet(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.mean = nn.Linear(3, 2)
        self.log_std = nn.Parameter(torch.tensor([[-0.5, 0.3]]))
        self.v = nn.Linear(3, 1)

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean(obs), self.log_std.exp()

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(obs).squeeze(-1)

    def policy_and_value(self, obs: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        return self.policy(obs), self.value(obs)


def test_a2c_gaussian_losses_match_torch_distributions() -> None:
    torch.manual_seed(1)
    model = GaussianNet()
    alg = A2C(model, {"continuous_action": True, "vf_loss_coeff": 0.5}, device="cpu")
    obs, actions = torch.randn(6, 3), torch.randn(6, 2)
    advantages, targets = torch.randn(6), torch.randn(6)
    with torch.no_grad():
        mean, std = model.policy(obs)
        dist = torch.distributions.Normal(mean, std.expand_as(mean))
        expected_pi = -(dist.log_prob(actions).sum(-1) * advantages).sum()
        expected_vf = 0.5 * (model.value(obs) - targets).pow(2).sum()
        expected_entropy = dist.entropy().sum()
    total, pi, vf, entropy = alg.learn(obs, actions, advantages, targets, 1e-3, -0.01)
    assert float(pi) == pytest.approx(float(expected_pi), rel=1e-5)
    assert float(vf) == pytest.approx(float(expected_vf), rel=1e-5)
    assert float(entropy) == pytest.approx(float(expected_entropy), rel=1e-5)
    assert float(total) == pytest.approx(
        float(expected_pi + 0.5 * expected_vf - 0.01 * expected_entropy), rel=1e-5
    )
    sampled, values = alg.sample(obs)
    assert sampled.shape == (6, 2) and sampled.dtype == torch.float32 and values.shape == (6,)
    torch.testing.assert_close(alg.predict(obs), model.policy(obs)[0].detach())
    with pytest.raises(TypeError, match="no action probabilities"):
        alg.prob_and_value(obs)
    assert A2C(GaussianNet(), continuous_action=True, device="cpu").continuous_action
    with pytest.raises(TypeError, match="must return \\(mean, std\\)"):
        A2C(FixedModel(), {"continuous_action": True}, device="cpu").sample(torch.zeros(2, 4))


N = 8  # steps of a batch


def test_a2c_takes_column_advantages_per_step_not_as_a_b_by_b_matrix() -> None:
    obs, actions = seeded_obs(), torch.arange(N) % 3
    advantages, targets = torch.linspace(-1, 1, N), torch.linspace(0, 2, N)
    model = DiscreteActorCritic()
    start = state_copy(model)
    flat = A2C(model, device="cpu").learn(obs, actions, advantages, targets)
    model.load_state_dict(start)
    column = A2C(model, device="cpu").learn(obs, actions, advantages[:, None], targets[:, None])
    for a, b in zip(flat, column, strict=True):  # was (B,) * (B, 1) -> (B, B): 8x the loss
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match=r"A2C.learn: advantages has shape \(4,\).*8 steps"):
        A2C(DiscreteActorCritic(), device="cpu").learn(obs, actions, advantages[:4], targets)
