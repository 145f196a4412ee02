"""The output record of GPT-2's base model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers.file_utils import ModelOutput


@dataclass
class BaseModelOutputWithPastAndCrossAttentions(ModelOutput):
    last_hidden_state: Any = None
    past_key_values: Any = None
    hidden_states: Any = None
    attentions: Any = None
    cross_attentions: Any = None
