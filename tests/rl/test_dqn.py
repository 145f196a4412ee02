"""DQN and DDQN: losses against hand computation, options, target sync, determinism, and DQN
learning CartPole-v1 to a score."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import parl
from parl.algorithms import DDQN, DQN
from parl.utils import PrioritizedReplayMemory

from .offpolicy_nets import QNet, train_dqn_cartpole


class TableQ(parl.Model):
    """Q(s, a) = table[s, a] for one-hot states: losses are easy to compute by hand."""

    def __init__(self, table: list[list[float]]) -> None:
        super().__init__()
        self.fc = nn.Linear(len(table), len(table[0]), bias=False)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor(table).T)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(obs)


def one_hot(states: list[int], n: int = 3) -> torch.Tensor:
    return torch.eye(n)[states]


def batch() -> tuple[torch.Tensor, ...]:
    obs, next_obs = one_hot([0, 1]), one_hot([1, 2])
    action = torch.tensor([[1], [0]])  # PARL's agents pass columns
    reward = torch.tensor([[1.0], [0.0]])
    terminal = torch.tensor([[0.0], [1.0]])
    return obs, action, reward, next_obs, terminal


def test_dqn_mse_and_huber_losses_by_hand() -> None:
    table = [[0.0, 2.0], [1.0, 5.0], [3.0, -1.0]]
    # targets: s'=1 -> 1 + 0.5 * max(1, 5) = 3.5 ; terminal -> 0.  Q(s,a): 2.0 and 1.0
    # errors: 2 - 3.5 = -1.5 and 1 - 0 = 1
    mse = DQN(TableQ(table), gamma=0.5, lr=0.1, device="cpu")
    assert float(mse.learn(*batch())) == pytest.approx((1.5**2 + 1.0**2) / 2)
    huber = DQN(TableQ(table), gamma=0.5, lr=0.1, loss="huber", device="cpu")
    assert float(huber.learn(*batch())) == pytest.approx(((1.5 - 0.5) + 0.5 * 1.0**2) / 2)
    np.testing.assert_allclose(huber.td_error.numpy(), [1.5, 1.0])
    weighted = DQN(TableQ(table), gamma=0.5, lr=0.1, device="cpu")
    loss = weighted.learn(*batch(), weight=torch.tensor([2.0, 0.0]))
    assert float(loss) == pytest.approx(2.0 * 1.5**2 / 2)
    assert mse.predict(one_hot([0]))[0].tolist() != table[0]  # the step changed the model


def test_ddqn_picks_with_the_online_net_and_values_with_the_target() -> None:
    table = [[0.0, 2.0], [1.0, 5.0], [3.0, -1.0]]
    alg = DDQN(TableQ(table), gamma=0.5, lr=0.1, device="cpu")
    with torch.no_grad():  # online net now prefers action 0 in state 1; the target still 1
        alg.model.fc.weight[:, 1] = torch.tensor([9.0, 0.0])
    # target: 1 + 0.5 * Q_target(1, argmax_online = 0) = 1 + 0.5 * 1 = 1.5; Q(0, 1) = 2
    # (DQN would use max_a Q_target(1, a) = 5 and get 3.5); second row: Q(1, 0) = 9, target 0
    loss = alg.learn(*batch())
    assert float(loss) == pytest.approx(((2.0 - 1.5) ** 2 + 9.0**2) / 2)


def test_sync_target_copies_and_blends_exactly() -> None:
    alg = DQN(QNet(hidden=8), device="cpu")
    with torch.no_grad():
        for i, (p, t) in enumerate(
            zip(alg.model.parameters(), alg.target_model.parameters(), strict=False)
        ):
            p.fill_(1.0 + i)
            t.fill_(-1.0)
    alg.sync_target(decay=0.75)  # 0.75 * -1 + 0.25 * (1 + i): exact in binary floating point
    for i, t in enumerate(alg.target_model.parameters()):
        assert torch.equal(t, torch.full_like(t, -0.75 + 0.25 * (1.0 + i)))
    alg.sync_target()  # PARL's DQN: a plain copy
    for p, t in zip(alg.model.parameters(), alg.target_model.parameters(), strict=False):
        assert torch.equal(p, t)
    with pytest.raises(ValueError, match=r"decay must be a float in \[0, 1\], got 1.5"):
        alg.sync_target(1.5)


def test_gradient_clipping_and_options() -> None:
    alg = DQN(QNet(hidden=16), gamma=0.9, lr=1e-3, max_grad_norm=0.01, device="cpu")
    obs = torch.randn(32, 4) * 10
    alg.learn(obs, torch.randint(2, (32,)), torch.full((32,), 100.0), obs, torch.zeros(32))
    norm = torch.norm(torch.stack([p.grad.norm() for p in alg.model.parameters()]))
    assert float(norm) <= 0.01 * (1 + 1e-5)
    with pytest.raises(ValueError, match="loss must be one of"):
        DQN(QNet(), loss="l1")
    with pytest.raises(ValueError, match="DQN: gamma must be a float in"):
        DQN(QNet(), gamma=1.5)
    with pytest.raises(TypeError, match="DQN needs model to define forward"):
        DQN(nn.Module())


def test_dueling_model_and_prioritized_replay_work_with_dqn() -> None:
    torch.manual_seed(0)
    net = QNet(hidden=16, dueling=True)
    obs = torch.randn(5, 4)
    q = net(obs)
    advantage = net.head(net.body(obs))
    # Q - V is the centred advantage: its mean over actions is zero
    torch.testing.assert_close(
        q - net.value_head(net.body(obs)), advantage - advantage.mean(1, True)
    )
    alg = DDQN(net, device="cpu")
    rpm = PrioritizedReplayMemory(64, 4, 0, rng=np.random.default_rng(0))
    for i in range(64):
        rpm.append(np.full(4, i / 64, np.float32), i % 2, 1.0, np.zeros(4), i % 7 == 0)
    sample = rpm.sample_batch(16)
    tensors = [torch.as_tensor(x) for x in sample[:5]]
    alg.learn(*tensors, weight=torch.as_tensor(sample.weight))
    rpm.update_priorities(sample.indices, alg.td_error)
    np.testing.assert_allclose(
        rpm.tree.leaves(sample.indices[-1:]),
        (alg.td_error[-1:].numpy() + rpm.eps) ** rpm.alpha,
        rtol=1e-5,
    )


def test_same_seed_same_result(single_thread: None) -> None:
    def run(seed: int) -> dict[str, np.ndarray]:
        torch.manual_seed(seed)
        alg = DQN(QNet(hidden=16), lr=2.3e-3, loss="huber", max_grad_norm=10.0, device="cpu")
        train_dqn_cartpole(alg, seed, 1300)  # two blocks of 128 updates after the warm-up
        return alg.get_all_weights()

    first, second, other = run(3), run(3), run(4)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])
    assert any(not np.array_equal(first[n], other[n]) for n in first)


@pytest.mark.slow
@pytest.mark.threshold
def test_threshold_dqn_learns_cartpole(single_thread: None) -> None:
    torch.manual_seed(0)
    alg = DQN(
        QNet(hidden=64), gamma=0.99, lr=2.3e-3, loss="huber", max_grad_norm=10.0, device="cpu"
    )
    # A random policy scores about 20; the budget is 20,000 environment steps. The run is chaotic:
    # the float rounding of another CPU's kernels gives another score (seeds 0-5 scored 108 to 321
    # on one machine, and seed 0 scored 179 there and over 195 on another), so the bar is five
    # times random play, which a broken update does not reach.
    assert train_dqn_cartpole(alg, seed=0, total_steps=20_000) >= 100.0


def test_clip_grad_norm_equals_torch() -> None:
    from parl.algorithms.offpolicy import clip_grad_norm

    torch.manual_seed(0)
    ours, theirs = QNet(hidden=16), QNet(hidden=16)
    theirs.load_state_dict(ours.state_dict())
    for max_norm in (0.5, 1e6):  # clipped, and left alone
        for net in (ours, theirs):
            for p in net.parameters():
                p.grad = torch.ones_like(p) * 0.3
        clip_grad_norm(list(ours.parameters()), max_norm)
        nn.utils.clip_grad_norm_(theirs.parameters(), max_norm)
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=0)
