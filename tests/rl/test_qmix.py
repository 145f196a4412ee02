"""QMIX: learning a small cooperative game, determinism, checkpoints, PARL's agent-side calls
and errors on bad episode batches."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import parl
from parl.algorithms import QMIX

from .conftest import REPO_ROOT
from .marl_nets import (
    CoordinationGame,
    Mixer,
    QmixDims,
    RNNAgent,
    play_episode,
    qmix_batch,
    stack_episodes,
)

GAME = CoordinationGame


def make_qmix(seed: int = 0, **kwargs: object) -> QMIX:
    torch.manual_seed(seed)
    agent = RNNAgent(GAME.obs_dim, GAME.n_actions)
    mixer = Mixer(GAME.n_agents, GAME.state_dim)
    return QMIX(agent, mixer, device="cpu", **kwargs)  # type: ignore[arg-type]


def greedy(alg: QMIX) -> tuple[float, float, int]:
    """Greedy returns over 10 episodes: ``(return, best return, unavailable actions taken)``."""
    game = GAME(seed=123)
    total = best = 0.0
    bad = 0
    for _ in range(10):
        hidden = alg.init_hidden(1)

        def act(obs: np.ndarray, avail: np.ndarray, last: np.ndarray) -> np.ndarray:
            nonlocal hidden, bad
            actions, hidden = alg.predict(torch.as_tensor(obs), torch.as_tensor(avail), hidden)
            actions = actions.numpy()
            bad += int((avail[np.arange(len(actions)), actions] == 0).sum())
            return actions

        episode = play_episode(game, act)
        total += float(episode["return"])
        best += float(episode["best"])
    return total, best, bad


def train(seed: int, updates: int = 120) -> QMIX:
    """Uniformly random behaviour over the available actions, one update per 16 episodes."""
    alg = make_qmix(seed, lr=0.01, gamma=0.9)
    game, rng = GAME(seed), np.random.default_rng(seed)

    def random_act(obs: np.ndarray, avail: np.ndarray, last: np.ndarray) -> np.ndarray:
        return np.array([rng.choice(np.flatnonzero(row)) for row in avail])

    for update in range(updates):
        batch = stack_episodes([play_episode(game, random_act) for _ in range(16)])
        alg.learn(
            batch["state"], batch["actions"], batch["reward"], batch["terminated"],
            batch["obs"], batch["avail"], batch["filled"],
        )  # fmt: skip
        if update % 10 == 9:
            alg.sync_target()
    return alg


def test_qmix_learns_the_coordination_game_within_the_action_masks(single_thread: None) -> None:
    total, best, bad = greedy(make_qmix())
    assert total < best - 1.0  # the untrained networks do not solve it
    total, best, bad = greedy(train(seed=0))
    assert bad == 0
    assert total == pytest.approx(best)


def test_qmix_same_seed_same_weights(single_thread: None) -> None:
    a, b = train(seed=3, updates=5), train(seed=3, updates=5)
    for (name, x), (_, y) in zip(
        a.get_all_weights().items(), b.get_all_weights().items(), strict=True
    ):
        np.testing.assert_array_equal(x, y, err_msg=name)
    c = train(seed=4, updates=5)
    assert any(
        not np.array_equal(x, y)
        for x, y in zip(a.get_weights().values(), c.get_weights().values(), strict=True)
    )


def test_qmix_save_restore_same_actions(tmp_path: Path, single_thread: None) -> None:
    trained = train(seed=1, updates=10)
    agent = parl.Agent(trained)
    agent.save(tmp_path / "agent.pt")
    agent.save(tmp_path / "mixer.pt", model=trained.qmixer_model)
    fresh = parl.Agent(make_qmix(seed=9))
    fresh.restore(tmp_path / "agent.pt")
    fresh.restore(tmp_path / "mixer.pt", model=fresh.alg.qmixer_model)
    assert greedy(fresh.alg) == greedy(trained)
    obs = torch.randn(GAME.n_agents, GAME.obs_dim)
    avail = torch.ones(GAME.n_agents, GAME.n_actions)
    q_a, _ = trained.predict_local_q(obs, trained.init_hidden(1))
    q_b, _ = fresh.alg.predict_local_q(obs, fresh.alg.init_hidden(1))
    torch.testing.assert_close(q_a, q_b)
    actions_a, _ = trained.predict(obs, avail, trained.init_hidden(1))
    actions_b, _ = fresh.alg.predict(obs, avail, fresh.alg.init_hidden(1))
    assert torch.equal(actions_a, actions_b)


def test_qmix_keeps_parl_agent_side_calls() -> None:
    """PARL's QMIX agent: ``_init_hidden_states``, ``hidden_states``, ``predict_local_q`` and
    the target refresh through the models' ``update``; ``sync_target`` does the same copy."""
    alg = make_qmix()
    alg._init_hidden_states(1)
    assert alg.hidden_states is not None and alg.hidden_states.shape == (1, GAME.n_agents, 16)
    q, alg.hidden_states = alg.predict_local_q(torch.zeros(2, GAME.obs_dim), alg.hidden_states)
    assert q.shape == (GAME.n_agents, GAME.n_actions)
    dims = QmixDims(n_agents=2, obs_dim=GAME.obs_dim, state_dim=GAME.state_dim, n_actions=3)
    alg.learn(*qmix_batch(torch.Generator().manual_seed(0), dims))
    before = {k: v.clone() for k, v in alg.target_agent_model.state_dict().items()}
    alg.target_agent_model.update(alg.agent_model)
    alg.target_qmixer_model.update(alg.qmixer_model)
    for name, value in alg.target_agent_model.state_dict().items():
        torch.testing.assert_close(value, alg.agent_model.state_dict()[name])
    assert any(not torch.equal(before[k], v) for k, v in alg.agent_model.state_dict().items())
    alg.learn(*qmix_batch(torch.Generator().manual_seed(1), dims))
    alg.sync_target()
    for name, value in alg.target_qmixer_model.state_dict().items():
        torch.testing.assert_close(value, alg.qmixer_model.state_dict()[name])


