"""Device maps for spreading a model's layers over GPUs."""

from __future__ import annotations

from typing import Any


def get_device_map(n_layers: int, devices: Any) -> dict[Any, list[int]]:
    """Layers ``0..n_layers-1`` in consecutive blocks over ``devices``."""
    devices = list(devices)
    per_device = -(-n_layers // max(len(devices), 1))
    layers = list(range(n_layers))
    return {d: layers[i * per_device : (i + 1) * per_device] for i, d in enumerate(devices)}


def assert_device_map(device_map: dict[Any, list[int]], num_blocks: int) -> None:
    placed = [layer for layers in device_map.values() for layer in layers]
    if sorted(placed) != list(range(num_blocks)):
        raise ValueError(
            f"device_map must place each of the {num_blocks} blocks once, got {device_map}"
        )
