"""MAPPO and PopArt against PARL 2.2.1's published wheel, update for update.

PARL's ``parl/algorithms/torch/mappo.py`` is loaded from the wheel against this package (see
``test_parl_parity``). Both sides start from the same weights, learn from the same minibatches
with torch's generator reseeded before every call, and must end with the same parameters, the
same PopArt statistics, the same losses and the same ``sample`` / ``value`` outputs: discrete and
multi-discrete actions, with and without PopArt and value active masks. PARL's MAPPO has no
continuous actions; that path is checked against the paper's formulas written out with
``torch.distributions``.

Deliberate deviations from PARL are the tests at the end, each naming what differs and why.
"""

from __future__ import annotations

import copy
import importlib.util
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import parl
from parl.algorithms import MAPPO, PopArt
from parl.algorithms.mappo import huber_loss

from .test_parl_parity import (  # noqa: F401  (parl_wheel, cpu_only: fixtures used below)
    ATOL,
    LOSS_RTOL,
    PARL_VERSION,
    UPDATES,
    _call,
    _max_diff,
    _tensors,
    cpu_only,
    parl_wheel,
)

BATCH = 32
OBS_DIM, CENT_DIM, HIDDEN = 5, 9, 16
DISCRETE, MULTI_DISCRETE = 4, [3, 2]


