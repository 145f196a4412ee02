"""Regressions found reviewing issue 12 (IMPALA, A2C, ES): model/flag mix-ups get clear errors,
per-step columns are not broadcast into (B, B) losses, a NaN loss never reaches the weights, an
empty ES batch is refused, and ES's checkpoint keeps the observation statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import parl
from parl.algorithms import A2C, ES, IMPALA
from parl.algorithms.es import compute_centered_ranks
from parl.algorithms.es_noise import SharedNoiseTable

from .conftest import REPO_ROOT, RunPython

N, T = 8, 4  # 2 trajectories of 4 steps


class Discrete(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.pi, self.v = nn.Linear(4, 3), nn.Linear(4, 1)

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(obs).squeeze(-1)

    def policy_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(obs), self.value(obs)


class Gaussian(Discrete):
    def __init__(self, log_std: float = 0.0) -> None:
        super().__init__()
        self.log_std = nn.Parameter(torch.full((1, 3), log_std))

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        return self.pi(obs), self.log_std.exp()


def _obs() -> torch.Tensor:
    return torch.randn(N, 4, generator=torch.Generator().manual_seed(0))


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_a2c_takes_column_advantages_per_step_not_as_a_b_by_b_matrix() -> None:
    obs, actions = _obs(), torch.arange(N) % 3
    advantages, targets = torch.linspace(-1, 1, N), torch.linspace(0, 2, N)
    model = Discrete()
    start = _state(model)
    flat = A2C(model, device="cpu").learn(obs, actions, advantages, targets)
    model.load_state_dict(start)
    column = A2C(model, device="cpu").learn(obs, actions, advantages[:, None], targets[:, None])
    for a, b in zip(flat, column, strict=True):  # was (B,) * (B, 1) -> (B, B): 8x the loss
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match=r"A2C.learn: advantages has shape \(4,\).*8 steps"):
        A2C(Discrete(), device="cpu").learn(obs, actions, advantages[:4], targets)


def test_a_gaussian_model_without_continuous_action_names_the_flag() -> None:
    obs = _obs()
    impala = IMPALA(Gaussian(), T, device="cpu")
    a2c = A2C(Gaussian(), device="cpu")
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
    alg, obs = IMPALA(Discrete(), T, device="cpu"), _obs()
    for behaviour in (torch.zeros(N, 5), torch.zeros(N)):  # wider; one log-prob per step
        with pytest.raises(ValueError, match=r"behaviour_logits has shape .*logits \(8, 3\)"):
            alg.learn(obs, torch.zeros(N, dtype=torch.long), behaviour, torch.zeros(N),
                      torch.zeros(N), 1e-3, -0.01)  # fmt: skip


def test_a_nan_loss_raises_and_leaves_the_weights_alone() -> None:
    obs = _obs()
    impala = IMPALA(Gaussian(log_std=-200.0), T, continuous_action=True, device="cpu")
    actions, behaviour = impala.sample(obs)  # std 0: actions == mean, z = 0 / 0
    before = _state(impala.model)
    with pytest.raises(FloatingPointError, match="IMPALA.learn: the loss is nan.*not updated"):
        impala.learn(obs, actions, behaviour, torch.zeros(N), torch.zeros(N), 1e-3, -0.01)
    a2c = A2C(Gaussian(log_std=-200.0), continuous_action=True, device="cpu")
    a2c.model.load_state_dict(before)
    with pytest.raises(FloatingPointError, match="A2C.learn: the loss is nan"):
        a2c.learn(obs, actions, torch.ones(N), torch.ones(N))
    for model in (impala.model, a2c.model):  # before the fix: every weight NaN
        for name, value in model.state_dict().items():
            torch.testing.assert_close(value, before[name])


def test_es_refuses_an_empty_batch_instead_of_nan_weights() -> None:
    model = nn.Linear(3, 2)
    es = ES(model, SharedNoiseTable(1000, 0, shared=False))
    before = _state(model)
    with pytest.raises(ValueError, match=r"N >= 1, got \(0, 2\)"):
        es.learn(np.zeros((0, 2)), np.zeros(0, np.int64))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, before[name])


def test_es_checkpoint_keeps_the_observation_statistics(
    run_python: RunPython, tmp_path: Path
) -> None:
    """The ES policy acts on filtered observations: model.ckpt alone could not be replayed."""
    code = f"""
import sys
import numpy as np
sys.path.insert(0, {str(REPO_ROOT / "examples" / "ES")!r})
from agent import ESAgent, make_env
from es_config import mujoco_config
from parl.algorithms.es import compute_centered_ranks
from parl.algorithms.es_noise import SharedNoiseTable

config = {{**mujoco_config, "env_name": "Pendulum-v1"}}
noise = SharedNoiseTable(10_000, 0, shared=False)
env = make_env(config)
trained = ESAgent(config, env, noise)
trained.obs_filter(np.random.default_rng(0).normal(5.0, 3.0, (500, 3)))
path = trained.save({str(tmp_path / "model.ckpt")!r})
restored = ESAgent(config, env, noise)
restored.restore(path)
obs = np.array([4.0, 6.0, 1.0])
print("SAME", np.allclose(trained.obs_filter(obs, update=False),
                          restored.obs_filter(obs, update=False)), restored.obs_filter.state.n)
