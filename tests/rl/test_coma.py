"""COMA: learning a small cooperative game on-policy, the TD(lambda) targets and exploration
mixture by hand, determinism, checkpoints and errors on bad batches."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import parl
from parl.algorithms import COMA
from parl.algorithms.coma import exploration_probs, td_lambda_targets

from .marl_nets import (
    ComaDims,
    ComaModel,
    CoordinationGame,
    coma_batch,
    coma_inputs,
    play_episode,
    stack_episodes,
)

GAME = CoordinationGame
N, A = GAME.n_agents, GAME.n_actions
ACTOR_DIM = GAME.obs_dim + A
CRITIC_DIM = GAME.obs_dim + GAME.state_dim + 2 * N * A + N


def make_coma(seed: int = 0, **kwargs: object) -> COMA:
    torch.manual_seed(seed)
    config: dict = {"actor_lr": 5e-3, "critic_lr": 5e-3, "gamma": 0.9, "grad_norm_clip": 10.0}
    config.update(kwargs)
    return COMA(ComaModel(ACTOR_DIM, CRITIC_DIM, A), A, N, device="cpu", **config)


def policy(
    alg: COMA, epsilon: float, gen: torch.Generator | None
) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """An ``act`` for ``play_episode``: samples from the exploration mixture (greedy when
    ``gen`` is None), carrying the agents' hidden states across the episode's steps."""
    hidden = alg.init_hidden(1)[0]

    def act(obs: np.ndarray, avail: np.ndarray, last: np.ndarray) -> np.ndarray:
        nonlocal hidden
        last_onehot = np.zeros((N, A), np.float32)
        if last[0] >= 0:
            last_onehot[np.arange(N), last] = 1.0
        inputs = torch.as_tensor(np.concatenate([obs, last_onehot], axis=1))
        probs, hidden = alg.predict(inputs, hidden)
        probs = exploration_probs(probs, torch.as_tensor(avail), epsilon)
        if gen is None:
            return probs.argmax(dim=-1).numpy()
        return torch.multinomial(probs, 1, generator=gen).squeeze(-1).numpy()

    return act


def greedy(alg: COMA) -> tuple[float, float]:
    game = GAME(seed=123)
    episodes = [play_episode(game, policy(alg, 0.0, None)) for _ in range(10)]
    return sum(float(e["return"]) for e in episodes), sum(float(e["best"]) for e in episodes)


def train(seed: int, iterations: int = 100) -> COMA:
    alg = make_coma(seed)
    game, gen = GAME(seed), torch.Generator().manual_seed(seed)
    for iteration in range(iterations):
        epsilon = max(0.05, 0.5 - iteration / 100)
        episodes = [play_episode(game, policy(alg, epsilon, gen)) for _ in range(8)]
        alg.learn(coma_inputs(stack_episodes(episodes), A), epsilon)
        if iteration % 5 == 4:
            alg.sync_target()
    return alg


def test_coma_learns_the_coordination_game(single_thread: None) -> None:
    total, best = greedy(make_coma())
    assert total < best - 1.0
    total, best = greedy(train(seed=0))
    assert total == pytest.approx(best)


def test_coma_same_seed_same_weights(single_thread: None) -> None:
    a, b = train(seed=3, iterations=5), train(seed=3, iterations=5)
    for (name, x), (_, y) in zip(
        a.get_all_weights().items(), b.get_all_weights().items(), strict=True
    ):
        np.testing.assert_array_equal(x, y, err_msg=name)
    c = train(seed=4, iterations=5)
    assert any(
        not np.array_equal(x, y)
        for x, y in zip(a.get_weights().values(), c.get_weights().values(), strict=True)
    )


def test_coma_save_restore_same_actions(tmp_path: Path, single_thread: None) -> None:
    trained = parl.Agent(train(seed=1, iterations=10))
    trained.save(tmp_path / "coma.pt")
    fresh = parl.Agent(make_coma(seed=9))
    fresh.restore(tmp_path / "coma.pt")
    inputs = torch.randn(N, ACTOR_DIM)
    ours = trained.alg.predict(inputs, trained.alg.init_hidden(1)[0])
    restored = fresh.alg.predict(inputs, fresh.alg.init_hidden(1)[0])
    torch.testing.assert_close(restored, ours)
    assert greedy(fresh.alg) == greedy(trained.alg)


def test_td_lambda_targets_by_hand() -> None:
    """One episode of three steps (the last terminal) and one padding step."""
    gamma, lam = 0.5, 0.5
    reward = torch.tensor([[1.0, 2.0, 4.0, 0.0]])
    next_q = torch.tensor([[10.0, 20.0, 40.0, 0.0]])  # Q(s_{t+1}, u_{t+1})
    not_over = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    g2 = 4.0  # terminal: the reward alone
    g1 = 2.0 + gamma * ((1 - lam) * 20.0 + lam * g2)  # 2 + 0.5 * (10 + 2) = 8
    g0 = 1.0 + gamma * ((1 - lam) * 10.0 + lam * g1)  # 1 + 0.5 * (5 + 4) = 5.5
    expected = torch.tensor([[g0, g1, g2, 0.0]])
    torch.testing.assert_close(
        td_lambda_targets(reward, next_q, not_over, mask, gamma, lam), expected
    )
    # lambda = 0: one-step TD targets
    one_step = reward + gamma * not_over * next_q
    torch.testing.assert_close(
        td_lambda_targets(reward, next_q, not_over, mask, gamma, 0.0), one_step * mask
    )


def test_exploration_probs_by_hand() -> None:
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.2, 0.3, 0.5]])
    avail = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    # row 0: 0.5 * (0.7, 0.2) + 0.5 / 2 = (0.6, 0.35), renormalised over 0.95
    expected = torch.tensor([[0.6 / 0.95, 0.35 / 0.95, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(exploration_probs(probs, avail, 0.5), expected)


# -- errors ---------------------------------------------------------------------------------
DIMS = ComaDims()


def _alg() -> COMA:
    torch.manual_seed(0)
    model = ComaModel(DIMS.actor_dim, DIMS.critic_dim, DIMS.n_actions)
    return COMA(model, DIMS.n_actions, DIMS.n_agents, device="cpu")


def _batch() -> dict[str, torch.Tensor]:
    return coma_batch(torch.Generator().manual_seed(0), DIMS)


def test_coma_rejects_a_wrong_number_of_agents() -> None:
    batch = _batch()
    batch["actor_inputs"] = torch.cat([batch["actor_inputs"]] * 2, dim=2)
    with pytest.raises(ValueError, match=r"actor_inputs'\] holds 4 agents .* n_agents is 2"):
        _alg().learn(batch, 0.1)


def test_coma_rejects_actions_outside_the_available_action_mask() -> None:
    batch = _batch()
    taken = int(batch["u"][0, 1, 1, 0])
    batch["avail_u"][0, 1, 1] = 1.0
    batch["avail_u"][0, 1, 1, taken] = 0.0
    with pytest.raises(ValueError, match="episode 0, step 1, agent 1 took"):
        _alg().learn(batch, 0.1)


def test_coma_rejects_arrays_and_fractional_actions() -> None:
    batch = _batch()
    batch["avail_u"] = batch["avail_u"].numpy()  # type: ignore[assignment]
    with pytest.raises(TypeError, match=r"batch\['avail_u'\] must be a torch.Tensor, got ndarray"):
        _alg().learn(batch, 0.1)
    batch = _batch()
    batch["u"] = batch["u"].float() + 0.5  # not truncated into other actions
    with pytest.raises(ValueError, match="integer action indices"):
        _alg().learn(batch, 0.1)


def test_coma_rejects_mismatched_episode_lengths_and_missing_keys() -> None:
    batch = _batch()
    batch["isover"] = batch["isover"][:, :-1]
    with pytest.raises(ValueError, match=r"batch\['isover'\] must be \(E, T, 1\) .* \(3, 5\)"):
        _alg().learn(batch, 0.1)
    batch = _batch()
    del batch["critic_inputs_next"]
    with pytest.raises(ValueError, match="lacks \\['critic_inputs_next'\\]"):
        _alg().learn(batch, 0.1)
    with pytest.raises(ValueError, match="epsilon"):
        _alg().learn(_batch(), 1.5)


def test_coma_refuses_nan_rewards_and_overflowing_losses_without_a_step() -> None:
    alg = _alg()
    before = copy.deepcopy(alg.model.state_dict())
    batch = _batch()
    batch["r"][1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match=r"batch\['r'\]\[1, 2, 0\] is nan; the model was not"):
        alg.learn(batch, 0.1)
    batch = _batch()
    batch["critic_inputs_next"][0, 0, 0, 0] = float("-inf")
    with pytest.raises(ValueError, match=r"critic_inputs_next'\]\[0, 0, 0, 0\] is -inf"):
        alg.learn(batch, 0.1)
    for name, tensor in alg.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    with torch.no_grad():
        for param in alg.model.critic_model.parameters():
            param.fill_(1e30)
    before = copy.deepcopy(alg.model.state_dict())
    with pytest.raises(FloatingPointError, match="COMA.learn: the critic's loss is (inf|nan)"):
        alg.learn(_batch(), 0.1)
    for name, tensor in alg.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def _saturate(alg: COMA, action: int) -> None:
    """Make the actor certain of ``action``: the others' probabilities underflow to 0."""
    fc2 = alg.model.actor_model.fc2
    with torch.no_grad():
        fc2.weight.zero_()
        fc2.bias.zero_()
        fc2.bias[action] = 200.0


