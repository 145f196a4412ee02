"""Handing a learner's weights to its actors: flat parameter vectors and a shared weight buffer.

A distributed learner updates its model many times a second; sending each actor a pickled
``state_dict`` after every update costs a pickle, a copy and a call per actor per update.
:class:`SharedWeights` instead keeps one flat float32 copy of the parameters in a ``parl.shm``
shared array (one per learner, whatever the number of actors): the learner writes it after an
update, and each actor reads it when it starts a new rollout, only if its version changed.
Local actors receive the buffer by handle, so nothing is copied between processes but the
actor's own read. Actors on other hosts cannot share memory: send them
:func:`flat_parameters` with one ``set_weights`` call per update instead.

The buffer holds the model's *state*, not only its parameters: the floating-point buffers too
(BatchNorm's running statistics, an :class:`~parl.utils.obs_norm.ObsNormalizer`'s mean and
variance), so an actor normalises its inputs exactly as the learner does. :func:`flat_state`
and :func:`load_flat_state` are the same vector for the by-value path.

A seqlock guards the buffer: the version is odd while the learner writes, and a reader retries
when the version moved under it, so an actor never loads half-written weights.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import torch
from torch import nn

__all__ = [
    "SharedWeights",
    "flat_parameters",
    "flat_state",
    "load_flat_parameters",
    "load_flat_state",
    "parameter_count",
    "state_size",
]


def _state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The parameters, then the floating-point buffers (integer buffers such as BatchNorm's
    ``num_batches_tracked`` are bookkeeping, not state an actor needs)."""
    return [*model.parameters(), *(b for b in model.buffers() if b.is_floating_point())]


def parameter_count(model: nn.Module) -> int:
    """Number of scalars in ``model``'s parameters."""
    return sum(p.numel() for p in model.parameters())


def state_size(model: nn.Module) -> int:
    """Number of scalars in ``model``'s parameters and floating-point buffers."""
    return sum(t.numel() for t in _state_tensors(model))


def _flatten(tensors: list[torch.Tensor], out: np.ndarray | None, owner: str) -> np.ndarray:
    if not tensors:
        values = np.zeros(0, np.float32)
    else:
        flat = torch.cat([t.detach().reshape(-1).to("cpu", torch.float32) for t in tensors])
        values = flat.numpy()
    if out is None:
        return values.copy()
    if out.shape != values.shape:
        raise ValueError(f"{owner}: out has shape {out.shape}, the model has {values.size} values")
    np.copyto(out, values)
    return out


@torch.no_grad()
def _load(
    tensors: list[torch.Tensor], flat: np.ndarray, model: nn.Module, owner: str, noun: str
) -> None:
    expected = sum(t.numel() for t in tensors)
    if np.shape(flat) != (expected,):
        raise ValueError(
            f"{owner}: got a vector of shape {np.shape(flat)}, but {type(model).__name__} has "
            f"{expected} {noun}; were the weights made by another model?"
        )
    with warnings.catch_warnings():
        # a read-only array (Ray's object store, a received view) is only read here: the
        # tensors get copies, so the model never aliases ``flat`` (torch would warn)
        warnings.simplefilter("ignore", UserWarning)
        source = torch.as_tensor(np.asarray(flat, np.float32))
    offset = 0
    for tensor in tensors:
        count = tensor.numel()
        tensor.copy_(source[offset : offset + count].view_as(tensor))
        offset += count


def flat_parameters(model: nn.Module, out: np.ndarray | None = None) -> np.ndarray:
    """``model``'s parameters as one float32 vector (into ``out`` when given)."""
    return _flatten(list(model.parameters()), out, "flat_parameters")


def load_flat_parameters(model: nn.Module, flat: np.ndarray) -> None:
    """Set ``model``'s parameters from a vector made by :func:`flat_parameters`."""
    _load(list(model.parameters()), flat, model, "load_flat_parameters", "parameters")


def flat_state(model: nn.Module, out: np.ndarray | None = None) -> np.ndarray:
    """``model``'s parameters and floating-point buffers as one float32 vector: what an actor
    needs to act as the learner would (a BatchNorm's or an observation normaliser's
    statistics included)."""
    return _flatten(_state_tensors(model), out, "flat_state")


def load_flat_state(model: nn.Module, flat: np.ndarray) -> None:
    """Set ``model``'s parameters and floating-point buffers from :func:`flat_state`'s vector."""
    _load(_state_tensors(model), flat, model, "load_flat_state", "state values")


class SharedWeights:
    """A learner's model state (parameters and floating-point buffers) in shared memory,
    versioned; pass it to actors by handle.

    ``SharedWeights(model)`` in the learner, ``publish(model)`` after updates; in an actor,
    ``pull(model)`` loads the newest weights if they changed since its last pull (returns
    whether it loaded). ``version`` counts the publications.
    """

    def __init__(self, model: nn.Module) -> None:
        import parl.shm  # the runtime's public shared-array API, imported when used

        self._flat = parl.shm.zeros(state_size(model), np.float32)
        self._seq = parl.shm.zeros(1, np.int64)  # odd while the learner writes
        self._seen = -1
        self.publish(model)

    @property
    def version(self) -> int:
        """How many times :meth:`publish` has completed (0 before the first)."""
        return int(self._seq[0]) // 2

    @property
    def size(self) -> int:
        """Number of float32 values in the shared buffer (parameters and floating-point buffers)."""
        return int(self._flat.size)

    def publish(self, model: nn.Module) -> None:
        """Write ``model``'s state (learner side)."""
        self._seq[0] += 1
        flat_state(model, self._flat)
        self._seq[0] += 1

    def pull(self, model: nn.Module, timeout: float = 5.0) -> bool:
        """Load the published weights into ``model`` if they changed (actor side)."""
        deadline = time.monotonic() + timeout
        while True:
            before = int(self._seq[0])
            if before == self._seen:
                return False
            if before % 2 == 0:
                copy = self._flat.copy()
                if int(self._seq[0]) == before:
                    load_flat_state(model, copy)
                    self._seen = before
                    return True
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"SharedWeights.pull: the learner was still writing after {timeout} s "
                    f"(version {before}); did it die while publishing?"
                )
            time.sleep(0.0005)

    def __getstate__(self) -> dict[str, object]:
        # a new holder has seen nothing yet, whatever this one had pulled
        return {"_flat": self._flat, "_seq": self._seq, "_seen": -1}