@pytest.fixture(scope="session")
def published_mappo(parl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> ModuleType:  # noqa: F811
    """PARL's ``mappo`` module (``MAPPO``, ``PopArt``, ``huber_loss``) from the wheel."""
    source = tmp_path_factory.mktemp(f"parl-{PARL_VERSION}-mappo")
    with zipfile.ZipFile(parl_wheel) as archive:
        path = Path(archive.extract("parl/algorithms/torch/mappo.py", source))
    spec = importlib.util.spec_from_file_location("published_parl_mappo", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- a model in the shape of PARL's MAPPO example -----------------------------------------------
class Actor(parl.Model):
    """Logits ``(B, n)``, a list of them (``multi_discrete``), or a Gaussian's ``(mean, std)``."""

    def __init__(self, act_dim: int | list[int], continuous: bool = False) -> None:
        super().__init__()
        self.multi_discrete = isinstance(act_dim, list)  # what PARL's MAPPO reads
        self.continuous = continuous
        self.trunk = nn.Sequential(
            nn.LayerNorm(OBS_DIM), nn.Linear(OBS_DIM, HIDDEN), nn.Tanh(), nn.LayerNorm(HIDDEN),
            nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
        )  # fmt: skip
        dims = act_dim if isinstance(act_dim, list) else [act_dim]
        self.heads = nn.ModuleList(nn.Linear(HIDDEN, n) for n in dims)
        self.log_std = nn.Parameter(torch.full((dims[0],), -0.3)) if continuous else None

    def forward(self, obs: torch.Tensor) -> Any:
        x = self.trunk(obs)
        if self.log_std is not None:
            mean = self.heads[0](x)
            return mean, self.log_std.exp().expand_as(mean)
        logits = [head(x) for head in self.heads]
        return logits if self.multi_discrete else logits[0]


class Critic(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.LayerNorm(CENT_DIM), nn.Linear(CENT_DIM, HIDDEN), nn.Tanh(), nn.LayerNorm(HIDDEN),
            nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
        )  # fmt: skip
        self.v_out = nn.Linear(HIDDEN, 1)

    def forward(self, cent_obs: torch.Tensor) -> torch.Tensor:
        return self.v_out(self.trunk(cent_obs))


class MAPPOModel(parl.Model):
    def __init__(self, act_dim: int | list[int], continuous: bool = False) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.actor = Actor(act_dim, continuous)
        self.critic = Critic()

    def policy(self, obs: torch.Tensor) -> Any:
        return self.actor(obs)

    def value(self, cent_obs: torch.Tensor) -> torch.Tensor:
        return self.critic(cent_obs)


# -- batches as PARL's MAPPO buffer hands them out ----------------------------------------------
def mappo_batch(
    gen: torch.Generator, act_dim: int | list[int], continuous: bool = False, rows: int = BATCH
) -> tuple[torch.Tensor, ...]:
    """``(share_obs, obs, actions, value_preds, returns, old_log_probs, adv, active_masks)``:
    actions stored as float32 (as the buffer does), log-probabilities near a fresh policy's
    (so that some ratios leave the clip range), a fifth of the steps inactive."""
    dims = act_dim if isinstance(act_dim, list) else [act_dim]
    if continuous:
        actions = torch.randn(rows, dims[0], generator=gen)
        old_log_probs = -1.2 * dims[0] + 0.3 * torch.randn(rows, 1, generator=gen)
    else:
        actions = torch.stack(
            [torch.randint(n, (rows,), generator=gen).float() for n in dims], dim=-1
        )
        uniform = torch.tensor([-float(np.log(n)) for n in dims])
        old_log_probs = uniform + 0.3 * torch.randn(rows, len(dims), generator=gen)
    value_preds = 0.5 * torch.randn(rows, 1, generator=gen)
    returns = 3.0 + 2.0 * torch.randn(rows, 1, generator=gen)  # away from 0: PopArt has work
    adv = torch.randn(rows, 1, generator=gen)
    active = (torch.rand(rows, 1, generator=gen) > 0.2).float()
    share_obs = torch.randn(rows, CENT_DIM, generator=gen)
    obs = torch.randn(rows, OBS_DIM, generator=gen)
    return share_obs, obs, actions, value_preds, returns, old_log_probs, adv, active


@dataclass(frozen=True)
class Setting:
    id: str
    act_dim: int | list[int]
    use_popart: bool
    use_value_active_masks: bool

    def kwargs(self) -> dict[str, Any]:
        return {
            "clip_param": 0.2, "value_loss_coef": 0.5, "entropy_coef": 0.05,
            "initial_lr": 3e-3, "huber_delta": 10.0, "eps": 1e-5,
            # small enough that the clip is active on most updates
            "max_grad_norm": 0.5,
            "use_popart": self.use_popart, "use_value_active_masks": self.use_value_active_masks,
        }  # fmt: skip


SETTINGS = [
    Setting(f"{kind}-{'popart' if popart else 'raw'}-{'vmask' if vmask else 'novmask'}", dim,
            popart, vmask)
    for kind, dim in (("discrete", DISCRETE), ("multidiscrete", MULTI_DISCRETE))
    for popart in (True, False)
    for vmask in (True, False)
]  # fmt: skip


@dataclass
class Pair:
    theirs: Any
    ours: Any


def _build(setting: Setting, module: ModuleType) -> Pair:
    torch.manual_seed(0)
    model = MAPPOModel(setting.act_dim)
    theirs = module.MAPPO(copy.deepcopy(model), *setting.kwargs().values())
    return Pair(theirs, MAPPO(model, **setting.kwargs(), device="cpu"))


def _popart_diff(pair: Pair) -> float:
    if pair.ours.value_normalizer is None:
        assert pair.theirs.value_normalizer is None
        return 0.0
    theirs, ours = pair.theirs.value_normalizer, pair.ours.value_normalizer
    return max(
        float((getattr(theirs, name) - getattr(ours, name)).abs().max())
        for name in ("mean", "mean_sq", "debiasing_term")
    )


def _learn_both(pair: Pair, setting: Setting, gen: torch.Generator, step: int) -> tuple[Any, Any]:
    batch = mappo_batch(gen, setting.act_dim)
    seed = 1000 + step
    return _call(pair.theirs, "learn", seed, *batch), _call(pair.ours, "learn", seed, *batch)


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.id for s in SETTINGS])
def test_parameters_losses_and_popart_match_published_parl_after_updates(
    setting: Setting,
    published_mappo: ModuleType,
    cpu_only: None,  # noqa: F811
) -> None:
    pair = _build(setting, published_mappo)
    assert _max_diff(pair.theirs.model, pair.ours.model) == 0.0
    gen = torch.Generator().manual_seed(7)
    for step in range(UPDATES):
        theirs, ours = _learn_both(pair, setting, gen, step)
        assert ours._fields == ("value_loss", "policy_loss", "dist_entropy")
        for theirs_value, ours_value in zip(_tensors(theirs), _tensors(ours), strict=True):
            torch.testing.assert_close(ours_value, theirs_value, rtol=LOSS_RTOL, atol=ATOL)
    diff = _max_diff(pair.theirs.model, pair.ours.model)
    assert diff <= ATOL, f"{setting.id}: max |PARL - ours| over the model: {diff}"
    assert _popart_diff(pair) <= ATOL
    # the updates did move the weights, the actor's and the critic's
    torch.manual_seed(0)
    start = MAPPOModel(setting.act_dim)
    assert _max_diff(start.actor, pair.ours.model.actor) > 1e-4
    assert _max_diff(start.critic, pair.ours.model.critic) > 1e-4


