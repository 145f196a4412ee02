"""V-trace against numbers computed by hand and a plain-Python reference; IMPALA's loss terms;
clear errors for inputs of the wrong shape or a model that does not fit the flags, a NaN loss
that never reaches the weights (IMPALA and A2C), and masked actions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import parl
from parl.algorithms import A2C, IMPALA
from parl.algorithms.vtrace import from_importance_weights, from_log_probs
from parl.utils.returns import calc_gae

from .nets import DiscreteActorCritic, GaussianActorCritic, seeded_obs, state_copy


def _hand_case(**clips: float | None) -> tuple[list[float], list[float]]:
    """T=2, B=1: rhos [2, 0.5], gamma 0.9, rewards [1, 2], V [0.5, 1.0], V(x_T) 3."""
    out = from_importance_weights(
        torch.log(torch.tensor([[2.0], [0.5]])),
        torch.full((2, 1), 0.9),
        torch.tensor([[1.0], [2.0]]),
        torch.tensor([[0.5], [1.0]]),
        torch.tensor([3.0]),
        **clips,
    )
    return out.vs.reshape(-1).tolist(), out.pg_advantages.reshape(-1).tolist()


def test_vtrace_matches_hand_computed_values_with_clipping() -> None:
    # clipped rhos [1, 0.5], cs [1, 0.5]; delta_1 = 0.5 * (2 + 0.9 * 3 - 1) = 1.85,
    # delta_0 = 1 * (1 + 0.9 * 1 - 0.5) = 1.4; vs_1 = 1 + 1.85, vs_0 = 0.5 + 1.4 + 0.9 * 1.85
    vs, adv = _hand_case(clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)
    assert vs == pytest.approx([3.565, 2.85])
    # pg: min(2, 1) * (1 + 0.9 * 2.85 - 0.5), min(0.5, 1) * (2 + 0.9 * 3 - 1)
    assert adv == pytest.approx([3.065, 1.85])


def test_vtrace_without_clipping_uses_the_raw_ratios() -> None:
    # rho_0 = 2 unclipped: delta_0 = 2.8, vs_0 = 0.5 + 2.8 + 0.9 * 1 * 1.85 (c_0 stays min(1, 2))
    vs, adv = _hand_case(clip_rho_threshold=None, clip_pg_rho_threshold=None)
    assert vs == pytest.approx([4.965, 2.85])
    assert adv == pytest.approx([2.0 * (1 + 0.9 * 2.85 - 0.5), 1.85])
    # a tighter pg clip scales only the advantage
    vs_tight, adv_tight = _hand_case(clip_rho_threshold=1.0, clip_pg_rho_threshold=0.25)
    assert vs_tight == pytest.approx([3.565, 2.85])
    assert adv_tight == pytest.approx([0.25 * 3.065, 0.25 * 3.7])


def _reference_vs(log_rhos, discounts, rewards, values, bootstrap, clip_rho, clip_pg):
    """Equation (1) of the paper, summed term by term in plain Python (no recursion)."""
    steps, batch = len(rewards), len(rewards[0])
    vs = [[0.0] * batch for _ in range(steps)]
    adv = [[0.0] * batch for _ in range(steps)]
    for b in range(batch):
        vals = [values[t][b] for t in range(steps)] + [bootstrap[b]]
        rhos = [math.exp(log_rhos[t][b]) for t in range(steps)]
        for s in range(steps):
            total = vals[s]
            for t in range(s, steps):
                weight = 1.0
                for i in range(s, t):
                    weight *= discounts[i][b] * min(1.0, rhos[i])
                rho_t = min(clip_rho, rhos[t])
                delta = rho_t * (rewards[t][b] + discounts[t][b] * vals[t + 1] - vals[t])
                total += weight * delta
            vs[s][b] = total
        for s in range(steps):
            nxt = vs[s + 1][b] if s + 1 < steps else bootstrap[b]
            pg_rho = min(clip_pg, rhos[s])
            adv[s][b] = pg_rho * (rewards[s][b] + discounts[s][b] * nxt - vals[s])
    return vs, adv


@pytest.mark.parametrize("seed", range(5))
def test_vtrace_matches_a_plain_python_reference_on_random_inputs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    steps, batch = int(rng.integers(1, 9)), int(rng.integers(1, 5))
    log_rhos = rng.normal(0.0, 1.0, (steps, batch))
    discounts = 0.95 * (rng.random((steps, batch)) > 0.2)  # some episode ends
    rewards, values = rng.normal(size=(steps, batch)), rng.normal(size=(steps, batch))
    bootstrap = rng.normal(size=batch)
    clip_rho, clip_pg = float(rng.uniform(0.5, 2.0)), float(rng.uniform(0.5, 2.0))
    out = from_importance_weights(
        *(torch.tensor(x, dtype=torch.float64) for x in (log_rhos, discounts, rewards, values)),
        torch.tensor(bootstrap, dtype=torch.float64),
        clip_rho,
        clip_pg,
    )
    ref_vs, ref_adv = _reference_vs(
        log_rhos.tolist(),
        discounts.tolist(),
        rewards.tolist(),
        values.tolist(),
        bootstrap.tolist(),
        clip_rho,
        clip_pg,
    )
    np.testing.assert_allclose(out.vs.numpy(), ref_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), ref_adv, rtol=1e-10, atol=1e-10)


def test_on_policy_vtrace_reduces_to_n_step_returns() -> None:
    rng = np.random.default_rng(7)
    steps, batch, gamma = 6, 3, 0.9
    rewards, values = rng.normal(size=(steps, batch)), rng.normal(size=(steps, batch))
    dones = rng.random((steps, batch)) < 0.25
    bootstrap = rng.normal(size=batch)
    out = from_log_probs(
        torch.zeros(steps, batch, dtype=torch.float64),  # same policy: rho = 1 everywhere
        torch.zeros(steps, batch, dtype=torch.float64),
        torch.tensor(gamma * ~dones, dtype=torch.float64),
        torch.tensor(rewards),
        torch.tensor(values),
        torch.tensor(bootstrap),
    )
    # GAE with lambda = 1 is the bootstrapped n-step advantage (an independent implementation)
    advantages = calc_gae(rewards, values, bootstrap, gamma, 1.0, dones)
    np.testing.assert_allclose(out.vs.numpy(), advantages + values, rtol=1e-6)
    np.testing.assert_allclose(out.pg_advantages.numpy(), advantages, rtol=1e-6, atol=1e-9)


def test_vtrace_names_a_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="bootstrap_value"):
        from_importance_weights(*(torch.zeros(3, 2) for _ in range(4)), torch.zeros(3))
    with pytest.raises(ValueError, match="rewards has shape"):
        from_importance_weights(
            torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(2, 3), torch.zeros(3, 2),
            torch.zeros(2),
        )  # fmt: skip


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


def test_impala_loss_terms_on_policy_match_a_hand_computed_case() -> None:
    alg = IMPALA(FixedModel(), sample_batch_steps=3, gamma=0.5, vf_loss_coeff=0.5, device="cpu")
    # two trajectories of 3 steps, trajectory-major; the third step of each only bootstraps
    actions = torch.tensor([1, 0, 1, 1, 1, 0])
    rewards = torch.tensor([1.0, 2.0, 9.0, 0.0, 1.0, 9.0])
    dones = torch.tensor([False, False, False, True, False, False])
    behaviour = torch.tensor([0.0, math.log(3.0)]).expand(6, 2)  # on-policy
    loss, kl = alg.learn(torch.zeros(6, 1), actions, behaviour, rewards, dones, 1e-3, -0.01)
    # trajectory 0: vs_1 = 2 + 0.5 * 0.5 = 2.25, vs_0 = 1 + 0.5 * 2.25 = 2.125
    # trajectory 1: done after step 0 -> vs_0 = 0, vs_1 = 1 + 0.5 * 0.5 = 1.25
    vs = [2.125, 2.25, 0.0, 1.25]
    assert loss.vtrace_returns.vs.T.reshape(-1).tolist() == pytest.approx(vs)
    expected_vf = 0.5 * sum((0.5 - v) ** 2 for v in vs)
    log_p = {0: math.log(0.25), 1: math.log(0.75)}
    advantages = [(1 + 0.5 * 2.25) - 0.5, (2 + 0.5 * 0.5) - 0.5, 0.0 - 0.5, (1 + 0.25) - 0.5]
    expected_pi = -sum(log_p[a] * g for a, g in zip([1, 0, 1, 1], advantages, strict=True))
    expected_entropy = -4 * (0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert float(loss.vf_loss) == pytest.approx(expected_vf)
    assert float(loss.pi_loss) == pytest.approx(expected_pi)
    assert float(loss.entropy) == pytest.approx(expected_entropy)
    assert float(loss.total_loss) == pytest.approx(
        expected_pi + 0.5 * expected_vf - 0.01 * expected_entropy
    )
    assert float(kl) == pytest.approx(0.0, abs=1e-7)
    assert alg.optimizer.param_groups[0]["lr"] == 1e-3


def test_impala_off_policy_kl_defaults_and_errors() -> None:
    alg = IMPALA(FixedModel(), device="cpu")
    assert (alg.sample_batch_steps, alg.gamma, alg.vf_loss_coeff) == (50, 0.99, 0.5)
    assert (alg.clip_rho_threshold, alg.clip_pg_rho_threshold) == (1.0, 1.0)
    alg = IMPALA(FixedModel(), 2, 0.9, 0.5, 1.0, 1.0, device="cpu")
    behaviour = torch.zeros(4, 2)  # uniform behaviour policy
    _, kl = alg.learn(
        torch.zeros(4, 1), torch.tensor([0, 1, 1, 0]), behaviour, torch.ones(4), torch.zeros(4),
        5e-4, -0.01,
    )  # fmt: skip
    expected_kl = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert float(kl) == pytest.approx(expected_kl, rel=1e-3)  # the weights moved by one step
    assert alg.optimizer.param_groups[0]["lr"] == 5e-4
    probs, logits = alg.sample(torch.zeros(3, 1))
    assert probs.shape == logits.shape == (3, 2)
    with pytest.raises(ValueError, match="multiple of sample_batch_steps=2"):
        alg.learn(torch.zeros(3, 1), *(torch.zeros(3) for _ in range(1)), torch.zeros(3, 2),
                  torch.zeros(3), torch.zeros(3), 1e-3, -0.01)  # fmt: skip
    with pytest.raises(ValueError, match="gamma"):
        IMPALA(FixedModel(), gamma=-0.5)
    with pytest.raises(TypeError, match="value"):
        IMPALA(nn.Linear(2, 2))


class GaussianModel(parl.Model):
    """A linear Gaussian policy with a state-independent std, and a linear value."""

    def __init__(self, obs_dim: int = 3, act_dim: int = 2) -> None:
        super().__init__()
        self.mean = nn.Linear(obs_dim, act_dim)
        self.log_std = nn.Parameter(torch.tensor([[-0.3, 0.2]]))
        self.v = nn.Linear(obs_dim, 1)

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean(obs), self.log_std.exp()

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(obs).squeeze(-1)


def test_impala_gaussian_loss_terms_match_torch_distributions() -> None:
    """Continuous actions: log-probabilities, entropy and KL from ``torch.distributions``, V-trace
    from the reference function; the learner's terms must agree."""
    torch.manual_seed(3)
    model = GaussianModel()
    alg = IMPALA(model, sample_batch_steps=4, gamma=0.9, continuous_action=True, device="cpu")
    n, steps = 8, 4
    obs, rewards = torch.randn(n, 3), torch.randn(n)
    dones = torch.tensor([0, 0, 1, 0, 0, 0, 0, 0], dtype=torch.float32)
    b_mean, b_log_std = torch.randn(n, 2) * 0.3, torch.full((n, 2), -0.1)
    actions = b_mean + b_log_std.exp() * torch.randn(n, 2)
    with torch.no_grad():
        mean, std = model.policy(obs)
        target = torch.distributions.Normal(mean, std.expand_as(mean))
        behaviour = torch.distributions.Normal(b_mean, b_log_std.exp())
        target_lp, behaviour_lp = (
            target.log_prob(actions).sum(-1),
            behaviour.log_prob(actions).sum(-1),
        )
        expected_kl = torch.distributions.kl_divergence(target, behaviour).sum(-1).mean()
        expected_entropy = target.entropy().sum(-1).reshape(2, steps)[:, :-1].sum()
        values = model.value(obs)

        def tm(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(2, steps).T

        returns = from_importance_weights(
            tm(target_lp - behaviour_lp)[:-1], (1 - tm(dones)[:-1]) * 0.9, tm(rewards)[:-1],
            tm(values)[:-1], tm(values)[-1],
        )  # fmt: skip
        expected_pi = -(tm(target_lp)[:-1] * returns.pg_advantages).sum()
        expected_vf = 0.5 * (tm(values)[:-1] - returns.vs).pow(2).sum()
    loss, kl = alg.learn(
        obs, actions, torch.cat([b_mean, b_log_std], -1), rewards, dones, 1e-3, -0.01
    )
    assert float(kl) == pytest.approx(float(expected_kl), rel=1e-5)
    assert float(loss.entropy) == pytest.approx(float(expected_entropy), rel=1e-5)
    assert float(loss.pi_loss) == pytest.approx(float(expected_pi), rel=1e-5)
    assert float(loss.vf_loss) == pytest.approx(float(expected_vf), rel=1e-5)


def test_impala_gaussian_sample_predict_and_errors() -> None:
    torch.manual_seed(0)
    model = GaussianModel()
    alg = IMPALA(model, sample_batch_steps=2, continuous_action=True, device="cpu")
    obs = torch.randn(5, 3)
    actions, params = alg.sample(obs)
    mean, std = model.policy(obs)
    assert actions.shape == (5, 2) and params.shape == (5, 4)
    torch.testing.assert_close(params[:, :2], mean.detach())
    torch.testing.assert_close(params[:, 2:], std.log().expand(5, 2).detach())
    torch.testing.assert_close(alg.predict(obs), mean.detach())
    # a sample is a draw around the mean, not the mean itself
    assert not torch.allclose(actions, mean.detach())
    with pytest.raises(ValueError, match="2 \\* 2: concat\\(mean, log_std\\)"):
        alg.learn(torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2),
                  torch.zeros(2), 1e-3, 0.0)  # fmt: skip
    discrete_model = IMPALA(FixedModel(), continuous_action=True, device="cpu")
    with pytest.raises(TypeError, match="must return \\(mean, std\\)"):
        discrete_model.sample(torch.zeros(2, 1))


