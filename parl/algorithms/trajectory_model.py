"""A Decision Transformer model: returns-to-go, states and actions as tokens of a small causal
transformer (GPT-2's pre-norm block), written in plain torch.

Chen et al. 2021 (https://arxiv.org/abs/2106.01345) feed the sequence ``(R_1, s_1, a_1, R_2,
s_2, a_2, ...)`` to GPT-2 and read each action off the token of its state. This module builds
the same model without the ``transformers`` package: token embeddings plus a learned
embedding of the episode's time step (in place of positions), a stack of
:class:`CausalBlock` initialised as GPT-2's, and linear heads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from parl.core.model import Model
from parl.validation import check_float, check_int

__all__ = ["CausalBlock", "TrajectoryModel"]

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


class CausalBlock(nn.Module):
    """One pre-norm transformer block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))``.

    Args:
        hidden_size: width of the tokens.
        n_head: attention heads; must divide ``hidden_size``.
        n_inner: width of the MLP.
        dropout: dropout of the attention weights and of both residual branches.
        activation: the MLP's activation, ``"relu"``, ``"gelu"`` or ``"tanh"``.
    """

    def __init__(
        self, hidden_size: int, n_head: int, n_inner: int, dropout: float, activation: str
    ) -> None:
        super().__init__()
        self.n_head = n_head
        self.dropout = dropout
        self.ln_attn = nn.LayerNorm(hidden_size)
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.proj = nn.Linear(hidden_size, hidden_size)
        self.ln_mlp = nn.LayerNorm(hidden_size)
        self.fc_in = nn.Linear(hidden_size, n_inner)
        self.activation = _ACTIVATIONS[activation]()
        self.fc_out = nn.Linear(n_inner, hidden_size)
        self.resid_dropout = nn.Dropout(dropout)
        self.mlp_dropout = nn.Dropout(dropout)

    @torch.no_grad()
    def reset_parameters(self, n_layer: int) -> None:
        """GPT-2's initialisation: weights from ``N(0, 0.02)``, biases 0, and the two layers that
        write into the residual stream from ``N(0, 0.02 / sqrt(2 n_layer))``, so that the
        stream's variance does not grow with depth (GPT-2 paper, section 2.3).

        Args:
            n_layer: the number of blocks in the stack.
        """
        for layer in (self.qkv, self.proj, self.fc_in, self.fc_out):
            layer.weight.normal_(0.0, 0.02)
            layer.bias.zero_()
        for layer in (self.proj, self.fc_out):
            layer.weight.normal_(0.0, 0.02 / math.sqrt(2 * n_layer))

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """``x``: ``(B, T, hidden)``; ``allowed``: ``(B, 1, T, T)``, True where query ``t`` may
        attend to key ``u``. Returns ``(B, T, hidden)``."""
        batch, length, width = x.shape
        q, k, v = (
            part.reshape(batch, length, self.n_head, width // self.n_head).transpose(1, 2)
            for part in self.qkv(self.ln_attn(x)).chunk(3, dim=-1)
        )
        attended = F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed, dropout_p=self.dropout if self.training else 0.0
        )
        x = x + self.resid_dropout(self.proj(attended.transpose(1, 2).reshape(x.shape)))
        return x + self.mlp_dropout(self.fc_out(self.activation(self.fc_in(self.ln_mlp(x)))))


class TrajectoryModel(Model):
    """Decision Transformer's model with PARL's example contract.

    ``forward(states, actions, rewards, returns_to_go, timesteps, attention_mask)`` returns the
    predictions ``(state_preds, action_preds, return_preds)`` for every step;
    ``get_action(states, actions, rewards, returns_to_go, timesteps)`` the next action of one
    episode from its history. ``rewards`` are taken and ignored, as in the paper.

    Args:
        state_dim: size of a state.
        act_dim: size of an action.
        hidden_size: width of the tokens.
        max_length: the context ``K`` in steps (three tokens each); ``get_action`` keeps the
            last ``K`` steps and pads on the left. ``None`` keeps the whole history.
        max_ep_len: number of time-step embeddings (time steps ``0 .. max_ep_len - 1``).
        n_layer: transformer blocks.
        n_head: attention heads.
        n_inner: width of the blocks' MLP; ``None`` means ``4 * hidden_size``.
        dropout: dropout rate of the embeddings and of the blocks.
        activation: the blocks' activation, ``"relu"`` (PARL's example), ``"gelu"``, ``"tanh"``.
        action_tanh: squash predicted actions into ``(-1, 1)``.
    """

    def __init__(
        self,
        state_dim: int,
        act_dim: int,
        hidden_size: int = 128,
        max_length: int | None = 20,
        max_ep_len: int = 4096,
        n_layer: int = 3,
        n_head: int = 1,
        n_inner: int | None = None,
        dropout: float = 0.1,
        activation: str = "relu",
        action_tanh: bool = True,
    ) -> None:
        super().__init__()
        owner = "TrajectoryModel"
        self.state_dim = check_int("state_dim", state_dim, low=1, owner=owner)
        self.act_dim = check_int("act_dim", act_dim, low=1, owner=owner)
        self.hidden_size = check_int("hidden_size", hidden_size, low=1, owner=owner)
        self.max_length = (
            None if max_length is None else check_int("max_length", max_length, low=1, owner=owner)
        )
        check_int("n_head", n_head, low=1, owner=owner)
        if hidden_size % n_head:
            raise ValueError(
                f"{owner}: n_head ({n_head}) must divide hidden_size ({hidden_size}); pick a "
                f"hidden_size that is a multiple of n_head"
            )
        if activation not in _ACTIVATIONS:
            raise ValueError(
                f"{owner}: activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}"
            )
        dropout = check_float("dropout", dropout, low=0.0, high=1.0, high_open=True, owner=owner)
        inner = (
            4 * hidden_size
            if n_inner is None
            else check_int("n_inner", n_inner, low=1, owner=owner)
        )
        self.embed_timestep = nn.Embedding(
            check_int("max_ep_len", max_ep_len, low=1, owner=owner), hidden_size
        )
        self.embed_return = nn.Linear(1, hidden_size)
        self.embed_state = nn.Linear(state_dim, hidden_size)
        self.embed_action = nn.Linear(act_dim, hidden_size)
        self.embed_ln = nn.LayerNorm(hidden_size)
        self.embed_dropout = nn.Dropout(dropout)
        blocks = [
            CausalBlock(hidden_size, n_head, inner, dropout, activation)
            for _ in range(check_int("n_layer", n_layer, low=1, owner=owner))
        ]
        for block in blocks:
            block.reset_parameters(len(blocks))
        self.blocks = nn.ModuleList(blocks)
        self.ln_final = nn.LayerNorm(hidden_size)
        self.predict_state = nn.Linear(hidden_size, state_dim)
        self.predict_action = nn.Sequential(
            nn.Linear(hidden_size, act_dim), *([nn.Tanh()] if action_tanh else [])
        )
        self.predict_return = nn.Linear(hidden_size, 1)

    def forward(
        self,
        states: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor | None,
        returns_to_go: torch.Tensor,
        timesteps: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Predictions for every step of a batch of windows.

        Args:
            states: ``(B, T, state_dim)``.
            actions: ``(B, T, act_dim)``.
            rewards: ignored (the model conditions on returns-to-go instead).
            returns_to_go: ``(B, T, 1)``.
            timesteps: ``(B, T)`` integers in ``[0, max_ep_len)``.
            attention_mask: ``(B, T)``, 1 for real steps and 0 for padding; ``None``: all real.

        Returns:
            ``state_preds (B, T, state_dim)`` and ``return_preds (B, T, 1)``, read off each
            action's token, and ``action_preds (B, T, act_dim)``, read off each state's token.
        """
        batch, length = states.shape[0], states.shape[1]
        time = self.embed_timestep(timesteps)
        # (B, 3, T, H) -> (B, T, 3, H) -> (B, 3T, H): R_1, s_1, a_1, R_2, ...
        tokens = torch.stack(
            (
                self.embed_return(returns_to_go) + time,
                self.embed_state(states) + time,
                self.embed_action(actions) + time,
            ),
            dim=2,
        ).reshape(batch, 3 * length, self.hidden_size)
        x = self.embed_dropout(self.embed_ln(tokens))
        allowed = self._allowed(attention_mask, batch, length, x.device)
        for block in self.blocks:
            x = block(x, allowed)
        # token 3t + 0 is R_t, 3t + 1 is s_t, 3t + 2 is a_t
        x = self.ln_final(x).reshape(batch, length, 3, self.hidden_size)
        return (
            self.predict_state(x[:, :, 2]),
            self.predict_action(x[:, :, 1]),
            self.predict_return(x[:, :, 2]),
        )

    @staticmethod
    def _allowed(
        attention_mask: torch.Tensor | None, batch: int, length: int, device: torch.device
    ) -> torch.Tensor:
        """``(B, 1, 3T, 3T)`` booleans: causal, no padded key, and each token sees itself (a
        padded query would otherwise see no key at all; its output is never used)."""
        tokens = 3 * length
        allowed = torch.ones(tokens, tokens, dtype=torch.bool, device=device).tril()
        if attention_mask is None:
            return allowed.expand(batch, 1, tokens, tokens)
        keys = (attention_mask > 0).repeat_interleave(3, dim=1)  # (B, 3T)
        allowed = allowed & keys[:, None, None, :]
        return allowed | torch.eye(tokens, dtype=torch.bool, device=device)

    @torch.no_grad()
    def get_action(
        self,
        states: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor | None,
        returns_to_go: torch.Tensor,
        timesteps: torch.Tensor,
    ) -> torch.Tensor:
        """The next action of one episode, ``(act_dim,)``.

        Args:
            states: the episode's states so far, ``(T, state_dim)``.
            actions: its actions, ``(T, act_dim)``, the last one a placeholder (zeros).
            rewards: ignored.
            returns_to_go: ``(T,)`` or ``(1, T)``: the return still wanted at each step.
            timesteps: ``(T,)`` or ``(1, T)``.
        """
        states = states.reshape(1, -1, self.state_dim)
        actions = actions.reshape(1, -1, self.act_dim)
        returns_to_go = returns_to_go.reshape(1, -1, 1)
        timesteps = timesteps.reshape(1, -1)
        mask = None
        if self.max_length is not None:
            states, actions, returns_to_go, timesteps = (
                t[:, -self.max_length :] for t in (states, actions, returns_to_go, timesteps)
            )
            real = states.shape[1]
            pad = self.max_length - real

            def left_pad(t: torch.Tensor) -> torch.Tensor:
                zeros = t.new_zeros((1, pad, *t.shape[2:]))
                return torch.cat([zeros, t], dim=1)

            states, actions, returns_to_go = (
                left_pad(t.float()) for t in (states, actions, returns_to_go)
            )
            timesteps = left_pad(timesteps.long())
            mask = torch.cat([timesteps.new_zeros((1, pad)), timesteps.new_ones((1, real))], dim=1)
        _, action_preds, _ = self.forward(
            states, actions, None, returns_to_go, timesteps, attention_mask=mask
        )
        return action_preds[0, -1]