"""
    proc = run_python(code, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SAME True 500" in proc.stdout, proc.stdout


def test_es_pairs_with_equal_returns_do_not_move_the_policy() -> None:
    """A solved CartPole: every episode returns 500; ties used to rank +eps below -eps."""
    model = nn.Linear(3, 2)
    es = ES(model, SharedNoiseTable(1000, 0, shared=False), l2_coeff=0.0)
    before = _state(model)
    result = es.learn(np.full((6, 2), 500.0), np.arange(6) * 10)
    assert result.gradient_norm == 0.0
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, before[name])
    ranks = compute_centered_ranks(np.array([[3.0, 1.0], [3.0, 2.0]]))  # the 3s share rank 2.5
    np.testing.assert_allclose(ranks, [[1 / 3, -0.5], [1 / 3, -1 / 6]], rtol=1e-6)


def test_impala_names_a_field_with_the_wrong_number_of_steps() -> None:
    alg, obs = IMPALA(Discrete(), T, device="cpu"), _obs()
    fields = [torch.zeros(N, dtype=torch.long), torch.zeros(N, 3), torch.zeros(N), torch.zeros(N)]
    for i, name in enumerate(("actions", "behaviour_logits", "rewards", "dones")):
        short = [f[: N // 2] if j == i else f for j, f in enumerate(fields)]
        # was: RuntimeError: shape '[2, 4]' is invalid for input of size 4
        with pytest.raises(ValueError, match=rf"{name} has shape \(4.*obs has 8 steps"):
            alg.learn(obs, *short, 1e-3, -0.01)
    alg.learn(obs, fields[0], fields[1], fields[2][:, None], fields[3][:, None], 1e-3, -0.01)


class Masked(Discrete):
    """The third action is never allowed: its logit is -inf (action masking)."""

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(obs).masked_fill(torch.tensor([False, False, True]), float("-inf"))


def test_impala_learns_with_masked_actions() -> None:
    alg, obs = IMPALA(Masked(), T, device="cpu"), _obs()
    probs, logits = alg.sample(obs)
    actions = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(0)).squeeze(-1)
    loss, kl = alg.learn(obs, actions, logits, torch.ones(N), torch.zeros(N), 1e-3, -0.01)
    # was: entropy NaN (0 * -inf), and the step made every weight NaN
    p = probs[:, :2]
    per_step = -(p * p.log()).sum(-1).reshape(N // T, T)
    torch.testing.assert_close(loss.entropy, per_step[:, :-1].sum())  # last step: bootstrap only
    assert float(kl) == 0.0
    assert all(torch.isfinite(v).all() for v in alg.model.state_dict().values())


@pytest.mark.parametrize(
    ("example", "args"),
    [("IMPALA", ["--max_sample_steps", "1000"]), ("ES", ["--noise_size", "100000"])],
)
def test_zero_actors_is_refused_not_a_hang(
    run_python: RunPython, tmp_path: Path, example: str, args: list[str]
) -> None:
    """ES used to loop forever waiting for episodes; IMPALA failed inside parl.wait."""
    code = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT / "examples" / example)!r})
import train
train.main(["--env", "CartPole-v1", "--actor_num", "0", "--logdir", {str(tmp_path)!r}, *{args!r}])
"""
    proc = run_python(code, timeout=60)
    assert proc.returncode != 0
    assert f"ValueError: {example} needs --actor_num 1 or more, got 0" in proc.stderr, proc.stderr


def _run_example(run_python: RunPython, example: str, argv: list[str]) -> str:
    code = f"""
import sys, torch
sys.path.insert(0, {str(REPO_ROOT / "examples" / example)!r})
torch.set_num_threads(1)
import train
result = train.main({argv!r})
print("STEPS", result.sample_steps)
"""
    proc = run_python(code, timeout=120)
    return proc.stdout + proc.stderr


def test_a2c_example_starts_on_pong(run_python: RunPython, tmp_path: Path) -> None:
    """README: ``examples/A2C/train.py --env PongNoFrameskip-v4``; it failed at once with
    NameNotFound: the Atari ids were registered only when the wrappers were first imported."""
    out = _run_example(
        run_python,
        "A2C",
        ["--env", "PongNoFrameskip-v4", "--actor_num", "1", "--env_num", "1",
         "--max_sample_steps", "20", "--test_every_steps", "1000000", "--no_progress",
         "--logdir", str(tmp_path)],
    )  # fmt: skip
    assert "STEPS 20" in out, out[-3000:]


@pytest.mark.parametrize("example", ["IMPALA", "A2C"])
def test_an_env_of_no_supported_kind_is_named(
    run_python: RunPython, tmp_path: Path, example: str
) -> None:
    """Pendulum-v1 went to the Atari wrappers: AttributeError 'get_action_meanings'."""
    argv = ["--env", "Pendulum-v1", "--max_sample_steps", "100", "--logdir", str(tmp_path)]
    out = _run_example(run_python, example, argv)
    assert f"ValueError: {example}'s example runs CartPole, MuJoCo" in out, out[-3000:]
    assert "Pendulum-v1 (gymnasium.envs.classic_control" in out


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


def test_obs_normalizer_counts_past_float32_precision() -> None:
    from parl.utils import ObsNormalizer

    norm = ObsNormalizer(1)
    norm.count.fill_(2.0**25)
    norm.update(torch.zeros(1, 1))
    assert float(norm.count) == 2.0**25 + 1  # a float32 count would stay at 2**25


def test_es_with_no_minimum_batch_is_refused(run_python: RunPython, tmp_path: Path) -> None:
    """Both minimums at 0 made an update with no episodes: numpy's "need at least one array"."""
    code = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT / "examples" / "ES")!r})
import train
train.main(["--env", "CartPole-v1", "--min_episodes_per_batch", "0", "--min_steps_per_batch",
            "0", "--noise_size", "100000", "--logdir", {str(tmp_path)!r}])
"""
    proc = run_python(code, timeout=60)
    assert proc.returncode != 0
    assert "ValueError: ES needs --min_episodes_per_batch or --min_steps_per_batch" in proc.stderr
