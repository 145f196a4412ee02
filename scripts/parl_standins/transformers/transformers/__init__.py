"""The import name of Hugging Face's ``transformers`` (4.10), for PARL's Decision Transformer
script: the GPT-2 configuration and the pieces its ``trajectory_gpt2.py`` imports
(``Conv1D``, ``PreTrainedModel``, ``ModelOutput``, ``ACT2FN``, ...), written on torch. No
tokenizers, no pretrained weights, no downloads."""

from transformers.models.gpt2.configuration_gpt2 import GPT2Config

__all__ = ["GPT2Config"]
__version__ = "4.10.0"
