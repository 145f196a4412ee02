"""The fast paths of PPO against their references: closed-form log-probabilities, entropies and
samples against ``torch.distributions``; one pass for policy and value against two calls; the
multi-tensor gradient clip against ``clip_grad_norm_``; the PPO example's stacked MLP against two
``nn.Sequential`` MLPs; ``BatchVectorEnv`` against gymnasium's ``SyncVectorEnv``."""

from __future__ import annotations

import copy
import importlib.util
import math
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn
from torch.distributions import Categorical, Independent, Normal

import parl
from parl.algorithms import PPO
from parl.algorithms.action_dists import (
    categorical_log_prob_entropy,
    categorical_sample,
    gaussian_entropy,
    gaussian_log_prob,
    gaussian_sample,
)
from parl.env import BatchVectorEnv

from .conftest import REPO_ROOT


def _example_model_module() -> Any:
    """examples/PPO/model.py under a name of its own (the examples' module names collide)."""
    spec = importlib.util.spec_from_file_location(
        "ppo_example_model", REPO_ROOT / "examples" / "PPO" / "model.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _example_agent_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    """examples/PPO/agent.py likewise, with its ``storage`` import served from the example."""
    modules = {}
    for name in ("storage", "numpy_update", "agent"):
        spec = importlib.util.spec_from_file_location(
            f"ppo_example_{name}", REPO_ROOT / "examples" / "PPO" / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        modules[name] = importlib.util.module_from_spec(spec)
        if name in ("storage", "numpy_update"):
            monkeypatch.setitem(sys.modules, name, modules[name])
        spec.loader.exec_module(modules[name])
    return modules["agent"]


# -- closed forms -------------------------------------------------------------------------------
def test_categorical_closed_forms_match_torch_distributions() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 5, generator=gen) * 3
    action = torch.randint(0, 5, (64,), generator=gen)
    log_prob, entropy = categorical_log_prob_entropy(logits, action)
    dist = Categorical(logits=logits)
    torch.testing.assert_close(log_prob, dist.log_prob(action))
    torch.testing.assert_close(entropy, dist.entropy())
    leaf = logits.clone().requires_grad_()
    log_prob, entropy = categorical_log_prob_entropy(leaf, action)
    assert log_prob.requires_grad and entropy.requires_grad
    log_prob, reported = categorical_log_prob_entropy(leaf, action, entropy_grad=False)
    assert log_prob.requires_grad and not reported.requires_grad
    assert torch.equal(reported, entropy.detach())
    # a masked action (logit -inf) adds nothing to the entropy, and gives no NaN
    masked = logits.clone()
    masked[:, 0] = -math.inf
    _, entropy = categorical_log_prob_entropy(masked, action.clamp(min=1))
    assert torch.isfinite(entropy).all()
    torch.testing.assert_close(entropy, Categorical(logits=masked).entropy())


@pytest.mark.parametrize("std_shape", [(1, 3), (32, 3), (32, 1), (3,)])
def test_gaussian_closed_forms_match_torch_distributions(std_shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(1)
    mean = torch.randn(32, 3, generator=gen)
    std = torch.rand(std_shape, generator=gen) + 0.1
    action = mean + torch.randn(32, 3, generator=gen) * 2
    reference = Independent(Normal(mean, std.expand_as(mean)), 1)
    log_std = std.log()
    torch.testing.assert_close(gaussian_log_prob(mean, std, action), reference.log_prob(action))
    torch.testing.assert_close(
        gaussian_log_prob(mean, std, action, log_std), reference.log_prob(action)
    )
    entropy = gaussian_entropy(mean, log_std)
    assert entropy.shape == (32,)
    torch.testing.assert_close(entropy, reference.entropy())


def test_samples_are_the_draws_of_torch_distributions() -> None:
    logits = torch.randn(200, 4)
    mean, std = torch.randn(50, 2), torch.rand(1, 2) + 0.5
    torch.manual_seed(7)
    fast = categorical_sample(logits), gaussian_sample(mean, std)
    torch.manual_seed(7)
    reference = Categorical(logits=logits).sample(), Normal(mean, std.expand_as(mean)).sample()
    assert fast[0].dtype == torch.int64 and torch.equal(fast[0], reference[0])
    assert torch.equal(fast[1], reference[1])


# -- PPO ------------------------------------------------------------------------------------------
class TwoHeads(parl.Model):
    """A shared trunk with ``policy``, ``value`` and, unless ``one_pass=False``,
    ``policy_and_value``; ``passes`` counts trunk evaluations."""

    def __init__(self, continuous: bool) -> None:
        super().__init__()
        self.continuous = continuous
        self.trunk = nn.Sequential(nn.Linear(3, 16), nn.Tanh())
        self.pi = nn.Linear(16, 2)
        self.v = nn.Linear(16, 1)
        self.log_std = nn.Parameter(torch.full((1, 2), -0.5))
        self.passes = 0

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        self.passes += 1
        return self.trunk(obs)

    def _policy(self, features: torch.Tensor) -> Any:
        out = self.pi(features)
        return (out, self.log_std.exp()) if self.continuous else out

    def policy(self, obs: torch.Tensor) -> Any:
        return self._policy(self._features(obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(self._features(obs))

    def policy_and_value(self, obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        features = self._features(obs)
        return self._policy(features), self.v(features)


class TwoCalls(parl.Model):
    """The same network seen through ``policy`` and ``value`` only (no ``policy_and_value``)."""

    def __init__(self, inner: TwoHeads) -> None:
        super().__init__()
        self.inner = inner

    def policy(self, obs: torch.Tensor) -> Any:
        return self.inner.policy(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.inner.value(obs)


def _batch(continuous: bool) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    action = (
        torch.randn(16, 2, generator=gen)
        if continuous
        else torch.randint(0, 2, (16,), generator=gen).float()
    )
    return {
        "batch_obs": torch.randn(16, 3, generator=gen),
        "batch_action": action,
        "batch_value": torch.randn(16, generator=gen),
        "batch_return": torch.randn(16, generator=gen),
        "batch_logprob": torch.randn(16, generator=gen) - 1.0,
        "batch_adv": torch.randn(16, generator=gen),
    }


@pytest.mark.parametrize("continuous", [False, True])
def test_one_pass_for_policy_and_value_gives_the_two_calls_results(continuous: bool) -> None:
    torch.manual_seed(0)
    one = TwoHeads(continuous)
    two = TwoCalls(copy.deepcopy(one))
    alg_one = PPO(one, continuous_action=continuous, entropy_coef=0.01, device="cpu")
    alg_two = PPO(two, continuous_action=continuous, entropy_coef=0.01, device="cpu")
    batch = _batch(continuous)
    for _ in range(3):
        before = one.passes
        result_one = alg_one.learn(**batch)
        assert one.passes == before + 1  # the trunk ran once for both heads
        result_two = alg_two.learn(**batch)
        np.testing.assert_allclose(
            [*result_one, result_one.approx_kl, result_one.clip_frac],
            [*result_two, result_two.approx_kl, result_two.clip_frac],
            rtol=1e-5,
            atol=1e-7,
        )
    for p_one, p_two in zip(one.parameters(), two.inner.parameters(), strict=True):
        torch.testing.assert_close(p_one, p_two)


@pytest.mark.parametrize("continuous", [False, True])
def test_ppo_sample_is_the_reference_draw(continuous: bool) -> None:
    """``PPO.sample`` (closed forms) draws the action ``torch.distributions`` would draw at the
    same seed, with its log-probability and entropy."""
    torch.manual_seed(0)
    model = TwoHeads(continuous)
    alg = PPO(model, continuous_action=continuous, device="cpu")
    obs = torch.randn(256, 3)
    torch.manual_seed(11)
    value, action, log_prob, entropy = alg.sample(obs)
    with torch.no_grad():
        out = model.policy(obs)
        dist = (
            Independent(Normal(out[0], out[1].expand_as(out[0])), 1)
            if continuous
            else Categorical(logits=out)
        )
        torch.manual_seed(11)
        expected = dist.sample()
        torch.testing.assert_close(value, model.value(obs).squeeze(-1))
    assert torch.equal(action, expected)
    torch.testing.assert_close(log_prob, dist.log_prob(expected))
    torch.testing.assert_close(entropy, dist.entropy())


def test_gradient_clip_matches_clip_grad_norm() -> None:
    torch.manual_seed(0)
    model = TwoHeads(continuous=True)
    alg = PPO(model, continuous_action=True, max_grad_norm=0.05, device="cpu")
    mean, std = model.policy(torch.randn(8, 3))
    (mean.pow(2).sum() * 10 + std.sum() + model.value(torch.randn(8, 3)).sum()).backward()
    reference = [p.grad.clone() for p in model.parameters()]
    total = torch.linalg.vector_norm(torch.cat([g.flatten() for g in reference]))
    assert total > 0.05  # so the clip below does something
    clipped = [g * (0.05 / (total + 1e-6)) for g in reference]
    twin = copy.deepcopy(model)
    for param, other in zip(model.parameters(), twin.parameters(), strict=True):
        other.grad = param.grad.clone()
    alg._clip_grad_norm()
    nn.utils.clip_grad_norm_(twin.parameters(), 0.05)
    for param, expected, other in zip(model.parameters(), clipped, twin.parameters(), strict=True):
        torch.testing.assert_close(param.grad, expected)
        torch.testing.assert_close(param.grad, other.grad)


# -- the example's stacked MLP ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("continuous", "hidden", "activation"), [(False, (64, 64), "tanh"), (True, (32, 16, 8), "relu")]
)
def test_stacked_mlp_is_two_separate_mlps(
    continuous: bool, hidden: tuple[int, ...], activation: str
) -> None:
    """Same initial weights as two ``nn.Sequential`` MLPs built with the same random draws, and
    the same outputs."""
    module = _example_model_module()
    torch.manual_seed(5)
    model = module.MLPModel(4, 3, continuous, hidden, activation, -1.0)
    torch.manual_seed(5)
    sizes = [4, *hidden]
    actor = module._mlp(sizes, 3, 0.01, activation)
    critic = module._mlp(sizes, 1, 1.0, activation)
    obs = torch.randn(10, 4)
    policy, value = model.policy_and_value(obs)
    torch.testing.assert_close(value, critic(obs))
    torch.testing.assert_close(model.value(obs), critic(obs))
    if continuous:
        torch.testing.assert_close(policy[0], actor(obs))
        torch.testing.assert_close(policy[1], torch.full((1, 3), math.exp(-1.0)))
    else:
        torch.testing.assert_close(policy, actor(obs))
        torch.testing.assert_close(model.policy(obs), actor(obs))
    with pytest.raises(ValueError, match="hidden"):
        module.MLPModel(4, 3, hidden_sizes=())


def test_stacked_mlp_without_ortho_init_keeps_pytorchs_initialisation() -> None:
    """``ortho_init=False`` (rl-zoo's MuJoCo setting): the weights and biases of plain
    ``nn.Linear`` layers drawn in the same order, not orthogonal ones with zero biases."""
    module = _example_model_module()
    torch.manual_seed(7)
    model = module.MLPModel(5, 2, True, (16, 16), "relu", -2.0, ortho_init=False)
    torch.manual_seed(7)
    actor = [nn.Linear(5, 16), nn.Linear(16, 16), nn.Linear(16, 2)]
    critic = [nn.Linear(5, 16), nn.Linear(16, 16), nn.Linear(16, 1)]
    for k in range(2):
        torch.testing.assert_close(model.weights[k][0], actor[k].weight.T)
        torch.testing.assert_close(model.weights[k][1], critic[k].weight.T)
        torch.testing.assert_close(model.biases[k][0, 0], actor[k].bias)
    torch.testing.assert_close(model.pi.weight, actor[2].weight)
    torch.testing.assert_close(model.v.bias, critic[2].bias)
    assert model.biases[0].abs().sum() > 0  # orthogonal initialisation zeroes them
    ortho = module.MLPModel(5, 2, True, (16, 16), "relu", -2.0)
    assert ortho.biases[0].abs().sum() == 0 and ortho.pi.weight.abs().max() < 0.02


@pytest.mark.parametrize(
    ("continuous", "hidden", "activation"), [(False, (64, 64), "tanh"), (True, (32, 16, 8), "relu")]
)
def test_the_example_agent_samples_in_numpy_from_the_policy(
    monkeypatch: pytest.MonkeyPatch, continuous: bool, hidden: tuple[int, ...], activation: str
) -> None:
    """The example agent's numpy sampling step: the network's outputs are torch's; the returned
    log-probabilities and entropies are those of ``torch.distributions`` for the returned
    actions; many draws follow the distribution; optimizer steps and ``load_state_dict`` show
    at once (the numpy arrays are views), and so does moving to another dtype; the same seed
    gives the same draws."""
    model_module, agent_module = _example_model_module(), _example_agent_module(monkeypatch)
    config = {"num_updates": 1, "initial_lr": 1e-3, "clip_param": 0.2, "seed": 4}

    def build(seed: int) -> tuple[Any, Any]:
        torch.manual_seed(seed)
        model = model_module.MLPModel(5, 3, continuous, hidden, activation, -0.5)
        alg = PPO(model, continuous_action=continuous)
        return model, agent_module.PPOAgent(alg, config, (5,))

    def torch_dist(model: Any, obs: np.ndarray) -> tuple[Any, torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            policy, value = model.policy_and_value(torch.from_numpy(obs))
        if continuous:
            return Independent(Normal(policy[0], policy[1]), 1), policy[0], value.reshape(-1)
        return Categorical(logits=policy), policy, value.reshape(-1)

    def assert_same_pass(model: Any, obs: np.ndarray) -> None:
        out, value = model.numpy_policy_and_value(obs)
        _, t_out, t_value = torch_dist(model, obs)
        np.testing.assert_allclose(out, t_out.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value, t_value.numpy(), rtol=1e-5, atol=1e-6)

    model, agent = build(1)
    assert agent._numpy_sampling
    obs = np.random.default_rng(0).standard_normal((7, 5)).astype(np.float32)
    assert_same_pass(model, obs)
    value, action, logprob, entropy = agent.sample(obs)
    dist, _, t_value = torch_dist(model, obs)
    np.testing.assert_allclose(value, t_value.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        logprob, dist.log_prob(torch.from_numpy(action)), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(entropy, dist.entropy(), rtol=1e-5, atol=1e-5)
    assert action.dtype == (np.float32 if continuous else np.int64)

    many = np.repeat(obs[:1], 40_000, axis=0)
    actions = agent.sample(many)[1]
    dist, t_out, _ = torch_dist(model, obs[:1])
    if continuous:
        z = (actions - t_out.numpy()) / np.exp(-0.5)
        np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=0.03)
        np.testing.assert_allclose(z.std(axis=0), 1.0, atol=0.03)
    else:
        freq = np.bincount(actions, minlength=3) / len(actions)
        np.testing.assert_allclose(freq, dist.probs[0].numpy(), atol=0.015)

    obs_t = torch.from_numpy(obs)
    act_t = torch.from_numpy(action) if continuous else torch.from_numpy(action).float()
    batch = [torch.from_numpy(x) for x in (value, value + 1.0, logprob, np.ones(7, np.float32))]
    agent.alg.learn(obs_t, act_t, batch[0], batch[1], batch[2], batch[3])  # in-place Adam step
    assert_same_pass(model, obs)
    other, _ = build(2)
    model.load_state_dict(other.state_dict())
    np.testing.assert_array_equal(
        model.numpy_policy_and_value(obs)[0], other.numpy_policy_and_value(obs)[0]
    )
    assert_same_pass(model, obs)
    first, second = build(1)[1], build(1)[1]
    np.testing.assert_array_equal(first.sample(obs)[1], second.sample(obs)[1])
    model.double()  # new storage: the views are made again
    out, value = model.numpy_policy_and_value(obs.astype(np.float64))
    with torch.no_grad():
        policy, t_value = model.policy_and_value(torch.from_numpy(obs).double())
    t_out = policy[0] if continuous else policy
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, t_out.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(value, t_value.numpy().reshape(-1), rtol=1e-10, atol=1e-12)


# -- BatchVectorEnv -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "mode", [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.NEXT_STEP]
)
@pytest.mark.parametrize("vectorize", [True, False])
def test_batch_vector_env_steps_like_sync_vector_env(
    mode: gym.vector.AutoresetMode, vectorize: bool
) -> None:
    """Same observations, rewards, ends, final observations and episode statistics as
    ``SyncVectorEnv`` over ``RecordEpisodeStatistics(CartPole)`` for the same seed and actions
    (short episodes: random actions, and ``max_episode_steps=30`` for truncations)."""

    def make() -> gym.Env:
        return gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1", max_episode_steps=30))

    reference = gym.vector.SyncVectorEnv([make] * 6, autoreset_mode=mode)
    ours = BatchVectorEnv("CartPole-v1", 6, mode, vectorize=vectorize, max_episode_steps=30)
    obs_ref, _ = reference.reset(seed=21)
    obs, _ = ours.reset(seed=21)
    np.testing.assert_array_equal(obs, obs_ref)
    rng = np.random.default_rng(0)
    episodes = truncations = 0
    for _ in range(300):
        actions = rng.integers(0, 2, 6)
        expected, got = reference.step(actions), ours.step(actions)
        for want, have in zip(expected[:4], got[:4], strict=True):
            np.testing.assert_array_equal(have, want)
        truncations += int(got[3].sum())
        info_ref, info = expected[4], got[4]
        if mode is gym.vector.AutoresetMode.SAME_STEP:
            assert ("final_obs" in info) == ("final_obs" in info_ref)
            if "final_obs" not in info:
                continue
            mask = info_ref["_final_obs"]
            np.testing.assert_array_equal(info["_final_obs"], mask)
            for k in np.flatnonzero(mask):
                np.testing.assert_array_equal(info["final_obs"][k], info_ref["final_obs"][k])
            info_ref, info = info_ref["final_info"], info["final_info"]
        assert ("episode" in info) == ("episode" in info_ref)
        if "episode" in info:
            mask = info_ref["_episode"]
            np.testing.assert_array_equal(info["_episode"], mask)
            for key in ("r", "l"):
                np.testing.assert_array_equal(
                    info["episode"][key][mask], info_ref["episode"][key][mask]
                )
            episodes += int(mask.sum())
    assert episodes > 20 and truncations > 0
    reference.close()
    ours.close()


def test_batch_vector_env_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_envs"):
        BatchVectorEnv("CartPole-v1", 0)
    with pytest.raises(TypeError, match="env_id"):
        BatchVectorEnv(gym.make, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="auto-reset"):
        BatchVectorEnv("CartPole-v1", 2, gym.vector.AutoresetMode.DISABLED)
    env = BatchVectorEnv("CartPole-v1", 2)
    with pytest.raises(ValueError, match="seeds"):
        env.reset(seed=[1, 2, 3])


@pytest.mark.parametrize("continuous", [False, True])
def test_direct_adam_step_is_torch_adam_step(continuous: bool) -> None:
    """PPO's direct fused-Adam call updates the weights and Adam's state exactly as
    ``optimizer.step()`` does, and a restored optimizer state is used (not a stale copy)."""
    torch.manual_seed(0)
    model = TwoHeads(continuous)
    twin = copy.deepcopy(model)
    fast = PPO(model, continuous_action=continuous, device="cpu")
    reference = PPO(twin, continuous_action=continuous, device="cpu")
    reference._adam_step = reference.optimizer.step  # type: ignore[method-assign]
    batch = _batch(continuous)
    for i in range(4):
        fast.learn(**batch, lr=1e-3 * (i + 1))
        reference.learn(**batch, lr=1e-3 * (i + 1))
    for p_fast, p_ref in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p_fast, p_ref)
    state_fast, state_ref = fast.optimizer.state_dict(), reference.optimizer.state_dict()
    for key, value in state_ref["state"].items():
        assert int(state_fast["state"][key]["step"]) == int(value["step"]) == 4
        assert torch.equal(state_fast["state"][key]["exp_avg_sq"], value["exp_avg_sq"])
    # fresh state tensors (copies: load_state_dict may keep the tensors it is given)
    fast.optimizer.load_state_dict(copy.deepcopy(state_ref))
    reference.optimizer.load_state_dict(copy.deepcopy(state_ref))
    fast.learn(**batch)
    reference.learn(**batch)
    for p_fast, p_ref in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p_fast, p_ref)


def test_a_torch_whose_private_adam_kernel_changed_falls_back_to_step(monkeypatch) -> None:
    """The direct call uses a private torch kernel; if a torch version takes other arguments,
    PPO counts the step back and uses ``optimizer.step()`` from then on, with the same
    weights and state as the reference."""

    def changed(*args: object, **kwargs: object) -> None:
        raise TypeError("_fused_adam_() got an unexpected keyword argument 'beta1'")

    import parl.algorithms.ppo as ppo_module

    monkeypatch.setattr(ppo_module, "_FUSED_ADAM", changed)
    monkeypatch.setattr(PPO, "_direct_adam", True)
    torch.manual_seed(0)
    model = TwoHeads(True)
    twin = copy.deepcopy(model)
    fast = PPO(model, continuous_action=True, device="cpu")
    reference = PPO(twin, continuous_action=True, device="cpu")
    reference._adam_step = reference.optimizer.step  # type: ignore[method-assign]
    batch = _batch(True)
    for _ in range(3):
        fast.learn(**batch)
        reference.learn(**batch)
    assert PPO._direct_adam is False
    for p_fast, p_ref in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p_fast, p_ref)
    for state in fast.optimizer.state_dict()["state"].values():
        assert int(state["step"]) == 3


def test_single_sample_running_statistics_are_gymnasiums() -> None:
    from gymnasium.wrappers.utils import RunningMeanStd

    from parl.env.mujoco_wrappers import SampleRunningMeanStd

    rng = np.random.default_rng(0)
    for shape, dtype in (((5,), np.float32), ((), np.float64)):
        reference, ours = (
            RunningMeanStd(shape=shape, dtype=dtype),
            SampleRunningMeanStd(shape=shape, dtype=dtype),
        )
        for i in range(200):
            x = (rng.normal(size=(1, *shape)) * (i + 1)).astype(dtype)
            reference.update(x)
            ours.update(x)
        batch = rng.normal(size=(7, *shape)).astype(dtype)  # a batch takes gymnasium's path
        reference.update(batch)
        ours.update(batch)
        assert np.array_equal(ours.mean, reference.mean) and np.array_equal(ours.var, reference.var)
        assert ours.count == reference.count and np.asarray(ours.mean).dtype == dtype


def test_batch_vector_env_from_env_fns_steps_like_sync_vector_env() -> None:
    """The PPO example's normalised MuJoCo env (``wrap_rms``) in ``BatchVectorEnv.from_env_fns``
    and in ``SyncVectorEnv``: the same observations, rewards, final observations, raw episode
    returns and running statistics (``call`` reaches the envs' methods)."""
    from parl.env.mujoco_wrappers import wrap_rms

    def make() -> gym.Env:
        env = gym.make("HalfCheetah-v5", max_episode_steps=40)
        return wrap_rms(gym.wrappers.ClipAction(env), 0.98, compat=False)

    mode = gym.vector.AutoresetMode.SAME_STEP
    reference = gym.vector.SyncVectorEnv([make] * 2, autoreset_mode=mode)
    ours = BatchVectorEnv.from_env_fns([make] * 2, mode)
    np.testing.assert_array_equal(ours.reset(seed=4)[0], reference.reset(seed=4)[0])
    rng = np.random.default_rng(1)
    episodes = 0
    for _ in range(100):
        actions = rng.uniform(-1.5, 1.5, (2, 6)).astype(np.float32)
        expected, got = reference.step(actions), ours.step(actions)
        for want, have in zip(expected[:4], got[:4], strict=True):
            np.testing.assert_array_equal(have, want)
        if "final_obs" in expected[4]:
            mask = expected[4]["_final_obs"]
            np.testing.assert_array_equal(got[4]["_final_obs"], mask)
            for k in np.flatnonzero(mask):
                np.testing.assert_array_equal(got[4]["final_obs"][k], expected[4]["final_obs"][k])
            returns, ref_returns = (
                got[4]["final_info"]["episode"]["r"],
                expected[4]["final_info"]["episode"]["r"],
            )
            np.testing.assert_array_equal(returns[mask], ref_returns[mask])
            episodes += int(mask.sum())
    assert episodes == 4
    state, ref_state = ours.call("get_rms_state")[1], reference.call("get_rms_state")[1]
    for key in ("ob_rms", "ret_rms"):
        np.testing.assert_array_equal(state[key]["mean"], ref_state[key]["mean"])
        np.testing.assert_array_equal(state[key]["var"], ref_state[key]["var"])
    reference.close()
    ours.close()


def test_clipped_surrogate_has_torch_mins_loss_and_gradient() -> None:
    """Against ``-min(A r, A clip(r)).mean()`` on ratios inside the clip range (ties), above and
    below it, exactly on its bounds, with positive, negative and zero advantages."""
    from parl.algorithms.ppo import clipped_surrogate_loss

    gen = torch.Generator().manual_seed(2)
    ratio = torch.cat(
        [torch.rand(200, generator=gen) * 2.0, torch.tensor([0.8, 1.2, 1.0, 0.5, 1.5])]
    )
    adv = torch.cat([torch.randn(200, generator=gen), torch.tensor([1.0, -1.0, 0.0, 0.0, -2.0])])
    r_fast, r_ref = ratio.clone().requires_grad_(), ratio.clone().requires_grad_()
    fast = clipped_surrogate_loss(r_fast, adv, 0.2)
    reference = -torch.min(adv * r_ref, adv * r_ref.clamp(0.8, 1.2)).mean()
    fast.backward()
    reference.backward()
    assert torch.equal(fast, reference)
    assert torch.equal(r_fast.grad, r_ref.grad)
    assert (r_ref.grad == 0).any() and (r_ref.grad != 0).any()  # both cases occur


def test_batch_vector_env_set_attr_takes_one_value_or_one_per_env() -> None:
    envs = BatchVectorEnv.from_env_fns([lambda: gym.make("CartPole-v1")] * 3)
    try:
        envs.set_attr("custom", [1, 2, 3])
        assert envs.get_attr("custom") == (1, 2, 3)
        envs.set_attr("custom", 7)
        assert envs.get_attr("custom") == (7, 7, 7)
        with pytest.raises(ValueError, match="set_attr needs 3 values, got 2"):
            envs.set_attr("custom", [1, 2])
    finally:
        envs.close()


# -- the example's numpy update -------------------------------------------------------------------
NUMPY_UPDATE_CASES = [
    # continuous, hidden, activation, entropy_coef, clipped value loss, norm_adv, max_grad_norm
    (False, (64, 64), "tanh", 0.0, False, True, 0.5),  # CartPole's benchmark setting
    (False, (32, 16, 8), "relu", 0.01, True, False, 1e9),  # no gradient clip
    (False, (16,), "tanh", 0.02, True, True, 0.05),  # one hidden layer, a hard clip
    (True, (64, 64), "tanh", 0.01, True, True, 0.5),  # PARL's MuJoCo setting, with entropy
    (True, (32, 32), "relu", 0.0004, False, True, 0.8),  # rl-zoo's HalfCheetah setting
]


def _numpy_update_batch(
    rng: np.random.Generator, model: Any, continuous: bool, first: bool, size: int = 96
) -> list[np.ndarray]:
    """A minibatch whose old values are the model's own on the ``first`` step (a tie in the
    clipped value loss, as in PPO's first epoch) and near them after (on both sides of the
    value clip), and whose old log-probabilities are near the policy's (ratios on both sides
    of the ratio clip)."""
    obs = rng.standard_normal((size, 5)).astype(np.float32)
    out, value = model.numpy_policy_and_value(obs)
    if continuous:
        action = (out + rng.standard_normal(out.shape)).astype(np.float32)
        logprob = -(0.5 * np.square(action - out) + 0.5 * np.log(2 * np.pi)).sum(-1)
    else:
        action = rng.integers(0, out.shape[1], size)
        shifted = out - out.max(-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        logprob = logp[np.arange(size), action]
    logprob = (logprob + rng.normal(0.0, 0.3, size)).astype(np.float32)
    ret = (value + rng.standard_normal(size)).astype(np.float32)
    adv = (3.0 * rng.standard_normal(size)).astype(np.float32)
    old_value = value if first else value + rng.normal(0.0, 0.3, size).astype(np.float32)
    return [obs, action, old_value.copy(), ret, logprob, adv]


@pytest.mark.parametrize(
    ("continuous", "hidden", "activation", "ent", "clip_value", "norm_adv", "max_norm"),
    NUMPY_UPDATE_CASES,
)
def test_numpy_update_is_ppo_learn(
    monkeypatch: pytest.MonkeyPatch,
    continuous: bool,
    hidden: tuple[int, ...],
    activation: str,
    ent: float,
    clip_value: bool,
    norm_adv: bool,
    max_norm: float,
) -> None:
    """The example's numpy update against ``PPO.learn_tensor`` on a twin model, five steps:
    the same statistics, the same gradients (clipped or not), the same weights and Adam state
    after each step; torch steps in between (they replace ``.grad``) change nothing."""
    model_module, _ = _example_model_module(), _example_agent_module(monkeypatch)
    numpy_update = sys.modules["numpy_update"]
    torch.manual_seed(0)
    model = model_module.MLPModel(5, 3, continuous, hidden, activation, -0.5)
    twin = copy.deepcopy(model)
    kwargs = {
        "continuous_action": continuous,
        "entropy_coef": ent,
        "use_clipped_value_loss": clip_value,
        "norm_adv": norm_adv,
        "max_grad_norm": max_norm,
        "device": "cpu",
    }
    fast, reference = PPO(model, **kwargs), PPO(twin, **kwargs)
    update = numpy_update.NumpyPPOUpdate(fast)
    rng = np.random.default_rng(1)
    clipped_steps = 0
    for step in range(5):
        batch = _numpy_update_batch(rng, model, continuous, first=step == 0)
        tensors = [torch.from_numpy(x) for x in batch]
        lr = 1e-3 * (step + 1)
        if step == 2:  # the torch path on the numpy side too
            got = fast.learn_tensor(*tensors, lr=lr).numpy()
        else:
            got = update.learn(*batch, lr=lr)
        # the reference's gradient before its clip: was the clip exercised?
        reference.optimizer_step = lambda lr, ref=reference: None  # type: ignore[method-assign]
        want = reference.learn_tensor(*tensors, lr=lr).numpy()
        raw = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in twin.parameters()]))
        clipped_steps += int(raw > max_norm)
        if step != 2:
            for p, q in zip(model._flat_params, twin._flat_params, strict=True):
                np.testing.assert_allclose(
                    p.grad.numpy(),  # after the numpy update's clip
                    q.grad.numpy() * min(1.0, max_norm / (float(raw) + 1e-6)),
                    rtol=1e-4,
                    atol=1e-7,
                )
        del reference.optimizer_step
        reference.optimizer_step(lr)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), atol=2e-6)
    if max_norm > 1e8 or max_norm < 0.1:  # the clip never or always at work
        assert clipped_steps == (0 if max_norm > 1e8 else 5)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        state, ref_state = fast.optimizer.state[p], reference.optimizer.state[q]
        assert int(state["step"]) == int(ref_state["step"]) == 5
        np.testing.assert_allclose(state["exp_avg"], ref_state["exp_avg"], rtol=1e-4, atol=1e-8)


