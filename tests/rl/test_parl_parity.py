"""Parity with PARL's own published torch algorithms.

PARL 2.2.1's wheel is downloaded from PyPI when the tests run (never stored in this repository)
and its ``parl/algorithms/torch/<algo>.py`` files are loaded *against this package*: their
``import parl`` and ``from parl.utils.utils import check_model_method`` resolve here. Each PARL algorithm and
ours then start from the same weights, learn from the same batches with torch's generator
reseeded before every call on both sides (TD3's target noise, SAC's samples), and must end with
the same parameters, the same losses and the same ``predict``/``sample`` outputs.

Where this package deliberately differs from PARL, the difference is named below with its
reason: ``SHAPE_DEVIATIONS`` (PPO's outputs without PARL's trailing axis of size 1) and the last
two tests (PPO's ``lr=0``, A2C with a ``(B, 1)`` value column).

Without network access the tests skip, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.util
import os
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from filelock import FileLock
from torch import nn

import parl
from parl import algorithms

PARL_VERSION = "2.2.1"
WHEEL_NAME = f"parl-{PARL_VERSION}-py3-none-any.whl"
# PyPI's sha256 of that wheel: the tests compare against this exact published artifact
WHEEL_SHA256 = "2b2ca55d5440f94b64093647a7608df021a5ab0730e9aa0c80a6f96ad16690de"
DOWNLOAD_TIMEOUT_S = 180

ATOL = 1e-6  # float32: the two sides differ only in the order of floating-point operations
# losses: A2C's sums over the batch reach tens, where one float32 step is already 4e-6
LOSS_RTOL = 1e-6
UPDATES = 5
BATCH = 32
OBS_DIM, ACT_DIM = 4, 3

# (case, method, index of the output) -> why PARL's output has a trailing axis of size 1
# that ours does not; the values are compared with that axis removed.
SHAPE_DEVIATIONS: dict[tuple[str, str, int], str] = {
    ("PPO-discrete", "predict", 0): "greedy actions are (B,) here, as A2C's and as the actions "
    "sample returns; PARL's PPO keeps argmax's axis, (B, 1)",
    **{
        (case, "sample", 0): "values are (B,) here, like the log-probabilities and entropies "
        "returned with them; PARL returns the model's (B, 1) column"
        for case in ("PPO-discrete", "PPO-continuous")
    },
    **{
        (case, "value", 0): "values are (B,) here; PARL returns the model's (B, 1) column"
        for case in ("PPO-discrete", "PPO-continuous")
    },
}


# -- the published wheel ------------------------------------------------------------------------
def _unavailable(message: str) -> None:
    """Skip, or fail under ``CI=true``: CI must exercise the real comparison."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: the PARL parity tests may not be skipped)", False)
    pytest.skip(message)


def _download(folder: Path) -> str | None:
    """``pip download`` PARL's wheel into ``folder``; returns an error message or ``None``."""
    command = [
        sys.executable, "-m", "pip", "download", f"parl=={PARL_VERSION}", "--no-deps",
        "--only-binary=:all:", "--disable-pip-version-check", "-q", "-d", str(folder),
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not download parl=={PARL_VERSION} from PyPI: {exc}"
    if done.returncode != 0 or not (folder / WHEEL_NAME).is_file():
        tail = (done.stderr or done.stdout).strip()[-800:]
        return f"could not download parl=={PARL_VERSION} from PyPI ({' '.join(command)}): {tail}"
    return None


@pytest.fixture(scope="session")
def parl_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PARL's published wheel, downloaded once per test run.

    The pytest-xdist workers of one run share the folder above their own base temp folders, and
    a file lock lets one of them download while the others wait for it.
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder = root / f"parl-{PARL_VERSION}-wheel"
    folder.mkdir(exist_ok=True)
    wheel = folder / WHEEL_NAME
    with FileLock(str(folder / "download.lock")):
        if not wheel.is_file():
            error = _download(folder)
            if error is not None:
                _unavailable(error)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        pytest.fail(f"{wheel} has sha256 {digest}, not PyPI's {WHEEL_SHA256}", False)
    return wheel


@pytest.fixture(scope="session")
def published(parl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, type]:
    """PARL's algorithm classes by name, loaded from the wheel's files against this package."""
    source = tmp_path_factory.mktemp(f"parl-{PARL_VERSION}-src")
    classes: dict[str, type] = {}
    # PARL's DQN modules call warnings.simplefilter("default") when they load
    with zipfile.ZipFile(parl_wheel) as archive, warnings.catch_warnings():
        for case in CASES:
            if case.algorithm in classes:
                continue
            member = f"parl/algorithms/torch/{case.module}.py"
            path = Path(archive.extract(member, source))
            name = f"published_parl_{PARL_VERSION.replace('.', '_')}_{case.module}"
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            classes[case.algorithm] = getattr(module, case.algorithm)
    return classes


# -- models, in the shapes of PARL's examples ---------------------------------------------------
def _mlp(inputs: int, outputs: int, hidden: int = 16) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
        nn.Linear(hidden, outputs),
    )  # fmt: skip