@pytest.mark.parametrize("setting", SETTINGS[::2], ids=[s.id for s in SETTINGS[::2]])
def test_sample_value_and_popart_outputs_match_published_parl(
    setting: Setting,
    published_mappo: ModuleType,
    cpu_only: None,  # noqa: F811
) -> None:
    pair = _build(setting, published_mappo)
    gen = torch.Generator().manual_seed(11)
    for step in range(2):  # outputs of trained weights
        _learn_both(pair, setting, gen, step)
    share_obs, obs = (
        torch.randn(16, CENT_DIM, generator=gen),
        torch.randn(16, OBS_DIM, generator=gen),
    )
    for deterministic in (False, True):
        theirs = _call(pair.theirs, "sample", 5, share_obs, obs, deterministic=deterministic)
        ours = _call(pair.ours, "sample", 5, share_obs, obs, deterministic=deterministic)
        for index, (t, o) in enumerate(zip(_tensors(theirs), _tensors(ours), strict=True)):
            assert o.shape == t.shape and o.dtype == t.dtype, (deterministic, index)
            torch.testing.assert_close(o, t, rtol=0.0, atol=ATOL)
    torch.testing.assert_close(
        pair.ours.value(share_obs), pair.theirs.value(share_obs).detach(), rtol=0.0, atol=ATOL
    )
    if setting.use_popart:
        values = np.linspace(-3.0, 3.0, 7, dtype=np.float32)[:, None]
        theirs_norm, ours_norm = pair.theirs.value_normalizer, pair.ours.value_normalizer
        torch.testing.assert_close(ours_norm.normalize(values), theirs_norm.normalize(values))
        np.testing.assert_allclose(
            ours_norm.denormalize(values), theirs_norm.denormalize(values), atol=ATOL
        )


