"""Optimizers of evolution strategies: plain numpy steps on a flat parameter vector.

ES estimates a gradient from returns (no autograd), so the step is taken on the flat vector:
``theta, ratio = opt.update(theta, gradient)``, where ``gradient`` points *downhill* (ES passes
``-g + l2_coeff * theta``) and ``ratio`` is ``|step| / |theta|``, the relative size of the update
(a useful health signal: OpenAI's ES logs it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from parl.validation import check_float, check_int

__all__ = ["SGD", "Adam", "ESOptimizer", "Momentum", "make_optimizer"]


class ESOptimizer:
    """Base class: ``_step(gradient) -> step``; ``t`` counts updates."""

    def __init__(self, dim: int, stepsize: float) -> None:
        self.dim = check_int("dim", dim, low=1, owner=type(self).__name__)
        self.stepsize = check_float("stepsize", stepsize, low=0.0, low_open=True,
                                    owner=type(self).__name__)  # fmt: skip
        self.t = 0

    def update(self, theta: np.ndarray, gradient: np.ndarray) -> tuple[np.ndarray, float]:
        if theta.shape != (self.dim,) or gradient.shape != (self.dim,):
            raise ValueError(
                f"{type(self).__name__}.update: theta {theta.shape} and gradient "
                f"{gradient.shape} must both be ({self.dim},)"
            )
        self.t += 1
        step = self._step(gradient.astype(np.float32, copy=False))
        ratio = float(np.linalg.norm(step) / max(float(np.linalg.norm(theta)), 1e-12))
        return (theta + step).astype(np.float32), ratio

    def _step(self, gradient: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _moments(self) -> dict[str, np.ndarray]:
        """The running vectors a training checkpoint must keep (none for plain SGD)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """``t`` and the moment vectors, as tensors: ``Agent.save_checkpoint`` stores this like
        a torch optimizer's (its files load with ``weights_only``, which refuses numpy arrays)."""
        moments = {name: torch.from_numpy(v.copy()) for name, v in self._moments().items()}
        return {"type": type(self).__name__, "t": self.t, **moments}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; a different optimizer or size is a ValueError."""
        name = type(self).__name__
        if state.get("type") != name:
            raise ValueError(f"the checkpoint holds a {state.get('type')} ES optimizer, not {name}")
        arrays = {}
        for key in self._moments():
            value = np.asarray(state[key], np.float32)
            if value.shape != (self.dim,):
                raise ValueError(
                    f"{name}: the checkpoint's {key!r} has shape {value.shape}, this optimizer "
                    f"steps {self.dim} weights"
                )
            arrays[key] = value.copy()
        self.t = int(state["t"])
        for key, value in arrays.items():
            setattr(self, key, value)


class SGD(ESOptimizer):
    """``step = -stepsize * gradient``."""

    def _step(self, gradient: np.ndarray) -> np.ndarray:
        return -self.stepsize * gradient


class Momentum(ESOptimizer):
    """Heavy-ball momentum as in OpenAI's ES (and PARL's "SGD"):
    ``v = momentum * v + (1 - momentum) * gradient``, ``step = -stepsize * v``."""

    def __init__(self, dim: int, stepsize: float, momentum: float = 0.9) -> None:
        super().__init__(dim, stepsize)
        self.momentum = check_float("momentum", momentum, low=0.0, high=1.0, high_open=True,
                                    owner="Momentum")  # fmt: skip
        self.v: np.ndarray = np.zeros(dim, np.float32)

    def _step(self, gradient: np.ndarray) -> np.ndarray:
        self.v = self.momentum * self.v + (1.0 - self.momentum) * gradient
        return -self.stepsize * self.v

    def _moments(self) -> dict[str, np.ndarray]:
        return {"v": self.v}


class Adam(ESOptimizer):
    """Adam (Kingma & Ba 2015) with the bias correction folded into the step size."""

    def __init__(self, dim: int, stepsize: float, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8) -> None:  # fmt: skip
        super().__init__(dim, stepsize)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.m: np.ndarray = np.zeros(dim, np.float32)
        self.v: np.ndarray = np.zeros(dim, np.float32)

    def _step(self, gradient: np.ndarray) -> np.ndarray:
        a = self.stepsize * np.sqrt(1 - self.beta2**self.t) / (1 - self.beta1**self.t)
        self.m = self.beta1 * self.m + (1 - self.beta1) * gradient
        self.v = self.beta2 * self.v + (1 - self.beta2) * gradient * gradient
        return -a * self.m / (np.sqrt(self.v) + self.epsilon)

    def _moments(self) -> dict[str, np.ndarray]:
        return {"m": self.m, "v": self.v}


_OPTIMIZERS: dict[str, type[ESOptimizer]] = {"sgd": SGD, "momentum": Momentum, "adam": Adam}


def make_optimizer(name: str, dim: int, stepsize: float) -> ESOptimizer:
    """``"sgd"``, ``"momentum"`` or ``"adam"`` (any case)."""
    try:
        cls = _OPTIMIZERS[str(name).lower()]
    except KeyError:
        raise ValueError(
            f"ES: optimizer must be one of {sorted(_OPTIMIZERS)}, got {name!r}"
        ) from None
    return cls(dim, stepsize)
