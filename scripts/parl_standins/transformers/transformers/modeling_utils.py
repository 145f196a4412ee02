"""``PreTrainedModel`` (configuration, weight initialisation, masks), GPT-2's ``Conv1D``, and
the head-pruning helpers, without loading or saving pretrained weights."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Conv1D(nn.Module):
    """GPT-2's linear layer with a transposed weight: ``x @ weight + bias``, weight ``(nx, nf)``."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(shape)


class PreTrainedModel(nn.Module):
    """A model built from a configuration, whose ``init_weights`` applies ``_init_weights``."""

    config_class: Any = None
    base_model_prefix = ""

    def __init__(self, config: Any, *inputs: Any, **kwargs: Any) -> None:
        super().__init__()
        self.config = config

    def _init_weights(self, module: nn.Module) -> None:
        """Subclasses initialise their layers here."""

    def init_weights(self) -> None:
        self.apply(self._init_weights)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def get_head_mask(self, head_mask: Any, num_hidden_layers: int) -> Any:
        """One mask per layer (``None`` for all when no mask is given)."""
        if head_mask is None:
            return [None] * num_hidden_layers
        head_mask = torch.as_tensor(head_mask, dtype=self.dtype, device=self.device)
        if head_mask.dim() == 1:
            head_mask = head_mask[None, None, :, None, None].expand(
                num_hidden_layers, -1, -1, -1, -1
            )
        elif head_mask.dim() == 2:
            head_mask = head_mask[:, None, :, None, None]
        return head_mask

    def invert_attention_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """1 (attend) / 0 (ignore) to 0 / -10000, broadcastable over heads and queries."""
        if mask.dim() == 2:
            mask = mask[:, None, None, :]
        elif mask.dim() == 3:
            mask = mask[:, None, :, :]
        return (1.0 - mask.to(self.dtype)) * -10000.0


class SequenceSummary(nn.Module):
    """The last hidden state of a sequence, through a linear layer (GPT-2's multiple-choice
    head)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.summary = nn.Linear(config.n_embd, getattr(config, "num_labels", 1))

    def forward(self, hidden_states: torch.Tensor, cls_index: Any = None) -> torch.Tensor:
        return self.summary(hidden_states[..., -1, :])


def find_pruneable_heads_and_indices(
    heads: Any, n_heads: int, head_size: int, already_pruned_heads: set[int]
) -> tuple[set[int], torch.Tensor]:
    """The heads still to prune, and the indices of the weights that stay."""
    heads = set(heads) - already_pruned_heads
    mask = torch.ones(n_heads, head_size)
    for head in heads:
        head -= sum(1 for h in already_pruned_heads if h < head)
        mask[head] = 0
    index = torch.arange(len(mask.view(-1)))[mask.view(-1).eq(1)].long()
    return heads, index


def prune_conv1d_layer(layer: Conv1D, index: torch.Tensor, dim: int = 1) -> Conv1D:
    """``layer`` keeping only the entries ``index`` along ``dim``."""
    index = index.to(layer.weight.device)
    weight = layer.weight.index_select(dim, index).detach().clone()
    bias = layer.bias.detach().clone() if dim == 0 else layer.bias[index].detach().clone()
    shape = list(layer.weight.size())
    shape[dim] = len(index)
    pruned = Conv1D(shape[1], shape[0]).to(layer.weight.device)
    with torch.no_grad():
        pruned.weight.copy_(weight)
        pruned.bias.copy_(bias)
    return pruned
