"""parl.algorithms.PPO: loss terms against hand-computed cases, API shapes, save/restore."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
from torch import nn

import parl
from parl.algorithms import PPO
from parl.algorithms.ppo import PPOLearnResult


class FixedDiscrete(parl.Model):
    """Logits ``[0, ln 3]`` (probabilities 0.25, 0.75) and value 0.5 for every observation."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.tensor([0.0, math.log(3.0)]))
        self.v = nn.Parameter(torch.tensor(0.5))

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(obs.shape[0], 2)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v.expand(obs.shape[0], 1)


class FixedGaussian(parl.Model):
    """Mean 0 and std 1 in two dimensions, value 0."""

    def __init__(self) -> None:
        super().__init__()
        self.mean = nn.Parameter(torch.zeros(2))
        self.log_std = nn.Parameter(torch.zeros(1, 2))
        self.v = nn.Parameter(torch.tensor(0.0))

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean.expand(obs.shape[0], 2), self.log_std.exp()

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v.expand(obs.shape[0])


def _discrete_batch() -> dict[str, torch.Tensor]:
    return {
        "batch_obs": torch.zeros(2, 3),
        "batch_action": torch.tensor([1.0, 0.0]),  # float, as PARL's storage keeps them
        "batch_value": torch.tensor([0.0, 0.5]),
        "batch_return": torch.tensor([1.5, 0.5]),
        "batch_logprob": torch.log(torch.tensor([0.5, 0.5])),
        "batch_adv": torch.tensor([1.0, -1.0]),
    }


def test_ppo_losses_match_a_hand_computed_case() -> None:
    alg = PPO(FixedDiscrete(), clip_param=0.2, norm_adv=False, device="cpu")
    result = alg.learn(**_discrete_batch())
    value_loss, action_loss, entropy = result  # PARL's three values
    # ratios 0.75/0.5 = 1.5 (adv +1) and 0.25/0.5 = 0.5 (adv -1), clipped to 1.2 and 0.8:
    # per-sample losses max(-1.5, -1.2) = -1.2 and max(0.5, 0.8) = 0.8.
    assert action_loss == pytest.approx((-1.2 + 0.8) / 2)
    assert entropy == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
    # values 0.5; old values 0.0 and 0.5 -> clipped predictions 0.2 and 0.5;
    # errors max((0.5-1.5)^2, (0.2-1.5)^2) = 1.69 and 0.
    assert value_loss == pytest.approx(0.5 * (1.69 + 0.0) / 2)
    expected_kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2
    assert result.approx_kl == pytest.approx(expected_kl, rel=1e-5)
    assert result.clip_frac == 1.0


def test_ppo_unclipped_value_loss_and_advantage_normalisation() -> None:
    alg = PPO(FixedDiscrete(), clip_param=0.2, use_clipped_value_loss=False, device="cpu")
    batch = _discrete_batch()
    batch["batch_adv"] = torch.tensor([3.0, 1.0])  # normalised: [+1/sqrt(2), -1/sqrt(2)]
    value_loss, action_loss, _ = alg.learn(**batch)
    assert value_loss == pytest.approx(0.5 * (1.0 + 0.0) / 2)
    a = 1 / math.sqrt(2) / (1 + 1e-8)
    assert action_loss == pytest.approx((max(-a * 1.5, -a * 1.2) + max(a * 0.5, a * 0.8)) / 2)


def test_ppo_refuses_a_one_row_minibatch_to_normalise_advantages_over() -> None:
    """``norm_adv`` divides by the minibatch's standard deviation, NaN for one row: the update
    would make every weight NaN without a word, so it is refused; without ``norm_adv`` it runs."""
    model = FixedDiscrete()
    alg = PPO(model, device="cpu")
    one_row = {key: value[:1] for key, value in _discrete_batch().items()}
    with pytest.raises(ValueError, match="norm_adv=True .* at least 2 rows, got 1"):
        alg.learn(**one_row)
    assert torch.isfinite(model.logits).all() and not alg.optimizer.state
    PPO(model, norm_adv=False, device="cpu").learn(**one_row)
    assert torch.isfinite(model.logits).all() and torch.isfinite(model.v).all()


