"""``get_device("auto")``: pick or validate a torch device."""

from __future__ import annotations

import torch

__all__ = ["get_device"]


def get_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> ``cuda`` if a GPU is usable, else ``cpu``; other names are checked.

    Raises ``TypeError`` for a non-string and ``ValueError`` for an unknown device name or a
    CUDA device that this machine does not have.
    """
    if isinstance(device, torch.device):
        resolved = device
    elif isinstance(device, str):
        if device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            resolved = torch.device(device)
        except RuntimeError:
            raise ValueError(
                f"device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>', got {device!r}"
            ) from None
    else:
        raise TypeError(
            f"device must be 'auto', a device name such as 'cpu' or 'cuda:0', or a "
            f"torch.device, got {device!r} ({type(device).__name__})"
        )
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"device {device!r} asks for CUDA, but no GPU is available; use 'auto' or 'cpu'"
            )
        if resolved.index is not None and resolved.index >= count:
            raise ValueError(f"device {device!r} does not exist: this machine has {count} GPU(s)")
    return resolved
