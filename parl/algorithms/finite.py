"""Checks that stop a learning step before a NaN or infinite number reaches the optimizer: one
such step turns every weight into NaN, and the run fails later and far from the cause (the
actors that load the weights, an evaluation of nothing but NaN)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["check_finite_inputs", "check_finite_step"]


def check_finite_inputs(owner: str, tensors: Mapping[str, torch.Tensor]) -> None:
    """Raise ``ValueError`` naming the first of ``tensors`` (name -> tensor) that holds a NaN or
    an infinity, with its index and value.

    Args:
        owner: the method, as the message names it (``"QMIX.learn"``).
        tensors: the inputs to check, in the order the message should name them.
    """
    if not tensors:
        return
    # one host sync for all of them (this runs every update); the slow search only on failure
    device = next(iter(tensors.values())).device
    every = torch.stack([torch.isfinite(t).all().to(device) for t in tensors.values()])
    if bool(every.all()):
        return
    for name, tensor in tensors.items():
        finite = torch.isfinite(tensor)
        if bool(finite.all()):
            continue
        index = tuple(int(i) for i in torch.nonzero(~finite)[0])
        raise ValueError(
            f"{owner}: {name}[{', '.join(map(str, index))}] is {tensor[index].item()}; the "
            "model was not updated. Look for a diverged return, a reward the env computed "
            "from NaN, or a division by zero where the batch was built"
        )


def check_finite_step(owner: str, what: str, loss: torch.Tensor) -> None:
    """Raise ``FloatingPointError`` if ``loss`` (0-d) is NaN or infinite, before its step.

    Args:
        owner: the method, as the message names it.
        what: which loss (``"the critic's loss"``).
        loss: the loss about to be minimised.
    """
    if bool(torch.isfinite(loss)):
        return
    raise FloatingPointError(
        f"{owner}: {what} is {loss.item()}; that step was not taken. Finite inputs gave it, so "
        "the networks' outputs overflowed: lower the learning rate or clip the gradients"
    )
