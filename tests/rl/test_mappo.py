"""MAPPO on its own: it learns a cooperative game within seconds, the same seed gives the same
weights, a saved model acts the same after restoring (PopArt statistics included in the
training checkpoint), and bad input raises errors that say what was wrong."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import parl
from parl.algorithms import MAPPO, PopArt

CONTEXTS = 3  # the game's hidden context, seen by both agents
HIDDEN = 32


class Actor(parl.Model):
    def __init__(self, obs_dim: int, act_dim: int | list[int], continuous: bool) -> None:
        super().__init__()
        self.multi_discrete = isinstance(act_dim, list)
        dims = act_dim if isinstance(act_dim, list) else [act_dim]
        self.trunk = nn.Sequential(nn.Linear(obs_dim, HIDDEN), nn.Tanh())
        self.heads = nn.ModuleList(nn.Linear(HIDDEN, n) for n in dims)
        self.log_std = nn.Parameter(torch.full((dims[0],), -0.5)) if continuous else None

    def forward(self, obs: torch.Tensor) -> Any:
        x = self.trunk(obs)
        if self.log_std is not None:
            mean = self.heads[0](x)
            return mean, self.log_std.exp().expand_as(mean)
        logits = [head(x) for head in self.heads]
        return logits if self.multi_discrete else logits[0]


class Critic(parl.Model):
    def __init__(self, cent_dim: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(cent_dim, HIDDEN), nn.Tanh())
        self.v_out = nn.Linear(HIDDEN, 1)

    def forward(self, cent_obs: torch.Tensor) -> torch.Tensor:
        return self.v_out(self.trunk(cent_obs))


class Model(parl.Model):
    def __init__(
        self, obs_dim: int, cent_dim: int, act_dim: int | list[int], continuous: bool = False
    ) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.actor = Actor(obs_dim, act_dim, continuous)
        self.critic = Critic(cent_dim)

    def policy(self, obs: torch.Tensor) -> Any:
        return self.actor(obs)

    def value(self, cent_obs: torch.Tensor) -> torch.Tensor:
        return self.critic(cent_obs)


def _team(kind: str, seed: int, use_popart: bool = True) -> list[MAPPO]:
    torch.manual_seed(seed)
    act_dim: int | list[int] = {"discrete": CONTEXTS, "multidiscrete": [CONTEXTS, 2]}.get(kind, 1)
    continuous = kind == "continuous"
    return [
        MAPPO(
            Model(CONTEXTS, CONTEXTS, act_dim, continuous),
            initial_lr=1e-2,
            entropy_coef=0.0,
            use_popart=use_popart,
            continuous_action=continuous,
            device="cpu",
        )
        for _ in range(2)
    ]


def _rewards(kind: str, context: torch.Tensor, actions: list[torch.Tensor]) -> torch.Tensor:
    """The team's shared reward ``(B, 1)``: agent ``i`` should answer ``(context + i) % 3``
    (and 1 in a multi-discrete action's second component); continuous: ``context - 1 + i /
    2``, in negative squared distance."""
    if kind == "continuous":
        targets = [context.float() - 1.0 + i / 2 for i in range(2)]
        return -sum((a[:, 0] - t) ** 2 for a, t in zip(actions, targets, strict=True))[:, None]
    hits = [actions[i][:, 0] == (context + i) % CONTEXTS for i in range(2)]
    if kind == "multidiscrete":
        hits += [a[:, 1] == 1 for a in actions]
    return torch.stack(hits).all(0).float()[:, None]


def _train(kind: str, seed: int, updates: int, batch: int = 64) -> tuple[list[MAPPO], float]:
    """One-step episodes of the game; returns the team and its greedy mean reward."""
    team = _team(kind, seed)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(updates):
        context = torch.randint(CONTEXTS, (batch,), generator=gen)
        obs = nn.functional.one_hot(context, CONTEXTS).float()
        samples = [alg.sample(obs, obs) for alg in team]
        reward = _rewards(kind, context, [actions for _, actions, _ in samples])
        for alg, (values, actions, log_probs) in zip(team, samples, strict=True):
            returns = reward  # one step: the return is the reward
            baseline = values
            if alg.value_normalizer is not None:
                baseline = alg.value_normalizer.denormalize(values)
            adv = returns - baseline
            adv = (adv - adv.mean()) / (adv.std() + 1e-5)
            for _ in range(4):
                alg.learn(obs, obs, actions, values, returns, log_probs, adv, torch.ones(batch, 1))
    context = torch.arange(CONTEXTS).repeat(10)
    obs = nn.functional.one_hot(context, CONTEXTS).float()
    greedy = [alg.predict(obs) for alg in team]
    return team, float(_rewards(kind, context, greedy).mean())


@pytest.mark.parametrize(
    ("kind", "updates", "target"),
    [("discrete", 40, 1.0), ("multidiscrete", 40, 1.0), ("continuous", 80, -0.05)],
)
def test_mappo_learns_a_cooperative_game_within_seconds(
    kind: str, updates: int, target: float, single_thread: None
) -> None:
    _, score = _train(kind, seed=0, updates=updates)
    assert score >= target, f"{kind}: greedy mean reward {score} after {updates} updates"


def _weights(team: list[MAPPO]) -> list[torch.Tensor]:
    tensors: list[torch.Tensor] = []
    for alg in team:
        tensors += list(alg.model.state_dict().values())
        if alg.value_normalizer is not None:
            tensors += list(alg.value_normalizer.state_dict().values())
    return tensors


def test_same_seed_same_weights(single_thread: None) -> None:
    first, second, other = (_train("discrete", seed, updates=3)[0] for seed in (3, 3, 4))
    assert all(torch.equal(x, y) for x, y in zip(_weights(first), _weights(second), strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(_weights(first), _weights(other), strict=True))


def test_save_restore_gives_the_same_actions_and_popart_statistics(
    tmp_path: Path, single_thread: None
) -> None:
    team, _ = _train("discrete", seed=1, updates=3)
    trained = parl.Agent(team[0])
    trained.save(tmp_path / "model.pt")
    trained.save_checkpoint(tmp_path / "checkpoint.pt")
    fresh = parl.Agent(_team("discrete", seed=9)[0])
    fresh.restore(tmp_path / "model.pt")
    obs = torch.eye(CONTEXTS)
    torch.testing.assert_close(fresh.alg.predict(obs), trained.alg.predict(obs), rtol=0, atol=0)
    torch.manual_seed(2)
    expected = trained.alg.sample(obs, obs)
    torch.manual_seed(2)
    for got, want in zip(fresh.alg.sample(obs, obs), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # the model file holds the networks; the training checkpoint also PopArt's statistics
    resumed = parl.Agent(_team("discrete", seed=9)[0])
    resumed.restore_checkpoint(tmp_path / "checkpoint.pt")
    values = torch.tensor([[0.3], [-1.2]])
    assert resumed.alg.value_normalizer is not None and team[0].value_normalizer is not None
    torch.testing.assert_close(
        resumed.alg.value_normalizer.denormalize(values),
        team[0].value_normalizer.denormalize(values),
    )
    assert resumed.alg.value_normalizer.weight is resumed.alg.model.critic.v_out.weight


def test_parl_import_paths() -> None:
    import parl.algorithms
    from parl.algorithms import mappo, popart

    assert parl.algorithms.MAPPO is mappo.MAPPO and parl.algorithms.PopArt is popart.PopArt
    assert mappo.PopArt is PopArt  # PARL's module defines both
    assert {"MAPPO", "PopArt"} <= set(parl.algorithms.__all__)


# -- bad input ---------------------------------------------------------------------------------
def _batch(rows: int = 8, heads: int = 1) -> dict[str, torch.Tensor]:
    return {
        "share_obs": torch.randn(rows, CONTEXTS),
        "obs": torch.randn(rows, CONTEXTS),
        "actions": torch.zeros(rows, heads),
        "value_preds": torch.zeros(rows, 1),
        "returns": torch.zeros(rows, 1),
        "old_log_probs": torch.zeros(rows, heads),
        "adv_targ": torch.zeros(rows, 1),
        "active_masks": torch.ones(rows, 1),
    }


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"share_obs": torch.randn(7, CONTEXTS)}, r"share_obs has 7 rows and obs 8"),
        ({"value_preds": torch.zeros(8, 2)}, r"value_preds must have shape \(8, 1\).*\(8, 2\)"),
        ({"returns": torch.zeros(4, 1)}, r"returns must have shape \(8, 1\)"),
        ({"adv_targ": torch.zeros(8, 8)}, r"adv_targ must have shape"),
        ({"active_masks": torch.ones(9)}, r"active_masks must have shape \(8, 1\)"),
        ({"actions": torch.zeros(8, 2)}, r"model.policy returns 1 component"),
        ({"actions": torch.zeros(6, 1)}, r"actions has shape \(6, 1\), but obs has 8 rows"),
        ({"actions": torch.full((8, 1), 3)}, r"actions\[:, 0\] holds indices outside \[0, 3\)"),
        ({"actions": torch.full((8, 1), 1.5)}, r"must hold integer action indices"),
        ({"old_log_probs": torch.zeros(8, 3)}, r"old_log_probs have shape \(8, 3\)"),
        ({"obs": np.zeros((8, CONTEXTS), np.float32)}, r"obs must be a torch.Tensor.*to_tensor"),
        ({"obs": torch.zeros(CONTEXTS)}, r"obs must be a batch \(B, dim\)"),
        (
            {"returns": torch.zeros(8, 1).index_fill(0, torch.tensor([5]), float("nan"))},
            r"returns\[5, 0\] is nan; the model was not updated",
        ),
        ({"adv_targ": torch.full((8, 1), float("inf"))}, r"adv_targ\[0, 0\] is inf"),
        ({"share_obs": torch.full((8, CONTEXTS), float("nan"))}, r"share_obs\[0, 0\] is nan"),
        ({"old_log_probs": torch.full((8, 1), float("-inf"))}, r"old_log_probs\[0, 0\] is -inf"),
        ({"active_masks": torch.full((8, 1), float("nan"))}, r"active_masks\[0, 0\] is nan"),
    ],
)
def test_learn_names_the_bad_argument(change: dict[str, Any], match: str) -> None:
    alg = _team("discrete", seed=0)[0]
    batch = _batch() | change
    before = copy.deepcopy(alg.model.state_dict())
    with pytest.raises((ValueError, TypeError), match=match):
        alg.learn(**batch)
    for name, tensor in alg.model.state_dict().items():  # nothing was updated
        assert torch.equal(tensor, before[name]), name


# PARL 2.2.1's keyword names for MAPPO.learn, and ours they stand for
PARL_LEARN_NAMES = {
    "share_obs_batch": "share_obs",
    "obs_batch": "obs",
    "actions_batch": "actions",
    "value_preds_batch": "value_preds",
    "return_batch": "returns",
    "old_action_log_probs_batch": "old_log_probs",
    "adv_targ": "adv_targ",
    "active_masks_batch": "active_masks",
}


def test_learn_with_parls_keyword_names_steps_as_with_ours() -> None:
    batch = _batch()
    ours, theirs = _team("discrete", seed=0)[0], _team("discrete", seed=0)[0]
    expected = ours.learn(**batch)
    got = theirs.learn(**{parl: batch[name] for parl, name in PARL_LEARN_NAMES.items()})
    for a, b in zip(expected, got, strict=True):
        assert torch.equal(a, b)
    after = theirs.model.state_dict()
    for name, tensor in ours.model.state_dict().items():
        assert torch.equal(tensor, after[name]), name
    values = theirs.model.value(batch["share_obs"])
    loss = theirs.cal_value_loss(
        values,
        value_preds_batch=batch["value_preds"],
        return_batch=batch["returns"],
        active_masks_batch=batch["active_masks"],
    )
    assert loss.dim() == 0 and torch.isfinite(loss)


def test_a_parameter_given_under_both_names_is_refused() -> None:
    alg = _team("discrete", seed=0)[0]
    batch = _batch()
    with pytest.raises(TypeError, match=r"'obs' and its other name 'obs_batch'"):
        alg.learn(**batch, obs_batch=batch["obs"])
    positional = [batch[name] for name in ("share_obs", "obs", "actions")]
    with pytest.raises(TypeError, match=r"'actions' and its other name 'actions_batch'"):
        alg.learn(*positional, actions_batch=batch["actions"])


def test_a_loss_that_overflows_is_not_stepped_on() -> None:
    """Finite inputs, but a critic whose outputs overflow: the value loss is inf, and the
    critic keeps its weights (PopArt would otherwise spread the inf into every weight)."""
    alg = _team("discrete", seed=0, use_popart=False)[0]
    with torch.no_grad():
        for param in alg.model.critic.parameters():
            param.fill_(1e38)
    before = copy.deepcopy(alg.model.critic.state_dict())
    with pytest.raises(FloatingPointError, match="MAPPO.learn: the value loss is (inf|nan)"):
        alg.learn(**_batch())
    for name, tensor in alg.model.critic.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def test_a_value_loss_that_overflows_moves_neither_network_nor_popart() -> None:
    """With PopArt (the default) and advantages that would move the actor: the value loss is
    checked before the actor steps, and PopArt's statistics and the critic's output layer it
    rescales are put back."""
    alg = _team("discrete", seed=0)[0]
    assert alg.value_normalizer is not None
    with torch.no_grad():
        for param in alg.model.critic.parameters():
            param.fill_(1e38)
    before = copy.deepcopy(alg.model.state_dict())
    popart = copy.deepcopy(alg.value_normalizer.state_dict())
    batch = _batch() | {"adv_targ": torch.randn(8, 1), "returns": torch.randn(8, 1)}
    with pytest.raises(FloatingPointError, match="MAPPO.learn: the value loss is (inf|nan)"):
        alg.learn(**batch)
    for name, tensor in alg.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    for name, tensor in alg.value_normalizer.state_dict().items():
        assert torch.equal(tensor, popart[name]), name


def test_nan_continuous_actions_are_named_not_blamed_on_an_overflow() -> None:
    alg = _team("continuous", seed=0)[0]
    batch = _batch() | {"actions": torch.zeros(8, 1).index_fill(0, torch.tensor([3]), torch.nan)}
    with pytest.raises(ValueError, match=r"MAPPO.learn: actions\[3, 0\] is nan"):
        alg.learn(**batch)


def test_bad_models_and_settings_are_refused_at_construction() -> None:
    class NoCritic(parl.Model):
        def __init__(self) -> None:
            super().__init__()
            self.actor = nn.Linear(2, 2)

        def policy(self, obs: torch.Tensor) -> torch.Tensor:
            return self.actor(obs)

        def value(self, obs: torch.Tensor) -> torch.Tensor:
            return obs[:, :1]

    with pytest.raises(TypeError, match=r"needs model.critic"):
        MAPPO(NoCritic(), device="cpu")
    model = Model(CONTEXTS, CONTEXTS, CONTEXTS)
    model.critic.v_out = nn.Linear(HIDDEN, 2)  # type: ignore[assignment]
    with pytest.raises(TypeError, match=r"critic.v_out.*nn.Linear\(hidden, 1\).*use_popart=False"):
        MAPPO(model, device="cpu")
    MAPPO(model, use_popart=False, device="cpu")  # without PopArt any critic will do
    with pytest.raises(ValueError, match=r"clip_param must be a float > 0"):
        MAPPO(Model(CONTEXTS, CONTEXTS, CONTEXTS), clip_param=0.0, device="cpu")
    with pytest.raises(TypeError, match=r"use_popart must be True or False"):
        MAPPO(Model(CONTEXTS, CONTEXTS, CONTEXTS), use_popart="yes", device="cpu")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"PopArt: weight must be"):
        PopArt(None, None)  # type: ignore[arg-type]


def test_sample_checks_its_inputs_and_policy_kinds() -> None:
    discrete = _team("discrete", seed=0)[0]
    with pytest.raises(ValueError, match=r"cent_obs has 5 rows and obs 4"):
        discrete.sample(torch.zeros(5, CONTEXTS), torch.zeros(4, CONTEXTS))
    gaussian_model = _team("continuous", seed=0)[0].model
    wrong = MAPPO(gaussian_model, device="cpu")  # a (mean, std) policy without continuous_action
    obs = torch.zeros(4, CONTEXTS)
    with pytest.raises(TypeError, match=r"continuous_action=True"):
        wrong.sample(obs, obs)
    logits = MAPPO(Model(CONTEXTS, CONTEXTS, CONTEXTS), continuous_action=True, device="cpu")
    with pytest.raises(TypeError, match=r"must return \(mean, std\)"):
        logits.sample(obs, obs)
