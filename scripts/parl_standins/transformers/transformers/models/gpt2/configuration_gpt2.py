"""``GPT2Config``: GPT-2's sizes and settings, with transformers 4.10's defaults; any other
keyword becomes an attribute, as in ``transformers``."""

from __future__ import annotations

from typing import Any


class GPT2Config:
    model_type = "gpt2"

    def __init__(
        self,
        vocab_size: int = 50257,
        n_positions: int = 1024,
        n_ctx: int = 1024,
        n_embd: int = 768,
        n_layer: int = 12,
        n_head: int = 12,
        n_inner: int | None = None,
        activation_function: str = "gelu_new",
        resid_pdrop: float = 0.1,
        embd_pdrop: float = 0.1,
        attn_pdrop: float = 0.1,
        layer_norm_epsilon: float = 1e-5,
        initializer_range: float = 0.02,
        use_cache: bool = True,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        return_dict: bool = True,
        add_cross_attention: bool = False,
        gradient_checkpointing: bool = False,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.n_ctx = n_ctx
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_inner = n_inner
        self.activation_function = activation_function
        self.resid_pdrop = resid_pdrop
        self.embd_pdrop = embd_pdrop
        self.attn_pdrop = attn_pdrop
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        self.output_attentions = output_attentions
        self.output_hidden_states = output_hidden_states
        self.use_return_dict = return_dict
        self.add_cross_attention = add_cross_attention
        self.gradient_checkpointing = gradient_checkpointing
        for name, value in kwargs.items():
            setattr(self, name, value)

    # the names transformers gives the same sizes
    @property
    def hidden_size(self) -> int:
        return self.n_embd

    @property
    def num_hidden_layers(self) -> int:
        return self.n_layer

    @property
    def num_attention_heads(self) -> int:
        return self.n_head

    @property
    def max_position_embeddings(self) -> int:
        return self.n_positions