def _sampled_rollout(
    storage: Any, agent: Any, continuous: bool, rng: np.random.Generator, steps: int, envs: int
) -> Any:
    """A ``RolloutStorage`` of ``steps`` x ``envs`` random 5-dim observations with the agent's
    sampled actions, random rewards and episode ends, and its GAE returns."""
    rollout = storage.RolloutStorage(steps, envs, (5,), (3,) if continuous else ())
    for _ in range(steps):
        obs = rng.standard_normal((envs, 5)).astype(np.float32)
        value, action, logprob, _ = agent.sample(obs)
        done = rng.random(envs) < 0.1
        rollout.append(obs, action, logprob, rng.standard_normal(envs), done, value)
    rollout.compute_returns(rng.standard_normal(envs).astype(np.float32), 0.99, 0.95)
    return rollout


@pytest.mark.parametrize("continuous", [False, True])
def test_the_example_agent_learns_through_numpy_as_through_torch(
    monkeypatch: pytest.MonkeyPatch, continuous: bool
) -> None:
    """``PPOAgent.learn`` on an ``MLPModel`` takes the numpy update, and ends where the torch
    path ends on the same rollout: same minibatches, statistics, weights, learning rates. A
    model the numpy update cannot take (a frozen layer) goes through torch."""
    model_module, agent_module = _example_model_module(), _example_agent_module(monkeypatch)
    storage, numpy_update = sys.modules["storage"], sys.modules["numpy_update"]
    config = {
        "num_updates": 3,
        "initial_lr": 1e-3,
        "lr_decay": True,
        "clip_param": 0.2,
        "clip_decay": True,
        "update_epochs": 3,
        "num_minibatches": 2,
        "seed": 0,
    }
    torch.manual_seed(0)
    model = model_module.MLPModel(5, 3, continuous, (32, 32), "tanh", -0.5)
    twin = copy.deepcopy(model)
    agents = [
        agent_module.PPOAgent(PPO(m, continuous_action=continuous, device="cpu"), config, (5,))
        for m in (model, twin)
    ]
    torch_alg = agents[1].alg
    supports = numpy_update.NumpyPPOUpdate.supports
    monkeypatch.setattr(
        numpy_update.NumpyPPOUpdate,
        "supports",
        staticmethod(lambda alg: alg is not torch_alg and supports(alg)),
    )
    rollout = _sampled_rollout(storage, agents[0], continuous, np.random.default_rng(2), 16, 4)
    for _ in range(2):
        results = []
        for agent in agents:
            torch.manual_seed(5)  # the same minibatch order
            results.append(agent.learn(rollout))
        np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)
    assert agents[0]._numpy_update is not None and agents[1]._numpy_update is None
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), atol=2e-6)
    assert agents[0].alg.clip_param == agents[1].alg.clip_param < 0.2
    monkeypatch.setattr(numpy_update.NumpyPPOUpdate, "supports", staticmethod(supports))
    twin.pi.weight.requires_grad_(False)
    frozen = PPO(twin, continuous_action=continuous, device="cpu")
    assert not supports(frozen)
    agent = agent_module.PPOAgent(frozen, config, (5,))
    before = [p.detach().clone() for p in twin.parameters()]
    agent.learn(rollout)
    assert agent._numpy_update is None
    changed = {
        name: not torch.equal(p, b)
        for (name, p), b in zip(twin.named_parameters(), before, strict=True)
    }
    assert changed.pop("pi.weight") is False and all(changed.values())