def test_ppo_takes_the_zero_learning_rate_of_parls_schedule_on_the_last_update() -> None:
    """PARL's PPO agent passes ``lr_scheduler.step()`` of a ``LinearDecayScheduler`` over the
    updates, 0.0 on the last one: the update runs and leaves the weights unchanged; a negative
    rate is refused."""
    from parl.utils import LinearDecayScheduler

    model = FixedDiscrete()
    alg = PPO(model, device="cpu")
    scheduler = LinearDecayScheduler(1e-2, 2)
    alg.learn(**_discrete_batch(), lr=scheduler.step())
    before = model.logits.detach().clone()
    lr = scheduler.step()
    assert lr == 0.0
    alg.learn(**_discrete_batch(), lr=lr)
    assert alg.optimizer.param_groups[0]["lr"] == 0.0 and torch.equal(model.logits, before)
    with pytest.raises(ValueError, match="lr must be"):
        alg.learn(**_discrete_batch(), lr=-1e-3)


def test_ppo_gaussian_log_prob_and_entropy_sum_over_dimensions() -> None:
    alg = PPO(FixedGaussian(), continuous_action=True, device="cpu")
    value, action, logprob, entropy = alg.sample(torch.zeros(5, 3))
    assert action.shape == (5, 2) and value.shape == (5,) and logprob.shape == (5,)
    expected = -0.5 * (action**2).sum(-1) - math.log(2 * math.pi)
    torch.testing.assert_close(logprob, expected)
    torch.testing.assert_close(entropy, torch.full((5,), 1.0 + math.log(2 * math.pi)))
    torch.testing.assert_close(alg.predict(torch.zeros(5, 3)), torch.zeros(5, 2))


def test_ppo_discrete_api_shapes_and_lr_argument() -> None:
    alg = PPO(FixedDiscrete(), device="cpu")
    value, action, logprob, entropy = alg.sample(torch.zeros(4, 3))
    assert value.shape == (4,) and action.shape == (4,) and action.dtype == torch.int64
    torch.testing.assert_close(logprob, torch.log(torch.tensor([0.25, 0.75]))[action])
    assert alg.predict(torch.zeros(4, 3)).tolist() == [1, 1, 1, 1]
    assert alg.value(torch.zeros(4, 3)).tolist() == [0.5] * 4
    alg.learn(**_discrete_batch(), lr=1e-2)
    assert alg.optimizer.param_groups[0]["lr"] == 1e-2


def test_ppo_defaults_and_validation() -> None:
    alg = PPO(FixedDiscrete(), device="cpu")
    assert (alg.clip_param, alg.value_loss_coef, alg.entropy_coef) == (0.1, 0.5, 0.01)
    assert alg.optimizer.param_groups[0]["lr"] == 2.5e-4
    assert alg.optimizer.param_groups[0]["eps"] == 1e-5
    with pytest.raises(ValueError, match="clip_param"):
        PPO(FixedDiscrete(), clip_param=-0.1)
    with pytest.raises(TypeError, match="continuous_action"):
        PPO(FixedDiscrete(), continuous_action=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="value"):
        PPO(nn.Linear(2, 2))


def test_learn_result_unpacks_like_parl_and_pickles() -> None:
    result = PPOLearnResult(1.0, 2.0, 3.0, 0.1, 0.2)
    value_loss, action_loss, entropy = result
    assert (value_loss, action_loss, entropy) == (1.0, 2.0, 3.0)
    again = pickle.loads(pickle.dumps(result))
    assert tuple(again) == (1.0, 2.0, 3.0) and again.approx_kl == 0.1 and again.clip_frac == 0.2


def test_set_weights_shape_mismatch_is_a_runtime_error() -> None:
    model = FixedGaussian()
    weights = model.get_weights()
    weights["log_std"] = np.zeros((1, 3), np.float32)
    with pytest.raises(RuntimeError, match="log_std"):
        model.set_weights(weights)
    with pytest.raises(parl.WeightsMismatchError):
        model.set_weights(weights)
    with pytest.raises(ValueError):  # still what callers of this project catch
        model.set_weights(weights)