@pytest.mark.parametrize("key", ["padded", "isover"])
def test_coma_names_a_nan_flag_instead_of_blaming_an_overflow(key: str) -> None:
    batch = _batch()
    batch[key] = batch[key].float()
    batch[key][1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match=rf"COMA.learn: batch\['{key}'\]\[1, 2, 0\] is nan"):
        _alg().learn(batch, 0.1)


def test_coma_entropy_bonus_keeps_the_weights_finite_on_a_certain_policy() -> None:
    """An available action whose probability underflowed to 0 (a policy certain of another,
    without epsilon): the entropy's gradient there is finite, so no weight becomes NaN."""
    torch.manual_seed(0)
    alg = COMA(
        ComaModel(DIMS.actor_dim, DIMS.critic_dim, DIMS.n_actions), DIMS.n_actions,
        DIMS.n_agents, device="cpu", entropy_coef=0.001,
    )  # fmt: skip
    _saturate(alg, 0)
    batch = _batch()
    batch["u"].zero_()
    batch["avail_u"].fill_(1.0)
    alg.learn(batch, 0.0)
    for name, tensor in alg.model.state_dict().items():
        assert bool(torch.isfinite(tensor).all()), name


def test_coma_an_actor_loss_that_overflows_leaves_the_critic_unstepped_too() -> None:
    """The taken action has probability 0 under ``epsilon = 0``: the actor's loss is infinite,
    and neither network moves (the critic's step would come first)."""
    alg = _alg()
    _saturate(alg, 0)
    batch = _batch()
    batch["u"].fill_(1)
    batch["avail_u"].fill_(1.0)
    before = copy.deepcopy(alg.model.state_dict())
    with pytest.raises(FloatingPointError, match="COMA.learn: the actor's loss is (-?inf|nan)"):
        alg.learn(batch, 0.0)
    for name, tensor in alg.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def test_coma_entropy_bonus_is_the_acting_distributions_entropy_over_real_steps() -> None:
    """``entropy_coef`` subtracts ``coef`` times the mean entropy of the exploration mixture
    over the unpadded steps: by hand, from the same policy outputs."""
    batch, epsilon, coef = _batch(), 0.2, 0.05
    plain = _alg()
    torch.manual_seed(0)  # _alg's weights
    bonus = COMA(
        ComaModel(DIMS.actor_dim, DIMS.critic_dim, DIMS.n_actions), DIMS.n_actions,
        DIMS.n_agents, device="cpu", entropy_coef=coef,
    )  # fmt: skip
    inputs = batch["actor_inputs"]
    episodes, steps = inputs.shape[:2]
    with torch.no_grad():
        hidden, probs = plain.init_hidden(episodes), []
        for t in range(steps):
            logits, hidden = plain.model.policy(inputs[:, t].reshape(-1, inputs.shape[-1]), hidden)
            probs.append(torch.softmax(logits.reshape(episodes, DIMS.n_agents, -1), dim=-1))
        acting = exploration_probs(torch.stack(probs, dim=1), batch["avail_u"], epsilon)
        terms = torch.where(acting > 0, -acting * torch.log(acting), torch.zeros(()))
        mask = (1.0 - batch["padded"]).expand(-1, -1, DIMS.n_agents)
        entropy = (terms.sum(dim=3) * mask).sum() / mask.sum()
    _, loss_plain = plain.learn(batch, epsilon)
    _, loss_bonus = bonus.learn(batch, epsilon)
    assert float(loss_bonus) == pytest.approx(float(loss_plain) - coef * float(entropy), rel=1e-5)
    actors = zip(
        plain.model.actor_model.parameters(), bonus.model.actor_model.parameters(), strict=True
    )
    assert any(not torch.equal(a, b) for a, b in actors)


