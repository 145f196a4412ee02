"""Handing a learner's weights to its actors: flat parameter vectors and a shared weight buffer.

A distributed learner updates its model many times a second; sending each actor a pickled
``state_dict`` after every update costs a pickle, a copy and a call per actor per update.
:class:`SharedWeights` instead keeps one flat float32 copy of the parameters in a ``parl.shm``
shared array (one per learner, whatever the number of actors): the learner writes it after an
update, and each actor reads it when it starts a new rollout, only if its version changed.
Local actors receive the buffer by handle, so nothing is copied between processes but the
actor's own read. Actors on other hosts cannot share memory: send them
:func:`flat_parameters` with one ``set_weights`` call per update instead.

A seqlock guards the buffer: the version is odd while the learner writes, and a reader retries
when the version moved under it, so an actor never loads half-written weights.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import torch
from torch import nn

__all__ = ["SharedWeights", "flat_parameters", "load_flat_parameters", "parameter_count"]


def parameter_count(model: nn.Module) -> int:
    """Number of scalars in ``model``'s parameters."""
    return sum(p.numel() for p in model.parameters())


def flat_parameters(model: nn.Module, out: np.ndarray | None = None) -> np.ndarray:
    """``model``'s parameters as one float32 vector (into ``out`` when given)."""
    flat = torch.nn.utils.parameters_to_vector([p.detach() for p in model.parameters()])
    values = flat.to("cpu", torch.float32).numpy()
    if out is None:
        return values.copy()
    if out.shape != values.shape:
        raise ValueError(
            f"flat_parameters: out has shape {out.shape}, the model has {values.size} parameters"
        )
    np.copyto(out, values)
    return out


@torch.no_grad()
def load_flat_parameters(model: nn.Module, flat: np.ndarray) -> None:
    """Set ``model``'s parameters from a vector made by :func:`flat_parameters`."""
    expected = parameter_count(model)
    if np.shape(flat) != (expected,):
        raise ValueError(
            f"load_flat_parameters: got a vector of shape {np.shape(flat)}, but "
            f"{type(model).__name__} has {expected} parameters; were the weights made by "
            f"another model?"
        )
    with warnings.catch_warnings():
        # a read-only array (Ray's object store, a received view) is only read here: the
        # parameters get copies, so the model never aliases ``flat`` (torch would warn)
        warnings.simplefilter("ignore", UserWarning)
        source = torch.as_tensor(np.asarray(flat, np.float32))
    offset = 0
    for param in model.parameters():
        count = param.numel()
        param.copy_(source[offset : offset + count].view_as(param))
        offset += count


class SharedWeights:
    """A learner's parameters in shared memory, versioned; pass it to actors by handle.

    ``SharedWeights(model)`` in the learner, ``publish(model)`` after updates; in an actor,
    ``pull(model)`` loads the newest weights if they changed since its last pull (returns
    whether it loaded). ``version`` counts the publications.
    """

    def __init__(self, model: nn.Module) -> None:
        import parl.shm  # the runtime's public shared-array API, imported when used

        self._flat = parl.shm.zeros(parameter_count(model), np.float32)
        self._seq = parl.shm.zeros(1, np.int64)  # odd while the learner writes
        self._seen = -1
        self.publish(model)

    @property
    def version(self) -> int:
        return int(self._seq[0]) // 2

    @property
    def size(self) -> int:
        return int(self._flat.size)

    def publish(self, model: nn.Module) -> None:
        """Write ``model``'s parameters (learner side)."""
        self._seq[0] += 1
        flat_parameters(model, self._flat)
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
                    load_flat_parameters(model, copy)
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
