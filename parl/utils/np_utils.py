"""PARL's numpy helpers for policies kept as numpy arrays (AlphaZero's search, tabular code).

Both work on the last axis and keep the others: ``np_softmax`` turns logits into probabilities,
``np_cross_entropy`` compares probabilities with labels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["np_cross_entropy", "np_softmax"]


def np_softmax(logits: Any) -> np.ndarray:
    """``exp(logits) / sum(exp(logits))`` over the last axis, for an array of any shape.

    The largest logit of each row is subtracted first, which leaves the result unchanged and
    keeps ``exp`` from overflowing (logits of 1000 give probabilities, not ``nan``).
    """
    logits = np.asarray(logits)
    if logits.dtype.kind not in "biuf" or logits.ndim == 0:
        raise TypeError(
            f"logits must be a numeric array with at least one axis, got {logits!r} "
            f"(dtype {logits.dtype}, shape {logits.shape})"
        )
    shifted = logits - np.max(logits, axis=-1, keepdims=True)
    exps = np.exp(shifted)
    return exps / np.sum(exps, axis=-1, keepdims=True)


def np_cross_entropy(probs: Any, labels: Any) -> np.ndarray:
    """``-sum(labels * log(probs))`` over the last axis, keeping it as an axis of size 1.

    Args:
        probs: ``(..., n_classes)`` probabilities.
        labels: ``(..., n_classes)`` target probabilities (one-hot or soft), or ``(..., 1)``
            integer class indices (sparse labels), as in PARL: a last axis of size 1 means
            indices.

    Returns:
        ``(..., 1)`` cross-entropies.
    """
    probs = np.asarray(probs)
    labels = np.asarray(labels)
    if probs.ndim == 0 or labels.ndim == 0:
        raise ValueError(
            f"probs and labels need a class axis, got shapes {probs.shape} and {labels.shape}"
        )
    n_classes = probs.shape[-1]
    if labels.shape[-1] == 1:
        if labels.shape[:-1] != probs.shape[:-1]:
            raise ValueError(
                f"sparse labels of shape {labels.shape} do not match probs of shape "
                f"{probs.shape}: give one class index per row, shape {probs.shape[:-1] + (1,)}"
            )
        if labels.dtype.kind not in "iu":
            raise TypeError(
                f"labels with a last axis of size 1 are class indices and must be integers, "
                f"got dtype {labels.dtype}; cast them with labels.astype(int)"
            )
        if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
            raise ValueError(
                f"labels hold class indices outside [0, {n_classes}): "
                f"min {labels.min()}, max {labels.max()}"
            )
        labels = np.eye(n_classes)[labels[..., 0]]
    elif labels.shape != probs.shape:
        raise ValueError(
            f"labels of shape {labels.shape} do not match probs of shape {probs.shape}: give "
            f"one row of target probabilities per row of probs, or (..., 1) class indices"
        )
    return -np.sum(labels * np.log(probs), axis=-1, keepdims=True)