def test_coma_optimizer_is_rmsprop_or_adam() -> None:
    alg = _alg()
    assert isinstance(alg.actor_optimizer, torch.optim.RMSprop)  # PARL's
    adam = COMA(
        ComaModel(DIMS.actor_dim, DIMS.critic_dim, DIMS.n_actions), DIMS.n_actions,
        DIMS.n_agents, device="cpu", optimizer="adam", actor_lr=3e-4, critic_lr=3e-4,
    )  # fmt: skip
    assert isinstance(adam.actor_optimizer, torch.optim.Adam)
    assert isinstance(adam.critic_optimizer, torch.optim.Adam)
    assert adam.critic_optimizer.param_groups[0]["lr"] == 3e-4
    with pytest.raises(ValueError, match="optimizer must be one of \\['adam', 'rmsprop'\\]"):
        COMA(
            ComaModel(DIMS.actor_dim, DIMS.critic_dim, DIMS.n_actions), DIMS.n_actions,
            DIMS.n_agents, optimizer="sgd",
        )  # fmt: skip
    with pytest.raises(ValueError, match="entropy_coef"):
        COMA(
            ComaModel(DIMS.actor_dim, DIMS.critic_dim, DIMS.n_actions), DIMS.n_actions,
            DIMS.n_agents, entropy_coef=-0.1,
        )  # fmt: skip


def test_coma_rejects_bad_models_and_hyperparameters() -> None:
    model = ComaModel(DIMS.actor_dim, DIMS.critic_dim, DIMS.n_actions)
    with pytest.raises(ValueError, match="td_lambda"):
        COMA(model, DIMS.n_actions, DIMS.n_agents, td_lambda=2.0)
    with pytest.raises(TypeError, match="n_agents"):
        COMA(model, DIMS.n_actions, 2.5)  # type: ignore[arg-type]
    del model.actor_model
    with pytest.raises(TypeError, match="actor_model"):
        COMA(model, DIMS.n_actions, DIMS.n_agents)