# -- IMPALA (and A2C) checks of their inputs and losses ----------------------------------------


N, T = 8, 4  # 2 trajectories of 4 steps


def test_a_gaussian_model_without_continuous_action_names_the_flag() -> None:
    obs = seeded_obs()
    impala = IMPALA(GaussianActorCritic(), T, device="cpu")
    a2c = A2C(GaussianActorCritic(), device="cpu")
    calls = [
        lambda: impala.sample(obs),
        lambda: impala.predict(obs),
        lambda: impala.learn(
            obs,
            torch.zeros(N, dtype=torch.long),
            torch.zeros(N, 3),
            torch.zeros(N),
            torch.zeros(N),
            1e-3,
            -0.01,
        ),  # fmt: skip
        lambda: a2c.sample(obs),
        lambda: a2c.predict(obs),
        lambda: a2c.learn(obs, torch.zeros(N, dtype=torch.long), torch.zeros(N), torch.zeros(N)),
    ]
    for call in calls:  # was AttributeError: 'tuple' object has no attribute 'log_softmax'
        with pytest.raises(TypeError, match=r"returned a tuple, not logits.*continuous_action"):
            call()


def test_impala_rejects_behaviour_logits_of_another_width() -> None:
    alg, obs = IMPALA(DiscreteActorCritic(), T, device="cpu"), seeded_obs()
    for behaviour in (torch.zeros(N, 5), torch.zeros(N)):  # wider; one log-prob per step
        with pytest.raises(ValueError, match=r"behaviour_logits has shape .*logits \(8, 3\)"):
            alg.learn(obs, torch.zeros(N, dtype=torch.long), behaviour, torch.zeros(N),
                      torch.zeros(N), 1e-3, -0.01)  # fmt: skip