def test_numpy_update_and_optimizer_step_refuse_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    model_module, _ = _example_model_module(), _example_agent_module(monkeypatch)
    numpy_update = sys.modules["numpy_update"]
    alg = PPO(TwoHeads(False), device="cpu")
    with pytest.raises(ValueError, match="MLPModel"):
        numpy_update.NumpyPPOUpdate(alg)
    mlp = model_module.MLPModel(3, 2)
    mlp.pi.weight.requires_grad_(False)  # a frozen parameter: PPO does not train it
    with pytest.raises(ValueError, match="all of whose parameters"):
        numpy_update.NumpyPPOUpdate(PPO(mlp, device="cpu"))
    with pytest.raises(ValueError, match="lr"):
        alg.optimizer_step(lr=-1e-3)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        numpy_update.set_blas_threads(0)


@pytest.mark.parametrize("continuous", [False, True])
def test_numpy_update_leaves_a_parameter_frozen_after_ppo_was_built_as_torch_does(
    monkeypatch: pytest.MonkeyPatch, continuous: bool
) -> None:
    """``requires_grad_(False)`` after ``PPO`` was built: autograd gives the parameter no
    gradient, so ``PPO.learn`` leaves it alone; the agent then takes the torch path instead of
    the numpy update, which would have trained it."""
    model_module, agent_module = _example_model_module(), _example_agent_module(monkeypatch)
    storage, numpy_update = sys.modules["storage"], sys.modules["numpy_update"]
    config = {
        "num_updates": 2,
        "initial_lr": 1e-3,
        "lr_decay": False,
        "clip_param": 0.2,
        "update_epochs": 2,
        "num_minibatches": 2,
        "seed": 0,
    }
    torch.manual_seed(0)
    model = model_module.MLPModel(5, 3, continuous, (16, 16))
    agent = agent_module.PPOAgent(PPO(model, continuous_action=continuous), config, (5,))
    assert numpy_update.NumpyPPOUpdate.supports(agent.alg)
    model.pi.weight.requires_grad_(False)
    assert not numpy_update.NumpyPPOUpdate.supports(agent.alg)
    rollout = _sampled_rollout(storage, agent, continuous, np.random.default_rng(0), 8, 2)
    frozen, trained = model.pi.weight.detach().clone(), model.v.weight.detach().clone()
    agent.learn(rollout)
    assert torch.equal(model.pi.weight, frozen) and not torch.equal(model.v.weight, trained)


