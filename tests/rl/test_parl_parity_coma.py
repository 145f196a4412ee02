"""COMA against PARL 2.2.1's published ``parl/algorithms/torch/coma.py``.

PARL's COMA has three faults that this package fixes, each shown by a test below:

1. its critic's bootstrap is computed on ``batch["critic_inputs"]`` (it reshapes the current
   inputs where it means the next ones), so ``batch["critic_inputs_next"]`` is never read;
2. that bootstrap comes from the online critic: the target model is synchronised but never used;
3. its exploration mixture ``(1 - eps) * pi + eps / n`` takes ``n`` as the number of available
   actions in the whole batch, not per agent and step as its agent acts.

The update-for-update comparison isolates them: ``critic_inputs_next`` equal to
``critic_inputs`` (1), ``sync_target()`` after every update on both sides so that the target
model equals the online one at each ``learn`` (2), and ``epsilon = 0`` (3). Everything else (the
TD(lambda) targets, masks for padding and availability, the counterfactual baseline, RMSprop and
clipping) is then compared to 1e-6.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from parl.algorithms import COMA
from parl.algorithms.coma import exploration_probs, td_lambda_targets

from .marl_nets import ComaDims, ComaModel, coma_batch, load_published
from .test_parl_parity import ATOL, UPDATES, cpu_only, parl_wheel  # noqa: F401

DIMS = ComaDims()
CONFIG = {
    "grad_norm_clip": 1.0,
    "actor_lr": 1e-3,
    "critic_lr": 5e-3,
    "gamma": 0.9,
    "td_lambda": 0.8,
}


@pytest.fixture(scope="module")
def published_coma(parl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> type:  # noqa: F811
    """PARL 2.2.1's COMA class."""
    return load_published(parl_wheel, tmp_path_factory.mktemp("parl-coma"), "coma", "COMA")


def _model() -> ComaModel:
    torch.manual_seed(0)
    return ComaModel(DIMS.actor_dim, DIMS.critic_dim, DIMS.n_actions)


def _pair(published_coma: type) -> tuple[Any, COMA]:
    model = _model()
    args = (DIMS.n_actions, DIMS.n_agents)
    return published_coma(copy.deepcopy(model), *args, **CONFIG), COMA(
        model, *args, **CONFIG, device="cpu"
    )


def _max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max(float((sa[k] - sb[k]).abs().max()) for k in sa)


def _learn(alg: Any, batch: dict[str, torch.Tensor], epsilon: float, seed: int) -> None:
    torch.manual_seed(seed)
    alg.learn({key: value.clone() for key, value in batch.items()}, epsilon)


def _parity_batch(gen: torch.Generator) -> dict[str, torch.Tensor]:
    batch = coma_batch(gen, DIMS)
    batch["critic_inputs_next"] = batch["critic_inputs"].clone()  # fault 1 isolated
    return batch


def test_coma_matches_published_parl_where_parl_is_right(
    published_coma: type,
    cpu_only: None,  # noqa: F811
) -> None:
    theirs, ours = _pair(published_coma)
    gen = torch.Generator().manual_seed(7)
    for step in range(UPDATES):
        batch = _parity_batch(gen)
        _learn(theirs, batch, 0.0, 100 + step)  # epsilon 0: fault 3 isolated
        _learn(ours, batch, 0.0, 100 + step)
        theirs.sync_target()  # target == online at every learn: fault 2 isolated
        ours.sync_target()
    diffs = {
        name: _max_diff(getattr(theirs, name), getattr(ours, name))
        for name in ("model", "target_model")
    }
    assert max(diffs.values()) <= ATOL, diffs
    assert _max_diff(_model(), ours.model) > 1e-3  # the updates moved the weights

    inputs = torch.randn(DIMS.n_agents, DIMS.actor_dim, generator=gen)
    theirs_prob, theirs_h = theirs.predict(inputs, theirs.init_hidden(1)[0])
    ours_prob, ours_h = ours.predict(inputs, ours.init_hidden(1)[0])
    torch.testing.assert_close(ours_prob, theirs_prob, rtol=0.0, atol=ATOL)
    torch.testing.assert_close(ours_h, theirs_h, rtol=0.0, atol=ATOL)


