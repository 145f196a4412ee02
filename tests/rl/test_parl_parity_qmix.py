"""QMIX against PARL 2.2.1's published ``parl/algorithms/torch/qmix.py``.

Both start from the same weights and learn from the same episode batches, torch's generator
reseeded before every call: same losses, TD errors and parameters (online and target) after five
updates, with and without Double Q and gradient clipping, and the same greedy actions after.

One deliberate deviation, shown by the last test: PARL masks out each episode's terminal
transition, so its loss never sees the reward of an episode's last step; QMIX here learns it.
The parity batches therefore hold episodes that do not end before their last stored step, the
case where PARL's mask and ours agree.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from parl.algorithms import QMIX

from .conftest import REPO_ROOT
from .marl_nets import Mixer, QmixDims, RNNAgent, load_published, qmix_batch
from .test_parl_parity import ATOL, LOSS_RTOL, UPDATES, cpu_only, parl_wheel  # noqa: F401

DIMS = QmixDims()


@pytest.fixture(scope="module")
def published_qmix(parl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> type:  # noqa: F811
    """PARL 2.2.1's QMIX class."""
    return load_published(parl_wheel, tmp_path_factory.mktemp("parl-qmix"), "qmix", "QMIX")


def _models() -> tuple[RNNAgent, Mixer]:
    torch.manual_seed(0)
    return RNNAgent(DIMS.obs_dim, DIMS.n_actions), Mixer(DIMS.n_agents, DIMS.state_dim)


def _pair(published_qmix: type, **kwargs: Any) -> tuple[Any, QMIX]:
    agent, mixer = _models()
    theirs = published_qmix(copy.deepcopy(agent), copy.deepcopy(mixer), **kwargs)
    ours = QMIX(agent, mixer, **kwargs, device="cpu")
    return theirs, ours


def _max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max(float((sa[k] - sb[k]).abs().max()) for k in sa)


def _sync_theirs(theirs: Any) -> None:
    """What PARL's QMIX agent does every ``update_target_interval`` learns."""
    theirs.target_agent_model.update(theirs.agent_model)
    theirs.target_qmixer_model.update(theirs.qmixer_model)


MODELS = ("agent_model", "qmixer_model", "target_agent_model", "target_qmixer_model")
CONFIGS = {
    "double_q": {"double_q": True, "gamma": 0.9, "lr": 0.005},
    "max_q-clip": {"double_q": False, "gamma": 0.9, "lr": 0.005, "clip_grad_norm": 0.5},
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=list(CONFIGS))
def test_qmix_matches_published_parl_update_for_update(
    published_qmix: type,
    cpu_only: None,  # noqa: F811
    config: dict[str, Any],
) -> None:
    theirs, ours = _pair(published_qmix, **config)
    gen = torch.Generator().manual_seed(7)
    for step in range(UPDATES):
        batch = qmix_batch(gen, DIMS)
        torch.manual_seed(100 + step)
        theirs_out = theirs.learn(*(t.clone() for t in batch))
        torch.manual_seed(100 + step)
        ours_out = ours.learn(*(t.clone() for t in batch))
        for theirs_value, ours_value in zip(theirs_out, ours_out, strict=True):
            assert ours_value == pytest.approx(theirs_value, rel=LOSS_RTOL, abs=ATOL)
        if step == 2:  # the target networks then differ from the initial weights
            _sync_theirs(theirs)
            ours.sync_target()
    diffs = {name: _max_diff(getattr(theirs, name), getattr(ours, name)) for name in MODELS}
    assert max(diffs.values()) <= ATOL, diffs
    agent, _ = _models()
    assert _max_diff(agent, ours.agent_model) > 1e-3  # the updates moved the weights

    # greedy actions of the trained networks, as PARL's agent takes them
    state, actions, reward, terminated, obs, avail, filled = qmix_batch(gen, DIMS)
    theirs._init_hidden_states(1)
    hidden = ours.init_hidden(1)
    for t in range(DIMS.steps):
        with torch.no_grad():
            q, theirs.hidden_states = theirs.predict_local_q(obs[0, t], theirs.hidden_states)
        q[avail[0, t] == 0] = -1e10
        ours_actions, hidden = ours.predict(obs[0, t], avail[0, t], hidden)
        assert torch.equal(ours_actions, q.max(dim=1).indices)


def test_qmix_learns_the_terminal_transition_where_published_parl_masks_it_out(
    published_qmix: type,
    cpu_only: None,  # noqa: F811
) -> None:
    """A deliberate deviation. PARL's mask ``(1 - filled) * (1 - terminated)`` drops the step
    on which an episode ends, so its loss does not change with that step's reward (in SMAC, the
    win bonus). Here that transition counts, with the reward alone as its target."""
    batch = list(qmix_batch(torch.Generator().manual_seed(3), DIMS, lengths=[6, 3, 4, 2]))
    changed = [t.clone() for t in batch]
    changed[2][1, 2] += 10.0  # the reward of episode 1's terminal step (its third)
    losses: dict[str, list[float]] = {"theirs": [], "ours": []}
    for rewards in (batch, changed):
        theirs, ours = _pair(published_qmix, gamma=0.9, lr=0.005)
        losses["theirs"].append(theirs.learn(*(t.clone() for t in rewards))[0])
        losses["ours"].append(ours.learn(*(t.clone() for t in rewards))[0])
    assert losses["theirs"][0] == losses["theirs"][1]
    assert losses["ours"][1] > losses["ours"][0] + 1.0


@pytest.mark.parametrize("network", ["RNNModel", "FCModel"])
def test_qmix_with_the_examples_unrolled_networks_matches_published_parl(
    published_qmix: type,
    cpu_only: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    network: str,
) -> None:
    """The example's networks have ``unroll``, which ``learn`` uses where PARL calls
    ``forward`` once per step: the updates agree all the same."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples" / "QMIX"))
    monkeypatch.delitem(sys.modules, "qmix_model", raising=False)
    import qmix_model

    torch.manual_seed(0)
    agent = getattr(qmix_model, network)(DIMS.obs_dim, DIMS.n_actions, rnn_hidden_dim=16)
    mixer = qmix_model.QMixerModel(DIMS.n_agents, DIMS.state_dim, mixing_embed_dim=8)
    config = CONFIGS["max_q-clip"]
    theirs = published_qmix(copy.deepcopy(agent), copy.deepcopy(mixer), **config)
    ours = QMIX(agent, mixer, **config, device="cpu")
    gen = torch.Generator().manual_seed(5)
    for _ in range(UPDATES):
        batch = qmix_batch(gen, DIMS)
        theirs_out = theirs.learn(*(t.clone() for t in batch))
        ours_out = ours.learn(*(t.clone() for t in batch))
        assert ours_out == pytest.approx(theirs_out, rel=LOSS_RTOL, abs=ATOL)
    diffs = {name: _max_diff(getattr(theirs, name), getattr(ours, name)) for name in MODELS}
    assert max(diffs.values()) <= ATOL, diffs
