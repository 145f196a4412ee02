"""Decision Transformer and its trajectory model: masking, imitation, determinism, checkpoints
and argument checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import parl
from parl.algorithms import DecisionTransformer
from parl.algorithms.dt import warmup_factor
from parl.algorithms.trajectory_model import TrajectoryModel
from parl.utils import TrajectorySampler

STATE_DIM, ACT_DIM, CONTEXT = 2, 1, 4


def make_model(seed: int = 0, **kwargs: Any) -> TrajectoryModel:
    torch.manual_seed(seed)
    options: dict[str, Any] = {
        "hidden_size": 32,
        "max_length": CONTEXT,
        "max_ep_len": 16,
        "n_layer": 1,
        "dropout": 0.0,
    }
    return TrajectoryModel(STATE_DIM, ACT_DIM, **{**options, **kwargs})


def expert_episodes(seed: int, count: int = 20, length: int = 12) -> list[dict[str, np.ndarray]]:
    """An expert whose action is ``0.8 tanh(s_0 - s_1)``; the reward is its first state."""
    rng = np.random.default_rng(seed)
    result = []
    for _ in range(count):
        states = rng.normal(size=(length, STATE_DIM)).astype(np.float32)
        result.append(
            {
                "observations": states,
                "actions": 0.8 * np.tanh(states[:, :1] - states[:, 1:]),
                "rewards": states[:, 0].copy(),
                "dones": np.eye(length)[-1],
            }
        )
    return result


class DTAgent(parl.Agent):
    def learn(self, batch: Any) -> float:
        return float(self.alg.learn(*batch.to_tensors(self.device)))

    def predict(self, states: np.ndarray, rtg: np.ndarray) -> np.ndarray:
        steps = states.shape[0]
        action = self.alg.predict(
            self.to_tensor(states),
            torch.zeros(steps, ACT_DIM),
            torch.zeros(steps),
            self.to_tensor(rtg).reshape(1, -1),
            torch.arange(steps).reshape(1, -1),
        )
        return self.to_numpy(action)


def train(seed: int, updates: int) -> tuple[DTAgent, TrajectorySampler, list[float]]:
    sampler = TrajectorySampler(expert_episodes(0), context=CONTEXT, max_ep_len=16, seed=seed)
    alg = DecisionTransformer(make_model(seed), 3e-3, 10, 1e-4, device="cpu")
    agent = DTAgent(alg)
    torch.manual_seed(seed)
    losses = [agent.learn(sampler.sample(32)) for _ in range(updates)]
    return agent, sampler, losses


def test_imitates_a_small_expert_dataset(single_thread: None) -> None:
    agent, sampler, losses = train(seed=0, updates=100)
    # the expert's actions have a variance of about 0.23: the loss of predicting their mean
    assert np.mean(losses[:5]) > 0.15 and np.mean(losses[-10:]) < 0.01, losses[::10]
    states = np.random.default_rng(5).normal(size=(3, STATE_DIM)).astype(np.float32)
    action = agent.predict((states - sampler.state_mean) / sampler.state_std, np.zeros(3))
    np.testing.assert_allclose(action, 0.8 * np.tanh(states[-1, :1] - states[-1, 1:]), atol=0.1)


def test_same_seed_same_result(single_thread: None) -> None:
    (first, _, first_losses), (second, _, second_losses) = train(1, 5), train(1, 5)
    assert first_losses == second_losses
    for name, value in second.get_all_weights().items():
        np.testing.assert_array_equal(value, first.get_all_weights()[name])
    assert train(2, 5)[2] != first_losses


def test_save_restore_gives_identical_actions_and_schedule(tmp_path: Path) -> None:
    agent, _, _ = train(seed=1, updates=3)
    path = agent.save(tmp_path / "dt.ckpt")
    fresh = DTAgent(DecisionTransformer(make_model(seed=7), 3e-3, 10, 1e-4, device="cpu"))
    states, rtg = np.ones((2, STATE_DIM), np.float32), np.ones(2, np.float32)
    assert not np.array_equal(fresh.predict(states, rtg), agent.predict(states, rtg))
    fresh.restore(path)
    np.testing.assert_array_equal(fresh.predict(states, rtg), agent.predict(states, rtg))
    # a training checkpoint holds the warmup's progress too
    resumed = DTAgent(DecisionTransformer(make_model(seed=7), 3e-3, 10, 1e-4, device="cpu"))
    resumed.restore_checkpoint(agent.save_checkpoint(tmp_path / "train.ckpt"))
    assert resumed.alg.scheduler.last_epoch == 3
    assert resumed.alg.optimizer.param_groups[0]["lr"] == pytest.approx(3e-3 * 4 / 10)


@pytest.mark.parametrize("padding", ["left", "right"])
def test_padding_does_not_change_the_real_steps(padding: str) -> None:
    """Padded steps are masked out as keys: the predictions for the real steps of a window
    equal those of the same steps alone."""
    model = make_model(seed=3, max_length=None, n_layer=2, n_head=2).eval()
    gen = torch.Generator().manual_seed(0)
    states, actions = torch.randn(1, 3, STATE_DIM, generator=gen), torch.randn(1, 3, 1)
    rtg, timesteps = torch.randn(1, 3, 1, generator=gen), torch.tensor([[4, 5, 6]])
    alone = model(states, actions, None, rtg, timesteps)[1]

    def pad(t: torch.Tensor, fill: float) -> torch.Tensor:
        extra = torch.full((1, 2, *t.shape[2:]), fill, dtype=t.dtype)
        return torch.cat([extra, t] if padding == "left" else [t, extra], dim=1)

    mask = pad(torch.ones(1, 3), 0.0)
    padded = model(
        pad(states, 3.0), pad(actions, -10.0), None, pad(rtg, 0.0), pad(timesteps, 0), mask
    )[1]
    real = padded[:, 2:] if padding == "left" else padded[:, :3]
    torch.testing.assert_close(real, alone, rtol=0, atol=1e-6)


def test_each_action_depends_only_on_the_past_and_its_state() -> None:
    model = make_model(seed=4).eval()
    states = torch.randn(1, CONTEXT, STATE_DIM)
    actions, rtg = torch.randn(1, CONTEXT, ACT_DIM), torch.randn(1, CONTEXT, 1)
    timesteps = torch.arange(CONTEXT).reshape(1, -1)
    before = model(states, actions, None, rtg, timesteps)[1]
    later, own = actions.clone(), states.clone()
    later[:, 2] += 1.0  # a_2 is seen by the prediction of a_3 only
    own[:, 1] += 1.0  # s_1 changes the predictions from a_1 on
    after_action = model(states, later, None, rtg, timesteps)[1]
    after_state = model(own, actions, None, rtg, timesteps)[1]
    torch.testing.assert_close(after_action[:, :3], before[:, :3], rtol=0, atol=0)
    assert not torch.allclose(after_action[:, 3], before[:, 3])
    torch.testing.assert_close(after_state[:, :1], before[:, :1], rtol=0, atol=0)
    assert not torch.allclose(after_state[:, 1], before[:, 1])


def test_warmup_factor() -> None:
    assert [warmup_factor(step, 4) for step in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_bad_arguments_and_inputs_are_named() -> None:
    model = make_model()
    with pytest.raises(ValueError, match="warmup_steps must be an int >= 1, got 0"):
        DecisionTransformer(model, 1e-4, 0, 1e-4)
    with pytest.raises(ValueError, match="learning_rate must be a float > 0"):
        DecisionTransformer(model, -1.0, 10, 1e-4)
    with pytest.raises(TypeError, match=r"define get_action\(\)"):
        DecisionTransformer(torch.nn.Linear(2, 2), 1e-4, 10, 1e-4)
    with pytest.raises(ValueError, match="n_head .3. must divide hidden_size .32."):
        make_model(n_head=3)
    with pytest.raises(ValueError, match="activation must be one of"):
        make_model(activation="swish")
    alg = DecisionTransformer(model, 1e-4, 10, 1e-4, device="cpu")
    batch = list(TrajectorySampler(expert_episodes(0, 2), context=CONTEXT).sample(2).to_tensors())
    batch[4] = batch[4][:, :-1]
    with pytest.raises(ValueError, match=r"rtg must have one more step than states \(K \+ 1 = 5\)"):
        alg.learn(*batch)