def test_td_lambda_targets_match_published_parl_forward_view(
    published_coma: type,
    cpu_only: None,  # noqa: F811
) -> None:
    """PARL's n-step sums (quadratic in the episode length) and the one-pass recursion here."""
    theirs, _ = _pair(published_coma)
    batch = coma_batch(torch.Generator().manual_seed(5), DIMS)
    next_q = torch.randn(DIMS.episodes, DIMS.steps, DIMS.n_agents)
    expected = theirs._cal_td_target(batch, next_q)
    mask = (1.0 - batch["padded"]).expand(-1, -1, DIMS.n_agents)
    not_over = (1.0 - batch["isover"]).expand_as(mask)
    reward = batch["r"].expand_as(mask)
    ours = td_lambda_targets(reward, next_q, not_over, mask, CONFIG["gamma"], CONFIG["td_lambda"])
    torch.testing.assert_close(ours, expected, rtol=1e-6, atol=ATOL)


def test_coma_bootstraps_from_the_next_critic_inputs_where_published_parl_ignores_them(
    published_coma: type,
    cpu_only: None,  # noqa: F811
) -> None:
    """Fault 1: two batches that differ only in ``critic_inputs_next``."""
    batch = coma_batch(torch.Generator().manual_seed(9), DIMS)
    other = dict(batch, critic_inputs_next=batch["critic_inputs_next"] + 1.0)
    results: dict[str, list[torch.nn.Module]] = {"theirs": [], "ours": []}
    for candidate in (batch, other):
        theirs, ours = _pair(published_coma)
        _learn(theirs, candidate, 0.0, 1)
        _learn(ours, candidate, 0.0, 1)
        results["theirs"].append(theirs.model)
        results["ours"].append(ours.model)
    assert _max_diff(*results["theirs"]) == 0.0
    assert _max_diff(*results["ours"]) > 1e-4


def test_coma_bootstraps_from_the_target_critic_where_published_parl_uses_the_online_one(
    published_coma: type,
    cpu_only: None,  # noqa: F811
) -> None:
    """Fault 2: the same learn with a perturbed target model."""
    batch = _parity_batch(torch.Generator().manual_seed(9))
    results: dict[str, list[torch.nn.Module]] = {"theirs": [], "ours": []}
    for perturb in (False, True):
        theirs, ours = _pair(published_coma)
        if perturb:
            for alg in (theirs, ours):
                with torch.no_grad():
                    for param in alg.target_model.parameters():
                        param.add_(0.1)
        _learn(theirs, batch, 0.0, 1)
        _learn(ours, batch, 0.0, 1)
        results["theirs"].append(theirs.model)
        results["ours"].append(ours.model)
    assert _max_diff(*results["theirs"]) == 0.0
    assert _max_diff(*results["ours"]) > 1e-4


def test_coma_learns_from_the_distribution_its_agents_act_with_where_published_parl_does_not(
    published_coma: type,
    cpu_only: None,  # noqa: F811
) -> None:
    """Fault 3: with ``epsilon > 0``, each row here is ``(1 - eps) * pi + eps / n_available``
    on the available actions, renormalised: PARL's agent samples from exactly that. PARL's
    learner divides ``eps`` by the available actions of the whole batch instead."""
    theirs, _ = _pair(published_coma)
    with torch.no_grad():  # a nearly greedy policy: exploration is then most of the mass
        theirs.model.actor_model.fc2.weight.mul_(50.0)
    batch = coma_batch(torch.Generator().manual_seed(4), DIMS)
    epsilon = 0.5
    theirs.train_rnn_h = theirs.init_hidden(DIMS.episodes)
    with torch.no_grad():
        theirs_probs = theirs._get_actor_output(batch, epsilon)
        hidden, pis = theirs.init_hidden(DIMS.episodes), []
        for t in range(DIMS.steps):
            logits, hidden = theirs.model.policy(
                batch["actor_inputs"][:, t].reshape(-1, DIMS.actor_dim), hidden
            )
            pis.append(torch.softmax(logits.view(DIMS.episodes, DIMS.n_agents, -1), dim=-1))
    pi = torch.stack(pis, dim=1)
    avail = batch["avail_u"]
    # what PARL's agent samples from, row by row
    acting = (1 - epsilon) * pi + epsilon / avail.sum(-1, keepdim=True).clamp(min=1)
    acting = acting * avail
    real = avail.sum(-1, keepdim=True) > 0
    acting = torch.where(real, acting / acting.sum(-1, keepdim=True).clamp(min=1e-12), 0.0)
    torch.testing.assert_close(exploration_probs(pi, avail, epsilon), acting)
    assert float((theirs_probs - acting).abs().max()) > 0.1