class QModel(parl.Model):
    """``forward(obs) -> Q (B, act_dim)`` (DQN, DDQN)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _mlp(OBS_DIM, ACT_DIM)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class ProbModel(parl.Model):
    """``forward(obs) -> probabilities (B, act_dim)`` (PolicyGradient)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _mlp(OBS_DIM, ACT_DIM)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.net(obs), dim=-1)


class ContinuousModel(parl.Model):
    """PARL's DDPG / TD3 / SAC model: ``policy`` (tanh actions, or SAC's ``(mean, log_std)``),
    ``value -> (B, 1)`` or twin ``(q1, q2)``, ``Q1`` and the actor / critic parameters."""

    def __init__(self, gaussian: bool = False, twin: bool = False) -> None:
        super().__init__()
        self.gaussian, self.twin = gaussian, twin
        self.actor = _mlp(OBS_DIM, 2 * ACT_DIM if gaussian else ACT_DIM)
        self.q1 = _mlp(OBS_DIM + ACT_DIM, 1)
        self.q2 = _mlp(OBS_DIM + ACT_DIM, 1) if twin else None

    def policy(self, obs: torch.Tensor) -> Any:
        out = self.actor(obs)
        if self.gaussian:
            mean, log_std = out.chunk(2, dim=-1)
            return mean, log_std.clamp(-20.0, 2.0)
        return torch.tanh(out)

    def value(self, obs: torch.Tensor, action: torch.Tensor) -> Any:
        q1 = self.Q1(obs, action)
        if self.q2 is None:
            return q1
        return q1, self.q2(torch.cat([obs, action], dim=-1))

    def Q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.q1(torch.cat([obs, action], dim=-1))

    def get_actor_params(self) -> list[nn.Parameter]:
        return list(self.actor.parameters())

    def get_critic_params(self) -> list[nn.Parameter]:
        params = list(self.q1.parameters())
        return params + (list(self.q2.parameters()) if self.q2 is not None else [])


