"""``parl.Agent``: the numpy face of an algorithm.

An agent turns numpy observations into tensors on the algorithm's device, calls the algorithm and
hands numpy back; it also owns what surrounds training: the train/eval mode, model checkpoints
(``save`` / ``restore``) and full training checkpoints (``save_checkpoint`` /
``restore_checkpoint``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from parl.core.algorithm import Algorithm, resolve_device
from parl.core.checkpoint import (
    Number,
    TrainingState,
    atomic_save,
    load_file,
    load_training_checkpoint,
    load_weights_checked,
    save_training_checkpoint,
)

__all__ = ["Agent"]


class Agent:
    """Base class of agents. Subclasses implement ``learn``, ``predict`` and ``sample``.

    A typical method converts with ``self.to_tensor``, calls ``self.alg`` and returns
    ``self.to_numpy(...)`` (or a Python number).
    """

    #: Set by ``device = ...`` (before or after ``super().__init__``); ``None``: the algorithm's.
    _device: torch.device | None = None

    def __init__(self, algorithm: Algorithm) -> None:
        if not isinstance(algorithm, Algorithm):
            raise TypeError(
                f"{type(self).__name__}(algorithm): algorithm must be a parl.Algorithm, "
                f"got {type(algorithm).__name__}"
            )
        self.alg = algorithm
        self.training = True
        self.train()

    # -- conversion ----------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Where ``to_tensor`` puts data: the device of the algorithm's models unless set.

        Agents written for PARL set it themselves (``self.device = torch.device("cuda" if
        torch.cuda.is_available() else "cpu")``); setting ``None`` goes back to the default.
        """
        if self._device is not None:
            return self._device
        return self.alg.device

    @device.setter
    def device(self, device: torch.device | str | None) -> None:
        self._device = None if device is None else resolve_device(device)

    def to_tensor(self, array: Any, dtype: torch.dtype | None = torch.float32) -> torch.Tensor:
        """``array`` (numpy, list or number) as a tensor on ``self.device``.

        ``dtype=None`` keeps the array's own dtype (use it for integer actions).
        """
        contiguous = np.require(array, requirements="C")  # negative strides need a copy
        return torch.as_tensor(contiguous, dtype=dtype, device=self.device)

    @staticmethod
    def to_numpy(tensor: torch.Tensor) -> np.ndarray:
        """A CPU numpy copy of ``tensor`` (detached from the graph)."""
        return tensor.detach().cpu().numpy()

    # -- mode ----------------------------------------------------------------------------------
    def train(self) -> None:
        """Training mode for every model of the algorithm (dropout, batch norm statistics)."""
        self.training = True
        for model in self.alg.named_models().values():
            model.train()

    def eval(self) -> None:
        """Evaluation mode for every model of the algorithm."""
        self.training = False
        for model in self.alg.named_models().values():
            model.eval()

    # -- the agent proper ----------------------------------------------------------------------
    def learn(self, *args: Any, **kwargs: Any) -> Any:
        """Update the algorithm from numpy data; subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement learn()")

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """Greedy action(s) for numpy observation(s); subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement predict()")

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        """Exploring action(s) for numpy observation(s); subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement sample()")

    # -- weights -------------------------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """Weights of ``self.alg.model``, as PARL gives them (see ``Algorithm.get_weights``)."""
        return self.alg.get_weights()

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Load the output of ``get_weights()`` into ``self.alg.model``."""
        self.alg.set_weights(weights)

    def get_all_weights(self) -> dict[str, np.ndarray]:
        """Weights of every model of the algorithm (see ``Algorithm.get_all_weights``)."""
        return self.alg.get_all_weights()

    def set_all_weights(self, weights: Mapping[str, Any]) -> None:
        """Load the output of ``get_all_weights()`` of an agent with the same algorithm."""
        self.alg.set_all_weights(weights)

    # -- model checkpoints ---------------------------------------------------------------------
    def _model_or_default(self, model: nn.Module | None) -> nn.Module:
        if model is None:
            return self.alg.model
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a parl.Model or None, got {type(model).__name__}")
        return model

    def save(self, save_path: str | os.PathLike[str], model: nn.Module | None = None) -> Path:
        """Save the ``state_dict`` of ``model`` (default ``self.alg.model``) to ``save_path``.

        The write is atomic and missing parent folders are created. Returns the path written.
        """
        return atomic_save(self._model_or_default(model).state_dict(), save_path)

    def restore(
        self,
        save_path: str | os.PathLike[str],
        model: nn.Module | None = None,
        map_location: Any = None,
    ) -> None:
        """Load a file written by ``save`` into ``model`` (default ``self.alg.model``).

        ``map_location`` is passed to ``torch.load`` (default: load onto the CPU, then copy into
        the model wherever it lives). A checkpoint of another architecture raises ``ValueError``
        naming the tensor that does not fit.
        """
        target = self._model_or_default(model)
        state = load_file(save_path, map_location)
        load_weights_checked(target, state, f"checkpoint {os.fspath(save_path)!r}")

    # -- training checkpoints ------------------------------------------------------------------
    def save_checkpoint(
        self,
        save_path: str | os.PathLike[str],
        counters: Mapping[str, Number] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Save a full training checkpoint: all models, optimizers, learning-rate schedulers and
        random number generator states of this process, plus ``counters`` (e.g.
        ``{"episode": 120, "total_steps": 35210}``) and ``extra`` (tensors, numpy arrays and plain
        data, such as ``scheduler.state_dict()``). Atomic, like ``save``.
        """
        return save_training_checkpoint(
            save_path,
            self.alg.named_models(),
            self.alg.named_optimizers(),
            self.alg.named_lr_schedulers(),
            counters=counters,
            extra=extra,
        )

    def restore_checkpoint(
        self,
        save_path: str | os.PathLike[str],
        map_location: Any = None,
        restore_rng: bool = True,
    ) -> TrainingState:
        """Restore a file from ``save_checkpoint`` and return its ``(counters, extra)``.

        Continuing from here reproduces the original run exactly, given the same data.
        """
        return load_training_checkpoint(
            save_path,
            self.alg.named_models(),
            self.alg.named_optimizers(),
            self.alg.named_lr_schedulers(),
            map_location=map_location,
            restore_rng=restore_rng,
        )
