"""Pieces shared by the off-policy algorithms (DQN, DDQN, DDPG, TD3, SAC).

They exist to keep the per-update Python work small: a target update that is one fused
``torch._foreach_lerp_`` over tensor lists built once, Adam with the fused (or foreach) kernel, and
batch reshaping that only makes views.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import torch
from torch import nn

from parl.core.model import sync_module_weights
from parl.validation import check_float

__all__ = [
    "TargetSync",
    "as_flat",
    "check_transitions",
    "clip_grad_norm",
    "make_adam",
    "make_target",
    "soft_update_decay",
]


def make_adam(params: Iterable[torch.Tensor], lr: float) -> torch.optim.Adam:
    """Adam with PyTorch's defaults, using the fused kernel when the device supports it.

    The fused and foreach kernels compute the same update as the per-parameter loop; they only
    replace tens of small kernel launches by one or two, which is most of an optimizer step on
    networks of this size.
    """
    params = list(params)
    if not params:
        raise ValueError("the optimizer got no parameters: the model returned an empty list")
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):  # a device or dtype without a fused kernel
        return torch.optim.Adam(params, lr=lr, foreach=True)


@torch.no_grad()
def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> None:
    """Scale the gradients of ``params`` so that their global L2 norm is at most ``max_norm``.

    The same result as ``torch.nn.utils.clip_grad_norm_`` (coefficient ``max_norm / (norm +
    1e-6)``, capped at 1), in four tensor operations and without its per-call grouping of
    tensors by device and dtype, which costs more than the arithmetic on small networks.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (total + 1e-6)).clamp_(max=1.0))


def check_transitions(
    owner: str,
    obs: object,
    action: object,
    reward: object,
    next_obs: object,
    terminal: object,
) -> None:
    """Refuse a batch of transitions that is not tensors of one batch size: ``obs`` and
    ``next_obs`` ``(B, *obs_shape)``, ``action`` ``(B, act_dim)``, ``reward`` and ``terminal``
    ``(B,)`` or ``(B, 1)``. A reward of another length would otherwise broadcast against the
    batch (a single value given to every transition) or fail deep in the loss.

    Raises:
        TypeError: an argument is not a ``torch.Tensor`` (a numpy batch, say).
        ValueError: the shapes disagree.
    """
    named = {"obs": obs, "action": action, "reward": reward, "next_obs": next_obs,
             "terminal": terminal}  # fmt: skip
    for name, value in named.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{owner}: {name} must be a torch.Tensor, got {type(value).__name__}; convert a "
                "numpy batch with torch.as_tensor(x, dtype=torch.float32) (an Agent's "
                "to_tensor does this)"
            )
    assert isinstance(obs, torch.Tensor) and isinstance(next_obs, torch.Tensor)
    assert isinstance(action, torch.Tensor)
    if obs.dim() < 2:
        raise ValueError(
            f"{owner}: obs must be a batch (B, obs_dim), got shape {tuple(obs.shape)}; pass "
            "obs.reshape(1, -1) for one transition"
        )
    batch = obs.shape[0]
    if next_obs.shape != obs.shape:
        raise ValueError(
            f"{owner}: next_obs must have obs's shape {tuple(obs.shape)}, got "
            f"{tuple(next_obs.shape)}"
        )
    if action.dim() != 2 or action.shape[0] != batch:
        raise ValueError(
            f"{owner}: action must be ({batch}, act_dim), one row per transition, got "
            f"{tuple(action.shape)}"
        )
    for name in ("reward", "terminal"):
        shape = tuple(named[name].shape)  # type: ignore[attr-defined]
        if shape not in ((batch,), (batch, 1)):
            raise ValueError(
                f"{owner}: {name} must be ({batch},) or ({batch}, 1), one value per transition "
                f"of the batch of {batch}, got {shape}"
            )


def as_flat(tensor: torch.Tensor) -> torch.Tensor:
    """``(B,)`` or ``(B, 1)`` -> ``(B,)`` (a view): PARL's agents pass columns, ours vectors."""
    return tensor.reshape(-1)


def soft_update_decay(decay: float | None, tau: float) -> float:
    """PARL's convention: ``decay=None`` means ``1 - tau``; otherwise a float in ``[0, 1]``."""
    if decay is None:
        return 1.0 - tau
    return check_float(
        "decay", decay, low=0, high=1, owner="sync_target", what="a float in [0, 1] or None"
    )


class TargetSync:
    """``target = decay * target + (1 - decay) * model`` for every floating tensor, in one call.

    The tensor lists are built once (names and shapes checked then); each update is a single
    ``torch._foreach_lerp_``. Loading weights in place (``set_weights``, ``restore``,
    ``load_state_dict``) keeps the same tensors, so the lists stay valid; after ``model.to(...)``
    call ``refresh()``.
    """

    def __init__(self, model: nn.Module, target: nn.Module) -> None:
        self.model = model
        self.target = target
        self.refresh()

    def refresh(self) -> None:
        """Rebuild the tensor lists (after moving or replacing the models' tensors)."""
        sync_module_weights(self.model, self.target, 0.0)  # checks names and shapes, copies
        sources = dict(self.model.state_dict(keep_vars=True))
        targets = dict(self.target.state_dict(keep_vars=True))
        self._src = [sources[name].detach() for name, t in targets.items() if t.is_floating_point()]
        self._dst = [t.detach() for t in targets.values() if t.is_floating_point()]
        self._other = [name for name, t in targets.items() if not t.is_floating_point()]

    @torch.no_grad()
    def __call__(self, decay: float) -> None:
        if decay == 0.0 or self._other:
            sync_module_weights(self.model, self.target, decay)
        else:
            torch._foreach_lerp_(self._dst, self._src, 1.0 - decay)


def make_target(model: nn.Module) -> nn.Module:
    """A frozen copy of ``model``: its parameters never collect gradients."""
    target = copy.deepcopy(model)
    target.requires_grad_(False)
    return target