# -- errors ---------------------------------------------------------------------------------
DIMS = QmixDims(n_agents=GAME.n_agents, obs_dim=GAME.obs_dim, state_dim=GAME.state_dim,
                n_actions=GAME.n_actions)  # fmt: skip


def _batch() -> list[torch.Tensor]:
    return list(qmix_batch(torch.Generator().manual_seed(0), DIMS, lengths=[6, 3, 4, 2]))


def test_qmix_rejects_a_wrong_number_of_agents() -> None:
    batch = _batch()
    batch[4] = torch.cat([batch[4], batch[4][:, :, :1]], dim=2)  # obs of 3 agents
    with pytest.raises(ValueError, match="obs_batch holds 3 agents .* n_agents is 2"):
        make_qmix().learn(*batch)


def test_qmix_rejects_actions_outside_the_available_action_mask() -> None:
    batch = _batch()
    batch[5][1, 0, 1] = 0.0
    batch[5][1, 0, 1, (int(batch[1][1, 0, 1]) + 1) % GAME.n_actions] = 1.0
    with pytest.raises(ValueError, match="episode 1, step 0, agent 1 took action"):
        make_qmix().learn(*batch)
    batch = _batch()
    batch[1][0, 0, 0] = GAME.n_actions
    with pytest.raises(ValueError, match=r"outside \[0, 3\)"):
        make_qmix().learn(*batch)


def test_qmix_rejects_episodes_of_mismatched_length() -> None:
    batch = _batch()
    batch[2] = batch[2][:, :-1]  # reward one step short
    with pytest.raises(
        ValueError, match="state_batch is \\(4, 6\\) but reward_batch is \\(4, 5\\)"
    ):
        make_qmix().learn(*batch)
    batch = _batch()
    batch[3] = batch[3].squeeze(-1)
    with pytest.raises(ValueError, match=r"terminated_batch must have shape \(B, T, 1\)"):
        make_qmix().learn(*batch)
    with pytest.raises(ValueError, match="at least 2 steps"):
        make_qmix().learn(*(t[:, :1] for t in _batch()))


def test_qmix_refuses_nan_rewards_and_overflowing_losses_without_a_step() -> None:
    alg = make_qmix()
    before = copy.deepcopy(alg.agent_model.state_dict())
    batch = _batch()
    batch[2][2, 1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"reward_batch\[2, 1, 0\] is nan; the model was not"):
        alg.learn(*batch)
    batch = _batch()
    batch[0][0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"state_batch\[0, 0, 0\] is inf"):
        alg.learn(*batch)
    with torch.no_grad():
        for param in alg.qmixer_model.parameters():
            param.fill_(1e30)
    with pytest.raises(FloatingPointError, match="QMIX.learn: the TD loss is (inf|nan)"):
        alg.learn(*_batch())
    for name, tensor in alg.agent_model.state_dict().items():  # no step was taken
        assert torch.equal(tensor, before[name]), name