def test_popart_alone_matches_published_parl(published_mappo: ModuleType) -> None:
    """Statistics and the rescaled layer over a stream of batches, with a fast ``beta`` so that
    the old statistics matter; the layer's unnormalised output is preserved by each update."""
    torch.manual_seed(0)
    layer = nn.Linear(4, 1)
    their_layer = copy.deepcopy(layer)
    ours = PopArt(layer.weight, layer.bias, beta=0.9)
    theirs = published_mappo.PopArt(their_layer.weight, their_layer.bias, beta=0.9)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(8, 4, generator=gen)
    for _ in range(6):
        targets = 5.0 + 3.0 * torch.randn(16, 1, generator=gen)
        with torch.no_grad():
            before = ours.denormalize(layer(x))
        ours.update(targets)
        theirs.update(targets.numpy())  # PARL takes arrays too
        with torch.no_grad():
            torch.testing.assert_close(ours.denormalize(layer(x)), before, atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(layer.weight, their_layer.weight, atol=ATOL, rtol=0.0)
        torch.testing.assert_close(layer.bias, their_layer.bias, atol=ATOL, rtol=0.0)
    torch.testing.assert_close(ours.normalize(targets), theirs.normalize(targets))


# -- continuous actions: not in PARL, checked against torch.distributions ----------------------
def _reference_continuous_update(
    model: MAPPOModel, kwargs: dict[str, Any], batch: tuple[torch.Tensor, ...], normalizer: PopArt
) -> tuple[float, float, float]:
    """The paper's MAPPO update written out with ``torch.distributions.Normal`` and two
    ``torch.optim.Adam``: one ratio per action vector, entropy summed over dimensions."""
    share_obs, obs, actions, value_preds, returns, old_log_probs, adv, mask = batch
    clip, delta = kwargs["clip_param"], kwargs["huber_delta"]
    actor_opt = torch.optim.Adam(
        model.actor.parameters(), lr=kwargs["initial_lr"], eps=kwargs["eps"]
    )
    critic_opt = torch.optim.Adam(
        model.critic.parameters(), lr=kwargs["initial_lr"], eps=kwargs["eps"]
    )
    mean, std = model.policy(obs)
    dist = torch.distributions.Normal(mean, std)
    log_probs = dist.log_prob(actions).sum(-1, keepdim=True)
    entropy = (dist.entropy().sum(-1, keepdim=True) * mask).sum() / mask.sum()
    values = model.value(share_obs)
    ratio = (log_probs - old_log_probs).exp()
    surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    policy_loss = (-surrogate * mask).sum() / mask.sum()
    actor_opt.zero_grad()
    (policy_loss - kwargs["entropy_coef"] * entropy).backward()
    nn.utils.clip_grad_norm_(model.actor.parameters(), kwargs["max_grad_norm"])
    actor_opt.step()
    normalizer.update(returns)
    targets = normalizer.normalize(returns)
    clipped = value_preds + (values - value_preds).clamp(-clip, clip)
    loss = torch.max(
        F.huber_loss(values, targets, reduction="none", delta=delta),
        F.huber_loss(clipped, targets, reduction="none", delta=delta),
    )
    value_loss = (loss * mask).sum() / mask.sum()
    critic_opt.zero_grad()
    (kwargs["value_loss_coef"] * value_loss).backward()
    nn.utils.clip_grad_norm_(model.critic.parameters(), kwargs["max_grad_norm"])
    critic_opt.step()
    return value_loss.item(), policy_loss.item(), entropy.item()


def test_continuous_update_matches_the_papers_formulas(single_thread: None) -> None:
    torch.manual_seed(0)
    model = MAPPOModel(2, continuous=True)
    reference = copy.deepcopy(model)
    kwargs = Setting("continuous", 2, True, True).kwargs()
    ours = MAPPO(model, **kwargs, continuous_action=True, device="cpu")
    normalizer = PopArt(reference.critic.v_out.weight, reference.critic.v_out.bias)
    batch = mappo_batch(torch.Generator().manual_seed(5), 2, continuous=True)
    expected = _reference_continuous_update(reference, kwargs, batch, normalizer)
    result = ours.learn(*(t.clone() for t in batch))
    np.testing.assert_allclose([float(v) for v in result], expected, rtol=1e-5, atol=1e-6)
    assert _max_diff(reference, model) <= 1e-6
    # sample: Normal(mean, std).sample() with the same seed; log-probabilities summed per row
    _, obs = batch[0], batch[1]
    torch.manual_seed(9)
    values, actions, log_probs = ours.sample(batch[0], obs)
    with torch.no_grad():
        mean, std = reference.policy(obs)
        torch.manual_seed(9)
        dist = torch.distributions.Normal(mean, std)
        expected_actions = dist.sample()
    torch.testing.assert_close(actions, expected_actions)
    torch.testing.assert_close(log_probs, dist.log_prob(actions).sum(-1, keepdim=True))
    assert values.shape == (BATCH, 1)
    torch.testing.assert_close(ours.predict(obs), mean)


def test_published_parl_has_no_continuous_actions(
    published_mappo: ModuleType,
    cpu_only: None,  # noqa: F811
) -> None:
    """Why the continuous path is compared with formulas, not with PARL: PARL's MAPPO builds a
    ``Categorical`` from whatever ``policy`` returns, and a Gaussian's ``(mean, std)`` fails."""
    torch.manual_seed(0)
    theirs = published_mappo.MAPPO(
        MAPPOModel(2, continuous=True), 0.2, 1.0, 0.01, 1e-3, 10.0, 1e-5, 0.5
    )
    batch = mappo_batch(torch.Generator().manual_seed(5), 2, continuous=True)
    with pytest.raises((TypeError, ValueError, AttributeError)):
        theirs.sample(batch[0], batch[1])


# -- deliberate deviations from PARL ------------------------------------------------------------
def test_denormalize_keeps_a_tensor_a_tensor_where_published_parl_returns_numpy(
    published_mappo: ModuleType,
) -> None:
    """``PopArt.denormalize(tensor)`` returns a numpy array in PARL (while ``normalize`` returns
    tensors), which breaks tensor code and copies GPU values to the host; here a tensor comes
    back as a tensor. A numpy array still comes back as numpy, as PARL's buffers expect."""
    layer = nn.Linear(3, 1)
    ours = PopArt(layer.weight, layer.bias)
    theirs = published_mappo.PopArt(copy.deepcopy(layer).weight, copy.deepcopy(layer).bias)
    targets = torch.tensor([[1.0], [4.0], [7.0]])
    ours.update(targets)
    theirs.update(targets)
    values = torch.tensor([[0.5], [-1.0]])
    assert isinstance(theirs.denormalize(values), np.ndarray)  # PARL: numpy for a tensor
    assert isinstance(ours.denormalize(values), torch.Tensor)
    np.testing.assert_allclose(
        ours.denormalize(values).numpy(), theirs.denormalize(values), atol=ATOL
    )
    assert isinstance(ours.denormalize(values.numpy()), np.ndarray)
    np.testing.assert_allclose(ours.denormalize(values.numpy()), theirs.denormalize(values.numpy()))


def test_huber_loss_of_a_large_negative_error_is_not_zero_as_in_published_parl(
    published_mappo: ModuleType,
    cpu_only: None,  # noqa: F811
) -> None:
    """PARL's ``huber_loss`` weights its linear part by ``e > delta`` instead of ``|e| > delta``:
    an error below ``-delta`` (a critic that overestimates the return by more than delta) costs
    0 and gets no gradient. Here it costs ``delta (|e| - delta / 2)``, as torch's own does."""
    error = torch.tensor([-30.0, -2.0, 0.5, 2.0, 30.0])
    torch.testing.assert_close(
        huber_loss(error, 1.0), F.huber_loss(error, torch.zeros(5), reduction="none", delta=1.0)
    )
    assert float(published_mappo.huber_loss(error, 1.0)[0]) == 0.0
    # the consequence in an update: PARL's critic does not learn from those steps at all
    setting = Setting("raw", DISCRETE, False, True)
    pair = _build(setting, published_mappo)
    batch = list(mappo_batch(torch.Generator().manual_seed(1), DISCRETE))
    with torch.no_grad():
        batch[4] = pair.ours.model.value(batch[0]) - 50.0  # every return far below its value
    batch[3] = batch[4] + 50.0  # the old predictions too: the clipped error is large as well
    critic_before = copy.deepcopy(pair.theirs.model.critic)
    theirs_loss = _tensors(_call(pair.theirs, "learn", 1, *batch))[0]
    ours_loss = _tensors(_call(pair.ours, "learn", 1, *batch))[0]
    assert float(theirs_loss) == 0.0 and float(ours_loss) > 100.0
    assert _max_diff(critic_before, pair.theirs.model.critic) == 0.0
    assert _max_diff(critic_before, pair.ours.model.critic) > 1e-4


def test_defaults_and_no_masks_work_where_published_parl_raises(
    published_mappo: ModuleType,
    cpu_only: None,  # noqa: F811
) -> None:
    """PARL's signature defaults ``eps=None`` and ``max_grad_norm=None`` raise (``Adam(eps=None)``
    and ``clip_grad_norm_(params, None)``), and so does ``learn`` without ``active_masks`` while
    ``use_value_active_masks=True`` (its default). Here ``None`` means torch's Adam epsilon and
    no clipping, and a missing mask counts every step: the same update as a mask of ones."""
    torch.manual_seed(0)
    model = MAPPOModel(DISCRETE)
    with pytest.raises(TypeError):
        published_mappo.MAPPO(copy.deepcopy(model), 0.2, 1.0, 0.01, 1e-3, 10.0)
    theirs = published_mappo.MAPPO(copy.deepcopy(model), 0.2, 1.0, 0.01, 1e-3, 10.0, 1e-5, 0.5)
    batch = mappo_batch(torch.Generator().manual_seed(2), DISCRETE)
    with pytest.raises(TypeError):
        theirs.learn(*batch[:7])
    ours = MAPPO(copy.deepcopy(model), 0.2, 1.0, 0.01, 1e-3, 10.0, None, None, device="cpu")
    assert ours.actor_optimizer.defaults["eps"] == 1e-8
    ones = MAPPO(copy.deepcopy(model), 0.2, 1.0, 0.01, 1e-3, 10.0, None, None, device="cpu")
    torch.manual_seed(4)
    without = ours.learn(*batch[:7])
    torch.manual_seed(4)
    with_ones = ones.learn(*batch[:7], torch.ones(BATCH, 1))
    for a, b in zip(without, with_ones, strict=True):
        torch.testing.assert_close(a, b)
    assert _max_diff(ours.model, ones.model) <= 1e-7