@pytest.mark.parametrize("continuous", [False, True])
def test_numpy_update_refuses_a_one_row_minibatch_with_norm_adv(
    monkeypatch: pytest.MonkeyPatch, continuous: bool
) -> None:
    """As ``PPO.learn``: one row has no standard deviation to normalise the advantages by (NaN
    weights otherwise); without ``norm_adv`` a one-row minibatch is fine."""
    model_module, _ = _example_model_module(), _example_agent_module(monkeypatch)
    numpy_update = sys.modules["numpy_update"]
    torch.manual_seed(0)
    model = model_module.MLPModel(5, 3, continuous, (16,))
    batch = _numpy_update_batch(np.random.default_rng(0), model, continuous, True, size=1)
    update = numpy_update.NumpyPPOUpdate(PPO(model, continuous_action=continuous))
    with pytest.raises(ValueError, match="norm_adv=True .* at least 2 rows, got 1"):
        update.learn(*batch)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    update = numpy_update.NumpyPPOUpdate(PPO(model, continuous_action=continuous, norm_adv=False))
    assert np.isfinite(update.learn(*batch)).all()
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_set_blas_threads_sets_numpys_openblas_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in this process: the thread count OpenBLAS reports follows, and is put back."""
    import ctypes

    _example_agent_module(monkeypatch)
    numpy_update = sys.modules["numpy_update"]
    with open("/proc/self/maps") as maps:
        paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower()})
    assert paths, "numpy is expected to ship OpenBLAS (the pip wheels do)"
    library = ctypes.CDLL(paths[0])
    getter = next(
        getattr(library, name)
        for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads")
        if hasattr(library, name)
    )
    before = getter()
    try:
        assert numpy_update.set_blas_threads(1) is True
        assert getter() == 1
        assert numpy_update.set_blas_threads(2) is True
        assert getter() == 2
    finally:
        numpy_update.set_blas_threads(before)
    # no /proc (not Linux), or only a replaced or unloadable OpenBLAS: False, no error
    import io

    def no_proc(path: str) -> Any:
        raise FileNotFoundError(path)

    monkeypatch.setattr(numpy_update, "open", no_proc, raising=False)
    assert numpy_update.set_blas_threads(1) is False
    maps = (
        "7f00-7f01 r-xp 00000000 08:01 12 /gone/libopenblas.so (deleted)\n"
        "7f01-7f02 r-xp 00000000 08:01 13 /nowhere/libscipy_openblas64_.so\n"
    )
    monkeypatch.setattr(numpy_update, "open", lambda path: io.StringIO(maps), raising=False)
    assert numpy_update.set_blas_threads(1) is False
    assert getter() == before
