"""``ModelOutput`` and the docstring decorators of ``transformers.file_utils``."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from typing import Any


class ModelOutput(OrderedDict):
    """A model's outputs, readable by key (``out["last_hidden_state"]``), by attribute or by
    position; fields left ``None`` are left out, as in ``transformers``."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return super().__getitem__(key)
        return self.to_tuple()[key]

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self.values())


def _keep(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    def decorate(obj: Any) -> Any:
        return obj

    return decorate


add_start_docstrings = _keep
add_start_docstrings_to_model_forward = _keep
add_code_sample_docstrings = _keep
replace_return_docstrings = _keep