class OnPolicyModel(parl.Model):
    """PARL's PPO / A2C model: ``policy`` (logits, or ``(mean, std)``) and ``value``: a ``(B,
    1)`` column as PARL's PPO models return, or ``(B,)`` as its A2C models do."""

    def __init__(self, continuous: bool = False, value_column: bool = True) -> None:
        super().__init__()
        self.continuous, self.value_column = continuous, value_column
        self.actor = _mlp(OBS_DIM, ACT_DIM)
        self.log_std = nn.Parameter(torch.full((1, ACT_DIM), -0.5))
        self.critic = _mlp(OBS_DIM, 1)

    def policy(self, obs: torch.Tensor) -> Any:
        out = self.actor(obs)
        return (out, self.log_std.exp().expand_as(out)) if self.continuous else out

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        value = self.critic(obs)
        return value if self.value_column else value.squeeze(-1)

    def policy_and_value(self, obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        return self.policy(obs), self.value(obs)


# -- batches: what PARL's agents pass to learn --------------------------------------------------
Batch = tuple[tuple[torch.Tensor, ...], dict[str, Any]]


def _obs(gen: torch.Generator, rows: int = BATCH) -> torch.Tensor:
    return torch.randn(rows, OBS_DIM, generator=gen)


def _column(gen: torch.Generator) -> torch.Tensor:
    return torch.randn(BATCH, 1, generator=gen)


def _terminal(gen: torch.Generator) -> torch.Tensor:
    return (torch.rand(BATCH, 1, generator=gen) < 0.2).float()


def q_batch(gen: torch.Generator, step: int) -> Batch:
    """DQN's agent: actions, rewards and terminals as ``(B, 1)`` columns."""
    action = torch.randint(ACT_DIM, (BATCH, 1), generator=gen)
    obs, reward, next_obs = _obs(gen), _column(gen), _obs(gen)
    return (obs, action, reward, next_obs, _terminal(gen)), {}


def pg_batch(gen: torch.Generator, step: int) -> Batch:
    action = torch.randint(ACT_DIM, (BATCH,), generator=gen)
    return (_obs(gen), action, torch.randn(BATCH, generator=gen)), {}


def continuous_batch(gen: torch.Generator, step: int) -> Batch:
    action = torch.rand(BATCH, ACT_DIM, generator=gen) * 2.0 - 1.0
    obs, reward, next_obs = _obs(gen), _column(gen), _obs(gen)
    return (obs, action, reward, next_obs, _terminal(gen)), {}


def ppo_batch(gen: torch.Generator, step: int, continuous: bool) -> Batch:
    """A minibatch as PARL's PPO storage hands it out; log-probabilities near those of a fresh
    policy, so that some ratios leave the clip range. From the second update on, ``lr`` is
    passed, as PARL's agent does with its schedule."""
    if continuous:
        action = torch.randn(BATCH, ACT_DIM, generator=gen)
        logprob = -ACT_DIM * 1.5 + 0.3 * torch.randn(BATCH, generator=gen)
    else:
        action = torch.randint(ACT_DIM, (BATCH,), generator=gen).float()  # PARL stores floats
        logprob = torch.log(torch.tensor(1.0 / ACT_DIM)) + 0.3 * torch.randn(BATCH, generator=gen)
    value, ret, adv = (torch.randn(BATCH, generator=gen) for _ in range(3))
    kwargs = {"lr": 5e-4} if step > 0 else {}
    return (_obs(gen), action, value, ret, logprob, adv), kwargs


def a2c_batch(gen: torch.Generator, step: int) -> Batch:
    action = torch.randint(ACT_DIM, (BATCH,), generator=gen)
    adv, target = torch.randn(BATCH, generator=gen), torch.randn(BATCH, generator=gen)
    return (_obs(gen), action, adv, target), {
        "lr": 1e-3 * (1.0 - 0.1 * step),
        "entropy_coeff": -0.01,
    }


# -- the cases ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One algorithm built both ways on the same model."""

    id: str
    algorithm: str  # the class name, in PARL and here
    module: str  # PARL's file, parl/algorithms/torch/<module>.py
    make_model: Callable[[], nn.Module]
    ours: Callable[[nn.Module], Any]
    theirs: Callable[[type, nn.Module], Any]
    batch: Callable[[torch.Generator, int], Batch]
    probes: tuple[str, ...]  # methods whose outputs are compared (after the updates)
    # PARL's TD3.learn returns nothing: there are no losses to compare
    compare_losses: bool = True
    sync_after: tuple[int, ...] = ()  # updates after which both call sync_target() (DQN's copy)


def _ac_kwargs() -> dict[str, Any]:
    # a large tau, so that a wrong target update shows in the target weights within 5 updates
    return {"gamma": 0.9, "tau": 0.1, "actor_lr": 1e-3, "critic_lr": 2e-3}


# noise clipped at one standard deviation: about a third of the target noise is clipped
TD3_NOISE: dict[str, Any] = {"policy_noise": 0.3, "noise_clip": 0.3, "policy_freq": 2}
A2C_CONFIG = {"vf_loss_coeff": 0.5, "learning_rate": 1e-3}

CASES = (
    Case(
        "DQN", "DQN", "dqn", QModel,
        lambda m: algorithms.DQN(m, gamma=0.9, lr=1e-3, device="cpu"),
        lambda cls, m: cls(m, gamma=0.9, lr=1e-3),
        q_batch, ("predict",), sync_after=(2,),
    ),
    Case(
        "DDQN", "DDQN", "ddqn", QModel,
        lambda m: algorithms.DDQN(m, gamma=0.9, lr=1e-3, device="cpu"),
        lambda cls, m: cls(m, gamma=0.9, lr=1e-3),
        q_batch, ("predict",), sync_after=(2,),
    ),
    Case(
        "PolicyGradient", "PolicyGradient", "policy_gradient", ProbModel,
        lambda m: algorithms.PolicyGradient(m, lr=1e-3, device="cpu"),
        lambda cls, m: cls(m, lr=1e-3),
        pg_batch, ("predict",),
    ),
    Case(
        "DDPG", "DDPG", "ddpg", ContinuousModel,
        lambda m: algorithms.DDPG(m, **_ac_kwargs(), device="cpu"),
        lambda cls, m: cls(m, **_ac_kwargs()),
        continuous_batch, ("predict",),
    ),
    Case(
        "TD3", "TD3", "td3", lambda: ContinuousModel(twin=True),
        lambda m: algorithms.TD3(m, **_ac_kwargs(), **TD3_NOISE, device="cpu"),
        lambda cls, m: cls(m, **_ac_kwargs(), **TD3_NOISE),
        continuous_batch, ("predict",), compare_losses=False,
    ),
    Case(
        "SAC", "SAC", "sac", lambda: ContinuousModel(gaussian=True, twin=True),
        lambda m: algorithms.SAC(m, alpha=0.2, **_ac_kwargs(), device="cpu"),
        lambda cls, m: cls(m, alpha=0.2, **_ac_kwargs()),
        continuous_batch, ("predict", "sample"),
    ),
    Case(
        "PPO-discrete", "PPO", "ppo", OnPolicyModel,
        lambda m: algorithms.PPO(m, clip_param=0.2, initial_lr=1e-3, device="cpu"),
        lambda cls, m: cls(m, clip_param=0.2, initial_lr=1e-3),
        lambda gen, step: ppo_batch(gen, step, continuous=False), ("predict", "sample", "value"),
    ),
    Case(
        "PPO-continuous", "PPO", "ppo", lambda: OnPolicyModel(continuous=True),
        lambda m: algorithms.PPO(
            m, clip_param=0.2, initial_lr=1e-3, continuous_action=True, device="cpu"
        ),
        lambda cls, m: cls(m, clip_param=0.2, initial_lr=1e-3, continuous_action=True),
        lambda gen, step: ppo_batch(gen, step, continuous=True), ("predict", "sample", "value"),
    ),
    Case(
        "A2C", "A2C", "a2c", lambda: OnPolicyModel(value_column=False),
        lambda m: algorithms.A2C(m, A2C_CONFIG, device="cpu"),
        lambda cls, m: cls(m, dict(A2C_CONFIG)),
        a2c_batch, ("predict", "sample", "prob_and_value", "value"),
    ),
)  # fmt: skip
CASE_IDS = [case.id for case in CASES]


# -- comparing ----------------------------------------------------------------------------------
@dataclass
class Pair:
    """The same algorithm twice: PARL's and ours, on identical copies of one model."""

    theirs: Any
    ours: Any


@pytest.fixture
def cpu_only(monkeypatch: pytest.MonkeyPatch, single_thread: None) -> None:
    """PARL's algorithms move the model to CUDA when there is one; both sides run on the CPU,
    single-threaded, so that only the algorithms' code differs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _build(case: Case, published: dict[str, type]) -> Pair:
    torch.manual_seed(0)
    model = case.make_model()
    return Pair(case.theirs(published[case.algorithm], copy.deepcopy(model)), case.ours(model))


def _call(alg: Any, method: str, seed: int, *args: Any, **kwargs: Any) -> Any:
    """``alg.method(*args, **kwargs)`` on clones of the inputs, torch's generator at ``seed``."""
    torch.manual_seed(seed)
    return getattr(alg, method)(*(arg.clone() for arg in args), **kwargs)


def _tensors(output: Any) -> list[torch.Tensor]:
    """A learn/predict/sample result as a flat list of detached tensors."""
    if isinstance(output, tuple | list):
        return [t for item in output for t in _tensors(item)]
    return [torch.as_tensor(output).detach()]


def _max_diff(theirs: nn.Module, ours: nn.Module) -> float:
    theirs_state, ours_state = theirs.state_dict(), ours.state_dict()
    assert theirs_state.keys() == ours_state.keys()
    return max(float((theirs_state[name] - ours_state[name]).abs().max()) for name in ours_state)


def _learn_both(case: Case, pair: Pair, gen: torch.Generator, step: int) -> tuple[Any, Any]:
    args, kwargs = case.batch(gen, step)
    seed = 1000 + step
    result = (
        _call(pair.theirs, "learn", seed, *args, **kwargs),
        _call(pair.ours, "learn", seed, *args, **kwargs),
    )
    if step in case.sync_after:
        pair.theirs.sync_target()
        pair.ours.sync_target()
    return result


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_parameters_and_losses_match_published_parl_after_updates(
    case: Case,
    published: dict[str, type],
    cpu_only: None,
) -> None:
    pair = _build(case, published)
    models = ["model", *(["target_model"] if hasattr(pair.ours, "target_model") else [])]
    assert _max_diff(pair.theirs.model, pair.ours.model) == 0.0  # the same start
    gen = torch.Generator().manual_seed(7)
    for step in range(UPDATES):
        theirs_losses, ours_losses = _learn_both(case, pair, gen, step)
        if case.compare_losses:
            theirs_values, ours_values = _tensors(theirs_losses), _tensors(ours_losses)
            assert len(theirs_values) == len(ours_values)
            for theirs_value, ours_value in zip(theirs_values, ours_values, strict=True):
                torch.testing.assert_close(ours_value, theirs_value, rtol=LOSS_RTOL, atol=ATOL)
        else:
            assert theirs_losses is None
    diffs = {
        name: _max_diff(getattr(pair.theirs, name), getattr(pair.ours, name)) for name in models
    }
    assert max(diffs.values()) <= ATOL, f"{case.id}: max |PARL - ours| per model: {diffs}"
    # the updates did move the weights: an algorithm that ignored its batch would not pass
    torch.manual_seed(0)
    assert _max_diff(case.make_model(), pair.ours.model) > 1e-4


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_predict_and_sample_match_published_parl(
    case: Case, published: dict[str, type], cpu_only: None
) -> None:
    pair = _build(case, published)
    gen = torch.Generator().manual_seed(11)
    for step in range(2):  # outputs of trained weights, not only of the initial ones
        _learn_both(case, pair, gen, step)
    obs = _obs(gen, rows=16)
    for method in case.probes:
        # sample draws from torch's generator: reseeded identically for both calls
        with torch.no_grad():
            theirs = _tensors(_call(pair.theirs, method, 5, obs))
            ours = _tensors(_call(pair.ours, method, 5, obs))
        assert len(theirs) == len(ours), method
        for index, (theirs_out, ours_out) in enumerate(zip(theirs, ours, strict=True)):
            if (case.id, method, index) in SHAPE_DEVIATIONS:
                assert theirs_out.shape == (*ours_out.shape, 1), (method, index)
                theirs_out = theirs_out.squeeze(-1)
            torch.testing.assert_close(
                ours_out, theirs_out, rtol=0.0, atol=ATOL, msg=f"{case.id}.{method}[{index}]"
            )


def test_ppo_learn_with_lr_zero_keeps_the_weights_where_published_parl_does_not(
    published: dict[str, type], cpu_only: None
) -> None:
    """A deliberate deviation: ``PPO.learn(..., lr=0.0)`` sets the learning rate to 0 here, so
    the weights stay as they are. PARL tests ``if lr:``, which treats 0 like ``None`` and keeps
    the previous rate; yet 0 is the last value of PARL's ``LinearDecayScheduler``, which PARL's
    PPO agent passes on its last update, so PARL takes one more full-size step there."""
    case = next(case for case in CASES if case.id == "PPO-discrete")
    pair = _build(case, published)
    gen = torch.Generator().manual_seed(3)
    _learn_both(case, pair, gen, 0)
    before = copy.deepcopy(pair.ours.model)
    assert _max_diff(pair.theirs.model, pair.ours.model) <= ATOL
    args, _ = case.batch(gen, 1)
    _call(pair.theirs, "learn", 9, *args, lr=0.0)
    _call(pair.ours, "learn", 9, *args, lr=0.0)
    assert _max_diff(before, pair.ours.model) == 0.0
    assert _max_diff(before, pair.theirs.model) > 1e-5


def test_a2c_takes_a_value_column_as_one_value_per_step_where_published_parl_broadcasts(
    published: dict[str, type], cpu_only: None
) -> None:
    """A deliberate deviation: with a model whose ``value`` is a ``(B, 1)`` column (as PARL's
    PPO models return), ``A2C.learn`` here still subtracts one target per step. PARL computes
    ``values - target_values`` as is, which broadcasts ``(B, 1) - (B,)`` into a ``(B, B)``
    matrix: a value loss over every pair of steps, without an error."""
    torch.manual_seed(0)
    model = OnPolicyModel(value_column=True)
    theirs = published["A2C"](copy.deepcopy(model), dict(A2C_CONFIG))
    ours = algorithms.A2C(model, A2C_CONFIG, device="cpu")
    (obs, action, adv, target), kwargs = a2c_batch(torch.Generator().manual_seed(5), 0)
    with torch.no_grad():
        expected = 0.5 * (model.value(obs).squeeze(-1) - target).square().sum()
    theirs_vf = _tensors(_call(theirs, "learn", 1, obs, action, adv, target, **kwargs))[2]
    ours_vf = _tensors(_call(ours, "learn", 1, obs, action, adv, target, **kwargs))[2]
    torch.testing.assert_close(ours_vf, expected)
    assert abs(float(theirs_vf) - float(expected)) > 1.0