def test_a_nan_loss_raises_and_leaves_the_weights_alone() -> None:
    obs = seeded_obs()
    impala = IMPALA(GaussianActorCritic(log_std=-200.0), T, continuous_action=True, device="cpu")
    actions, behaviour = impala.sample(obs)  # std 0: actions == mean, z = 0 / 0
    before = state_copy(impala.model)
    with pytest.raises(FloatingPointError, match="IMPALA.learn: the loss is nan.*not updated"):
        impala.learn(obs, actions, behaviour, torch.zeros(N), torch.zeros(N), 1e-3, -0.01)
    a2c = A2C(GaussianActorCritic(log_std=-200.0), continuous_action=True, device="cpu")
    a2c.model.load_state_dict(before)
    with pytest.raises(FloatingPointError, match="A2C.learn: the loss is nan"):
        a2c.learn(obs, actions, torch.ones(N), torch.ones(N))
    for model in (impala.model, a2c.model):  # before the fix: every weight NaN
        for name, value in model.state_dict().items():
            torch.testing.assert_close(value, before[name])


def test_impala_names_a_field_with_the_wrong_number_of_steps() -> None:
    alg, obs = IMPALA(DiscreteActorCritic(), T, device="cpu"), seeded_obs()
    fields = [torch.zeros(N, dtype=torch.long), torch.zeros(N, 3), torch.zeros(N), torch.zeros(N)]
    for i, name in enumerate(("actions", "behaviour_logits", "rewards", "dones")):
        short = [f[: N // 2] if j == i else f for j, f in enumerate(fields)]
        # was: RuntimeError: shape '[2, 4]' is invalid for input of size 4
        with pytest.raises(ValueError, match=rf"{name} has shape \(4.*obs has 8 steps"):
            alg.learn(obs, *short, 1e-3, -0.01)
    alg.learn(obs, fields[0], fields[1], fields[2][:, None], fields[3][:, None], 1e-3, -0.01)


class Masked(DiscreteActorCritic):
    """The third action is never allowed: its logit is -inf (action masking)."""

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(obs).masked_fill(torch.tensor([False, False, True]), float("-inf"))


def test_impala_learns_with_masked_actions() -> None:
    alg, obs = IMPALA(Masked(), T, device="cpu"), seeded_obs()
    probs, logits = alg.sample(obs)
    actions = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(0)).squeeze(-1)
    loss, kl = alg.learn(obs, actions, logits, torch.ones(N), torch.zeros(N), 1e-3, -0.01)
    # was: entropy NaN (0 * -inf), and the step made every weight NaN
    p = probs[:, :2]
    per_step = -(p * p.log()).sum(-1).reshape(N // T, T)
    torch.testing.assert_close(loss.entropy, per_step[:, :-1].sum())  # last step: bootstrap only
    assert float(kl) == 0.0
    assert all(torch.isfinite(v).all() for v in alg.model.state_dict().values())