@pytest.mark.parametrize(("index", "name"), [(3, "terminated_batch"), (6, "filled_batch")])
def test_qmix_names_a_nan_flag_instead_of_blaming_an_overflow(index: int, name: str) -> None:
    batch = _batch()
    batch[index] = batch[index].float()
    batch[index][1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match=rf"QMIX.learn: {name}\[1, 2, 0\] is nan"):
        make_qmix().learn(*batch)


def test_qmix_rejects_bad_models_and_hyperparameters() -> None:
    agent = RNNAgent(GAME.obs_dim, GAME.n_actions)
    mixer = Mixer(GAME.n_agents, GAME.state_dim)
    del mixer.n_agents
    with pytest.raises(TypeError, match="n_agents"):
        QMIX(agent, mixer)
    with pytest.raises(TypeError, match="init_hidden"):
        QMIX(torch.nn.Linear(2, 2), Mixer(2, 3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gamma"):
        make_qmix(gamma=1.5)
    with pytest.raises(TypeError, match="double_q"):
        make_qmix(double_q="yes")


def test_qmix_optimizer_is_rmsprop_or_adam() -> None:
    assert isinstance(make_qmix().optimizer, torch.optim.RMSprop)  # PARL's
    adam = make_qmix(optimizer="adam")
    assert isinstance(adam.optimizer, torch.optim.Adam)
    owned = {id(p) for group in adam.optimizer.param_groups for p in group["params"]}
    assert owned == {id(p) for p in adam.params}  # the agent network and the mixer
    before = [p.detach().clone() for p in adam.params]
    batch = stack_episodes([play_episode(GAME(0), lambda o, a, last: a.argmax(1))] * 4)
    adam.learn(
        batch["state"], batch["actions"], batch["reward"], batch["terminated"],
        batch["obs"], batch["avail"], batch["filled"],
    )  # fmt: skip
    assert any(not torch.equal(b, p) for b, p in zip(before, adam.params, strict=True))
    with pytest.raises(ValueError, match="optimizer must be one of.*'sgd'"):
        make_qmix(optimizer="sgd")


@pytest.mark.parametrize("network", ["RNNModel", "FCModel"])
def test_an_agent_models_unroll_gives_the_updates_of_its_step_by_step_forward(
    monkeypatch: pytest.MonkeyPatch, single_thread: None, network: str
) -> None:
    """The example's networks have ``unroll`` (whole episodes in one call, the GRU in torch's
    loop): ``learn`` with it takes the update it takes calling ``forward`` step by step, padded
    episodes included."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples" / "QMIX"))
    monkeypatch.delitem(sys.modules, "qmix_model", raising=False)
    import qmix_model

    dims = QmixDims(batch=5, steps=9)
    torch.manual_seed(3)
    agent = getattr(qmix_model, network)(dims.obs_dim, dims.n_actions, rnn_hidden_dim=16)
    mixer = qmix_model.QMixerModel(dims.n_agents, dims.state_dim, mixing_embed_dim=8)
    step_by_step = copy.deepcopy(agent)
    step_by_step.unroll = None  # not callable: QMIX calls forward once per step
    algs = [
        QMIX(model, copy.deepcopy(mixer), clip_grad_norm=10.0, device="cpu")
        for model in (agent, step_by_step)
    ]
    batch = qmix_batch(torch.Generator().manual_seed(4), dims, lengths=[9, 4, 7, 1, 9])
    losses = [alg.learn(*batch) for alg in algs]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    for ours, theirs in zip(agent.parameters(), step_by_step.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    assert any(  # it did learn: the online network left its target
        not torch.equal(p, q)
        for p, q in zip(agent.parameters(), algs[0].target_agent_model.parameters(), strict=True)
    )


def test_an_unroll_of_the_wrong_shape_is_refused() -> None:
    class Flat(RNNAgent):
        def unroll(self, inputs: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
            return torch.zeros(inputs.shape[1], inputs.shape[0], 2)  # steps and rows swapped

    dims = QmixDims()
    alg = QMIX(Flat(dims.obs_dim, dims.n_actions), Mixer(dims.n_agents, dims.state_dim))
    batch = qmix_batch(torch.Generator().manual_seed(0), dims)
    with pytest.raises(
        ValueError, match=r"agent_model.unroll returned Q-values of shape \(12, 6, 2\)"
    ):
        alg.learn(*batch)
