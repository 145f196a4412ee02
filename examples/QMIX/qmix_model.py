"""QMIX's networks: the agents' shared Q network (recurrent, or feed-forward) and the
hypernetwork mixer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import parl


class RNNModel(parl.Model):
    """``(inputs (B, input_dim), hidden) -> (Q (B, n_actions), hidden (B, H))``: a linear layer,
    a GRU cell and a linear head, shared by every agent (their inputs carry their ids)."""

    def __init__(self, input_dim: int, n_actions: int, rnn_hidden_dim: int = 64) -> None:
        super().__init__()
        self.rnn_hidden_dim = rnn_hidden_dim
        self.fc1 = nn.Linear(input_dim, rnn_hidden_dim)
        self.rnn = nn.GRUCell(rnn_hidden_dim, rnn_hidden_dim)
        self.fc2 = nn.Linear(rnn_hidden_dim, n_actions)

    def init_hidden(self) -> torch.Tensor:
        """A zero hidden state ``(1, H)`` on the model's device."""
        return self.fc1.weight.new_zeros(1, self.rnn_hidden_dim)

    def forward(
        self, inputs: torch.Tensor, hidden_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.rnn(F.relu(self.fc1(inputs)), hidden_state.reshape(-1, self.rnn_hidden_dim))
        return self.fc2(hidden), hidden

    def unroll(self, inputs: torch.Tensor, hidden_state: torch.Tensor) -> torch.Tensor:
        """``forward`` along whole episodes, ``(T, B, input_dim) -> Q (T, B, n_actions)``: the
        linear layers over every step at once, the GRU cell's weights in torch's GRU (the same
        maths; its loop over the steps runs in C++)."""
        cell = self.rnn
        weights = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
        hidden, _ = torch.gru(
            F.relu(self.fc1(inputs)), hidden_state.reshape(1, -1, self.rnn_hidden_dim), weights,
            True, 1, 0.0, self.training, False, False,
        )  # fmt: skip  # biases, layers, dropout, training, bidirectional, batch_first
        return self.fc2(hidden)


class FCModel(parl.Model):
    """A feed-forward agent network with ``RNNModel``'s interface: ``(inputs, hidden) -> (Q,
    hidden)`` with the hidden state passed through unused, so QMIX drives it as it does the
    GRU (EPyMARL's QMIX agent with ``use_rnn: False``)."""

    def __init__(self, input_dim: int, n_actions: int, rnn_hidden_dim: int = 64) -> None:
        super().__init__()
        self.rnn_hidden_dim = rnn_hidden_dim
        self.fc1 = nn.Linear(input_dim, rnn_hidden_dim)
        self.fc_hidden = nn.Linear(rnn_hidden_dim, rnn_hidden_dim)
        self.fc2 = nn.Linear(rnn_hidden_dim, n_actions)

    def init_hidden(self) -> torch.Tensor:
        return self.fc1.weight.new_zeros(1, self.rnn_hidden_dim)

    def forward(
        self, inputs: torch.Tensor, hidden_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = F.relu(self.fc_hidden(F.relu(self.fc1(inputs))))
        return self.fc2(hidden), hidden_state.reshape(-1, self.rnn_hidden_dim)

    def unroll(self, inputs: torch.Tensor, hidden_state: torch.Tensor) -> torch.Tensor:
        """``forward`` along whole episodes in one call, ``(T, B, input_dim) -> (T, B,
        n_actions)`` (no state passes between the steps)."""
        return self.fc2(F.relu(self.fc_hidden(F.relu(self.fc1(inputs)))))


class QMixerModel(parl.Model):
    """``Q_tot = elu(q W1 + b1) W2 + b2`` with ``W1, W2 >= 0`` (absolute values) and every
    weight and bias computed from the state by a small hypernetwork, ``(B, T, 1)``."""

    def __init__(
        self,
        n_agents: int,
        state_dim: int,
        mixing_embed_dim: int = 32,
        hypernet_embed_dim: int = 64,
    ) -> None:
        super().__init__()
        self.n_agents, self.state_dim, self.embed_dim = n_agents, state_dim, mixing_embed_dim

        def hyper(outputs: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Linear(state_dim, hypernet_embed_dim), nn.ReLU(),
                nn.Linear(hypernet_embed_dim, outputs),
            )  # fmt: skip

        self.hyper_w_1 = hyper(mixing_embed_dim * n_agents)
        self.hyper_w_2 = hyper(mixing_embed_dim)
        self.hyper_b_1 = nn.Linear(state_dim, mixing_embed_dim)
        self.hyper_b_2 = nn.Sequential(
            nn.Linear(state_dim, mixing_embed_dim), nn.ReLU(), nn.Linear(mixing_embed_dim, 1)
        )

    def forward(self, agent_qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        batch_size = agent_qs.shape[0]
        states = states.reshape(-1, self.state_dim)
        agent_qs = agent_qs.reshape(-1, 1, self.n_agents)
        w1 = self.hyper_w_1(states).abs().view(-1, self.n_agents, self.embed_dim)
        b1 = self.hyper_b_1(states).view(-1, 1, self.embed_dim)
        w2 = self.hyper_w_2(states).abs().view(-1, self.embed_dim, 1)
        b2 = self.hyper_b_2(states).view(-1, 1, 1)
        hidden = F.elu(torch.bmm(agent_qs, w1) + b1)
        return (torch.bmm(hidden, w2) + b2).view(batch_size, -1, 1)
