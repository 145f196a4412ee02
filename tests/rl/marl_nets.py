"""Small models, random episode batches and a tiny cooperative game for the QMIX and COMA tests.

The models have the shapes of PARL's QMIX and COMA examples: a GRU agent network with
``init_hidden()``, QMIX's hypernetwork mixer, and COMA's model with a recurrent actor and a
feed-forward critic over ``(o_a, s, u_-a, u_last, agent id)``.
"""

from __future__ import annotations

import importlib.util
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import parl


class RNNAgent(parl.Model):
    """``(obs (B, obs_dim), hidden) -> (Q or logits (B, n_actions), hidden (B, H))``."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 16) -> None:
        super().__init__()
        self.hidden = hidden
        self.fc1 = nn.Linear(obs_dim, hidden)
        self.rnn = nn.GRUCell(hidden, hidden)
        self.fc2 = nn.Linear(hidden, n_actions)

    def init_hidden(self) -> torch.Tensor:
        return self.fc1.weight.new_zeros(1, self.hidden)

    def forward(
        self, obs: torch.Tensor, hidden_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.rnn(F.relu(self.fc1(obs)), hidden_state.reshape(-1, self.hidden))
        return self.fc2(h), h

    def update(self, model: nn.Module) -> None:
        """Copy ``model``'s weights (how PARL's QMIX agent refreshes its target networks)."""
        self.load_state_dict(model.state_dict())


class Mixer(parl.Model):
    """QMIX's mixer: ``Q_tot = elu(q @ |W1(s)| + b1(s)) @ |W2(s)| + b2(s)``, ``(B, T, 1)``."""

    def __init__(self, n_agents: int, state_dim: int, embed: int = 8, hyper: int = 16) -> None:
        super().__init__()
        self.n_agents, self.state_dim, self.embed = n_agents, state_dim, embed
        self.hyper_w1 = nn.Sequential(
            nn.Linear(state_dim, hyper), nn.ReLU(), nn.Linear(hyper, embed * n_agents)
        )
        self.hyper_w2 = nn.Sequential(
            nn.Linear(state_dim, hyper), nn.ReLU(), nn.Linear(hyper, embed)
        )
        self.hyper_b1 = nn.Linear(state_dim, embed)
        self.hyper_b2 = nn.Sequential(nn.Linear(state_dim, embed), nn.ReLU(), nn.Linear(embed, 1))

    def forward(self, agent_qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        batch = agent_qs.shape[0]
        states = states.reshape(-1, self.state_dim)
        qs = agent_qs.reshape(-1, 1, self.n_agents)
        w1 = self.hyper_w1(states).abs().view(-1, self.n_agents, self.embed)
        b1 = self.hyper_b1(states).view(-1, 1, self.embed)
        w2 = self.hyper_w2(states).abs().view(-1, self.embed, 1)
        b2 = self.hyper_b2(states).view(-1, 1, 1)
        hidden = F.elu(torch.bmm(qs, w1) + b1)
        return (torch.bmm(hidden, w2) + b2).view(batch, -1, 1)

    def update(self, model: nn.Module) -> None:
        """Copy ``model``'s weights."""
        self.load_state_dict(model.state_dict())


class ComaModel(parl.Model):
    """COMA's model: ``policy`` (the recurrent actor), ``value`` (the critic, ``(B, n_actions)``)
    and the two parameter groups."""

    def __init__(self, actor_input_dim: int, critic_input_dim: int, n_actions: int) -> None:
        super().__init__()
        self.actor_model = RNNAgent(actor_input_dim, n_actions)
        self.critic_model = nn.Sequential(
            nn.Linear(critic_input_dim, 32), nn.ReLU(), nn.Linear(32, n_actions)
        )

    def policy(
        self, obs: torch.Tensor, hidden_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor_model(obs, hidden_state)

    def value(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.critic_model(inputs)

    def get_actor_params(self) -> list[nn.Parameter]:
        return list(self.actor_model.parameters())

    def get_critic_params(self) -> list[nn.Parameter]:
        return list(self.critic_model.parameters())


def load_published(wheel: Path, folder: Path, module: str, name: str) -> type:
    """Class ``name`` of PARL's ``parl/algorithms/torch/<module>.py``, extracted from the
    published wheel into ``folder`` and loaded against this package (its ``import parl``
    resolves here)."""
    with zipfile.ZipFile(wheel) as archive:
        path = Path(archive.extract(f"parl/algorithms/torch/{module}.py", folder))
    spec = importlib.util.spec_from_file_location(f"published_parl_{module}", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return getattr(loaded, name)


# -- random batches, in PARL's layouts ----------------------------------------------------------
def random_available(
    gen: torch.Generator, shape: tuple[int, ...], n_actions: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random availability masks with at least one available action per row, and a random
    available action per row: ``(avail (*shape, n_actions), actions (*shape))``."""
    avail = (torch.rand(*shape, n_actions, generator=gen) < 0.6).float()
    first = torch.randint(n_actions, shape, generator=gen)
    avail.scatter_(-1, first.unsqueeze(-1), 1.0)
    # an available action, uniformly: argmax of random scores over the available ones
    scores = torch.rand(*shape, n_actions, generator=gen).masked_fill(avail == 0, -1.0)
    return avail, scores.argmax(dim=-1)


@dataclass(frozen=True)
class QmixDims:
    batch: int = 4
    steps: int = 6
    n_agents: int = 3
    obs_dim: int = 5
    state_dim: int = 7
    n_actions: int = 4


def qmix_batch(
    gen: torch.Generator, dims: QmixDims, lengths: list[int] | None = None
) -> tuple[torch.Tensor, ...]:
    """``QMIX.learn``'s arguments, as PARL's QMIX example stores episodes.

    ``lengths=None``: every episode fills all ``steps`` without ending before the last index
    (whose transition PARL's layout never learns). Otherwise episode ``i`` has ``lengths[i]``
    real steps, the last of them terminal, then padding (``filled = 1``, ``terminated = 1``, no
    action available, zeros), as PARL's example pads episodes.
    """
    b, t, n = dims.batch, dims.steps, dims.n_agents
    state = torch.randn(b, t, dims.state_dim, generator=gen)
    obs = torch.randn(b, t, n, dims.obs_dim, generator=gen)
    avail, actions = random_available(gen, (b, t, n), dims.n_actions)
    reward = torch.randn(b, t, 1, generator=gen)
    terminated = torch.zeros(b, t, 1)
    filled = torch.zeros(b, t, 1)
    for i, length in enumerate(lengths or []):
        terminated[i, length - 1 :] = 1.0
        filled[i, length:] = 1.0
        for tensor in (state, obs, avail, actions, reward):
            tensor[i, length:] = 0
    if lengths is None:
        terminated[:, -1] = 1.0
    return state, actions, reward, terminated, obs, avail, filled


@dataclass(frozen=True)
class ComaDims:
    episodes: int = 3
    steps: int = 5
    n_agents: int = 2
    n_actions: int = 3
    actor_dim: int = 4
    critic_dim: int = 6


def coma_batch(
    gen: torch.Generator, dims: ComaDims, lengths: tuple[int, ...] = (5, 3, 4)
) -> dict[str, torch.Tensor]:
    """PARL's COMA batch after its agent's preprocessing: episode ``i`` has ``lengths[i]`` real
    steps (``isover`` on the last), then padding with no available action."""
    e, t, n = dims.episodes, dims.steps, dims.n_agents
    avail, actions = random_available(gen, (e, t, n), dims.n_actions)
    batch = {
        "r": torch.randn(e, t, 1, generator=gen),
        "u": actions.unsqueeze(-1),
        "avail_u": avail,
        "padded": torch.zeros(e, t, 1),
        "isover": torch.zeros(e, t, 1),
        "actor_inputs": torch.randn(e, t, n, dims.actor_dim, generator=gen),
        "critic_inputs": torch.randn(e, t, n, dims.critic_dim, generator=gen),
        "critic_inputs_next": torch.randn(e, t, n, dims.critic_dim, generator=gen),
    }
    for i, length in enumerate(lengths):
        batch["isover"][i, length - 1 :] = 1.0
        batch["padded"][i, length:] = 1.0
        for key in ("r", "u", "avail_u", "actor_inputs", "critic_inputs", "critic_inputs_next"):
            batch[key][i, length:] = 0
    return batch


# -- a tiny cooperative game ------------------------------------------------------------------
class CoordinationGame:
    """Two agents, three actions, episodes of 2 or 3 steps (drawn at reset).

    At step ``t`` the team earns 1 for each agent that picks the step's target action
    ``TARGETS[t]``. Action 2, step 0's target, is unavailable to agent 1 at step 0, so 1 is the
    most step 0 can give. Each agent observes the step (one-hot) and its own id; the state is
    the step (one-hot). The best return is ``best_return()``.
    """

    TARGETS = (2, 1, 0)
    n_agents, n_actions, limit = 2, 3, 3
    obs_dim = limit + 2
    state_dim = limit

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.t = 0
        self.length = 2

    def best_return(self) -> float:
        return 1.0 + 2.0 * (self.length - 1)

    def reset(self) -> tuple[np.ndarray, np.ndarray]:
        self.t = 0
        self.length = int(self.rng.integers(2, self.limit + 1))
        return self.state(), self.obs()

    def state(self) -> np.ndarray:
        return np.eye(self.limit, dtype=np.float32)[self.t]

    def obs(self) -> np.ndarray:
        step = np.eye(self.limit, dtype=np.float32)[self.t]
        return np.stack([np.concatenate([step, np.eye(2, dtype=np.float32)[i]]) for i in range(2)])

    def available(self) -> np.ndarray:
        avail = np.ones((self.n_agents, self.n_actions), dtype=np.float32)
        if self.t == 0:
            avail[1, 2] = 0.0
        return avail

    def step(self, actions: np.ndarray) -> tuple[float, bool]:
        hits = int(np.sum(np.asarray(actions) == self.TARGETS[self.t]))
        reward = float(hits)
        self.t += 1
        return reward, self.t >= self.length


Act = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def play_episode(game: CoordinationGame, act: Act) -> dict[str, np.ndarray]:
    """One episode of ``game`` with ``act(obs, avail, last_actions) -> actions``, stored as
    PARL's QMIX example stores it: ``limit + 1`` slots, padding with ``filled = 1``,
    ``terminated = 1``, zeros and no available action. Adds ``return`` and ``best``."""
    slots = game.limit + 1
    n, a = game.n_agents, game.n_actions
    episode = {
        "state": np.zeros((slots, game.state_dim), np.float32),
        "actions": np.zeros((slots, n), np.int64),
        "reward": np.zeros((slots, 1), np.float32),
        "terminated": np.ones((slots, 1), np.float32),
        "obs": np.zeros((slots, n, game.obs_dim), np.float32),
        "avail": np.zeros((slots, n, a), np.float32),
        "filled": np.ones((slots, 1), np.float32),
    }
    state, obs = game.reset()
    last = np.full(n, -1)
    total, done, t = 0.0, False, 0
    while not done:
        avail = game.available()
        actions = np.asarray(act(obs, avail, last))
        reward, done = game.step(actions)
        for key, value in (
            ("state", state), ("actions", actions), ("reward", [reward]),
            ("terminated", [float(done)]), ("obs", obs), ("avail", avail), ("filled", [0.0]),
        ):  # fmt: skip
            episode[key][t] = value
        total += reward
        last, t = actions, t + 1
        if not done:
            state, obs = game.state(), game.obs()
    episode["return"] = np.array(total)
    episode["best"] = np.array(game.best_return())
    return episode


def stack_episodes(episodes: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """Episodes of ``play_episode`` as ``(B, T, ...)`` tensors."""
    return {key: torch.as_tensor(np.stack([e[key] for e in episodes])) for key in episodes[0]}


def coma_inputs(batch: dict[str, torch.Tensor], n_actions: int) -> dict[str, torch.Tensor]:
    """PARL's COMA batch from stacked episodes: actor inputs ``(o_a, u_a(t-1), id)`` (the
    game's observations already hold the agent's id) and critic inputs ``(o_a, s, u_-a(t),
    u(t-1), id)``, with ``critic_inputs_next`` those of step ``t + 1`` (zeros after the end)."""
    obs, state, actions = batch["obs"], batch["state"], batch["actions"]
    e, t, n, _ = obs.shape
    u_onehot = F.one_hot(actions, n_actions).float() * (1.0 - batch["filled"]).unsqueeze(-1)
    u_last = torch.zeros_like(u_onehot)
    u_last[:, 1:] = u_onehot[:, :-1]
    ids = torch.eye(n).expand(e, t, n, n)
    others = u_onehot.unsqueeze(2).expand(e, t, n, n, n_actions) * (1.0 - torch.eye(n)).view(
        1, 1, n, n, 1
    )
    critic = torch.cat(
        [
            obs,
            state.unsqueeze(2).expand(e, t, n, -1),
            others.reshape(e, t, n, -1),
            u_last.reshape(e, t, 1, -1).expand(e, t, n, -1),
            ids,
        ],
        dim=-1,
    )
    critic_next = torch.zeros_like(critic)
    critic_next[:, :-1] = critic[:, 1:]
    return {
        "r": batch["reward"],
        "u": actions.unsqueeze(-1),
        "avail_u": batch["avail"],
        "padded": batch["filled"],
        "isover": batch["terminated"],
        "actor_inputs": torch.cat([obs, u_last], dim=-1),
        "critic_inputs": critic,
        "critic_inputs_next": critic_next,
    }
