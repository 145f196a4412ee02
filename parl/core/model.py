"""``parl.Model``: a ``torch.nn.Module`` whose weights travel as numpy arrays.

The weight helpers are module-level functions so that ``parl.Algorithm`` can apply them to every
``nn.Module`` it holds, not only to ``parl.Model`` instances.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from parl.errors import WeightsMismatchError
from parl.validation import check_float

__all__ = [
    "Model",
    "module_weights",
    "set_module_weights",
    "sync_module_weights",
    "check_tensors_fit",
]


def _state_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and persistent buffers by their ``state_dict`` names (not detached)."""
    return dict(module.state_dict(keep_vars=True))


def module_weights(module: nn.Module) -> dict[str, np.ndarray]:
    """Copy every parameter and persistent buffer of ``module`` into a numpy array.

    Names are the ``state_dict`` names (``"fc1.weight"``, ``"bn.running_mean"``), so they are stable
    across processes and runs. The arrays are copies: changing them never changes the module.
    """
    return {
        name: tensor.detach().to("cpu", copy=True).numpy()
        for name, tensor in _state_tensors(module).items()
    }


def check_tensors_fit(
    expected: Mapping[str, torch.Tensor],
    given: Mapping[str, Any],
    *,
    what: str,
    owner: str,
) -> None:
    """Raise ``WeightsMismatchError`` (a ``ValueError`` and a ``RuntimeError``) naming the first
    tensor of ``given`` that does not fit ``expected``.

    ``what`` names the source (``"weights"``, ``"checkpoint 'a.ckpt'"``) and ``owner`` the module.
    """
    missing = [name for name in expected if name not in given]
    unexpected = [name for name in given if name not in expected]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {missing}")
        if unexpected:
            parts.append(f"unexpected {unexpected}")
        raise WeightsMismatchError(
            f"{what} do not match the tensors of {owner}: {'; '.join(parts)}. "
            f"Expected exactly these names: {list(expected)}"
        )
    for name, tensor in expected.items():
        shape = tuple(np.shape(given[name]))
        if shape != tuple(tensor.shape):
            raise WeightsMismatchError(
                f"{what}: tensor {name!r} has shape {shape} but {owner} expects "
                f"{tuple(tensor.shape)}"
            )


def set_module_weights(module: nn.Module, weights: Mapping[str, Any]) -> None:
    """Copy ``weights`` (name -> numpy array or tensor) into ``module`` in place.

    Every name of ``module_weights(module)`` must be present with the same shape; values are cast to
    the dtype and device of the module's tensors.
    """
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"weights must be a dict of name -> numpy array (as returned by get_weights()), "
            f"got {type(weights).__name__}"
        )
    targets = _state_tensors(module)
    check_tensors_fit(targets, weights, what="weights", owner=type(module).__name__)
    sources: list[torch.Tensor] = []
    for name in targets:  # convert everything first: a bad value leaves the module untouched
        value = weights[name]
        if not torch.is_tensor(value):
            array = np.asarray(value)
            if array.dtype.kind not in "biuf":
                raise TypeError(
                    f"weights[{name!r}] must be a numeric numpy array, got dtype {array.dtype}"
                )
            # torch warns on a read-only array (Ray's object store hands those out), though it
            # is only read here: such an array is copied first
            value = torch.as_tensor(np.require(array, requirements=["C", "W"]))
        sources.append(value)
    with torch.no_grad():
        for target, source in zip(targets.values(), sources, strict=True):
            target.copy_(source)


def _check_decay(decay: object) -> float:
    return check_float("decay", decay, low=0, high=1)


def sync_module_weights(source: nn.Module, target: nn.Module, decay: float = 0.0) -> None:
    """Set ``target = decay * target + (1 - decay) * source``, tensor by tensor, in place.

    Floating-point tensors are blended with one fused ``torch._foreach_lerp_`` call (a plain copy
    when ``decay == 0``); integer buffers such as ``num_batches_tracked`` are copied.
    """
    if not isinstance(target, nn.Module):
        raise TypeError(
            f"target_model must be a torch.nn.Module of the same architecture as "
            f"{type(source).__name__}, got {type(target).__name__}"
        )
    decay = _check_decay(decay)
    if target is source:
        return
    sources = _state_tensors(source)
    targets = _state_tensors(target)
    check_tensors_fit(
        targets, sources, what=f"weights of {type(source).__name__}", owner=type(target).__name__
    )
    blend_dst: list[torch.Tensor] = []
    blend_src: list[torch.Tensor] = []
    copy_dst: list[torch.Tensor] = []
    copy_src: list[torch.Tensor] = []
    for name, dst in targets.items():
        src = sources[name].detach()
        if src.device != dst.device or src.dtype != dst.dtype:
            src = src.to(device=dst.device, dtype=dst.dtype)
        if decay == 0.0 or not dst.is_floating_point():
            copy_dst.append(dst)
            copy_src.append(src)
        else:
            blend_dst.append(dst)
            blend_src.append(src)
    with torch.no_grad():
        if copy_dst:
            torch._foreach_copy_(copy_dst, copy_src)
        if blend_dst:
            # lerp(target, source, w) = target + w * (source - target); w = 1 - decay.
            torch._foreach_lerp_(blend_dst, blend_src, 1.0 - decay)


class Model(nn.Module):
    """Base class of the networks of an algorithm; write ``__init__`` and ``forward`` as usual.

    On top of ``torch.nn.Module`` it moves weights as numpy arrays (``get_weights`` /
    ``set_weights``), for example to actors in other processes, and updates target networks
    (``sync_weights_to``). A target network is ``copy.deepcopy(model)``.
    """

    def get_weights(self) -> dict[str, np.ndarray]:
        """Parameters and persistent buffers as ``{state_dict name: numpy copy}``."""
        return module_weights(self)

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Load ``weights`` from ``get_weights()`` of a model with the same architecture.

        Raises ``TypeError`` if ``weights`` is not a mapping and ``parl.WeightsMismatchError``
        (also a ``ValueError`` and, as in PARL, a ``RuntimeError``) naming the tensor when a name
        is missing or unexpected or a shape differs.
        """
        set_module_weights(self, weights)

    def sync_weights_to(self, target_model: nn.Module, decay: float = 0.0) -> None:
        """Update ``target_model`` in place: ``target = decay * target + (1 - decay) * self``.

        ``decay=0`` copies the weights; ``decay=0.995`` is a soft (Polyak) update with
        ``tau = 0.005``. Both models need the same tensor names and shapes.
        """
        sync_module_weights(self, target_model, decay)
