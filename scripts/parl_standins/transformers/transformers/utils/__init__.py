"""``transformers.utils``: its ``logging`` and ``model_parallel_utils``."""
