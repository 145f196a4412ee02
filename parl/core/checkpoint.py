"""Checkpoint files: atomic writes, checked loads and full training checkpoints.

Two kinds of file are written with ``torch.save``:

* a model checkpoint (``Agent.save``): the model's ``state_dict``, readable with plain
  ``torch.load`` and ``model.load_state_dict``;
* a training checkpoint (``Agent.save_checkpoint``): every model, optimizer and learning-rate
  scheduler of an algorithm, the random number generator states of Python, numpy and torch, and
  the caller's step counters, so that a run resumed from it continues exactly as it would have.

Files are written to a temporary file next to the destination and renamed over it, so an
interrupted save leaves either the previous file or the new one, never half of one. Loading uses
``torch.load(weights_only=True)``: a checkpoint cannot run code when it is read.
"""

from __future__ import annotations

import copy
import os
import pickle
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from parl.atomic_file import atomic_write
from parl.core.model import check_tensors_fit

__all__ = [
    "TrainingState",
    "atomic_save",
    "capture_rng_state",
    "load_file",
    "load_training_checkpoint",
    "load_weights_checked",
    "restore_rng_state",
    "save_training_checkpoint",
]

_FORMAT = "parl.training_checkpoint"
_VERSION = 1

PathLike = str | os.PathLike[str]
Number = int | float | np.integer[Any] | np.floating[Any]


class TrainingState(NamedTuple):
    """What a training checkpoint gives back besides the restored models and optimizers."""

    counters: dict[str, int | float]
    extra: dict[str, Any]


def _check_path(path: object, argument: str = "save_path") -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{argument} must be a str or os.PathLike, got {type(path).__name__}")
    return Path(os.fspath(path))


def atomic_save(obj: Any, path: PathLike) -> Path:
    """``torch.save(obj)`` to ``path`` atomically (see ``parl.atomic_file``),
    creating missing parent folders."""
    return atomic_write(_check_path(path), lambda handle: torch.save(obj, handle))


def load_file(path: PathLike, map_location: Any = None) -> Any:
    """``torch.load`` with ``weights_only=True``; ``map_location=None`` loads onto the CPU."""
    source = _check_path(path)
    if not source.is_file():
        raise FileNotFoundError(f"no checkpoint file at {str(source)!r}")
    try:
        return torch.load(
            source, map_location="cpu" if map_location is None else map_location, weights_only=True
        )
    except Exception as exc:
        if not _damaged(exc):
            raise
        size = source.stat().st_size
        raise ValueError(
            f"checkpoint {str(source)!r} ({size} bytes) cannot be read: it is truncated or "
            f"corrupted, or not a file torch.load(weights_only=True) reads ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); write it again, or "
            f"point to another checkpoint (parl's saves are atomic, so a save that was "
            f"interrupted leaves the previous file whole)"
        ) from exc


def _damaged(exc: Exception) -> bool:
    """Whether ``torch.load`` failed on the file's bytes: torch says so with an empty
    ``EOFError``, an ``OSError`` without the file's name, the zip reader's ``RuntimeError`` or
    an ``UnpicklingError`` about ``weights_only`` (not, say, a ``map_location`` it lacks)."""
    if isinstance(exc, FileNotFoundError | PermissionError):
        return False
    if isinstance(exc, EOFError | OSError | pickle.UnpicklingError):
        return True
    return isinstance(exc, RuntimeError) and "PytorchStreamReader" in str(exc)


def load_weights_checked(module: nn.Module, state: Any, source: str) -> None:
    """``module.load_state_dict(state)`` after checking every name and shape.

    A checkpoint of a different architecture raises ``ValueError`` naming the tensor that does
    not fit (``source`` says where the state came from).
    """
    if not isinstance(state, Mapping):
        raise ValueError(f"{source} does not hold a state_dict (found {type(state).__name__})")
    if state.get("format") == _FORMAT:
        raise ValueError(
            f"{source} is a training checkpoint (written by save_checkpoint): load it with "
            f"agent.restore_checkpoint(path); restore() reads the files save() writes"
        )
    check_tensors_fit(
        dict(module.state_dict(keep_vars=True)), state, what=source, owner=type(module).__name__
    )
    module.load_state_dict(state)


# -- random number generators ------------------------------------------------------------------
def capture_rng_state() -> dict[str, Any]:
    """States of Python's ``random``, numpy's global generator and torch (CPU and CUDA)."""
    np_state = np.random.get_state(legacy=False)
    assert isinstance(np_state, dict)
    inner = np_state["state"]
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np.asarray(inner["key"]).astype(np.int64)),
            "pos": int(inner["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Inverse of ``capture_rng_state``."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": np_state["bit_generator"],
            "state": {
                "key": np_state["key"].cpu().numpy().astype(np.uint32),
                "pos": np_state["pos"],
            },
            "has_gauss": np_state["has_gauss"],
            "gauss": np_state["gauss"],
        }
    )
    # a map_location may have moved these tensors; generators take their states from the CPU
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([cuda.cpu() for cuda in state["cuda"]])


# -- training checkpoints ----------------------------------------------------------------------
def _check_counters(counters: Mapping[str, Any] | None) -> dict[str, int | float]:
    if counters is None:
        return {}
    if not isinstance(counters, Mapping):
        raise TypeError(f"counters must be a dict of name -> int, got {type(counters).__name__}")
    checked: dict[str, int | float] = {}
    for name, value in counters.items():
        if not isinstance(name, str):
            raise TypeError(f"counters keys must be str, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(
                f"counters[{name!r}] must be an int or float, got {type(value).__name__}"
            )
        checked[name] = value.item() if isinstance(value, np.generic) else value
    return checked


_NUMPY_TAG = "__parl_numpy__"  # {tag: tensor, "scalar": bool}: a numpy array or scalar in extra
_EXTRA_LEAVES = (torch.Tensor, bool, int, float, complex, str, bytes, type(None), torch.dtype)


def _encode_extra(value: Any, where: str) -> Any:
    """``extra`` as ``torch.load(weights_only=True)`` reads it back: numpy arrays and scalars
    become tagged tensors (:func:`_decode_extra` turns them back); anything it could not read
    is refused now, not when resuming."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        try:
            tensor = torch.from_numpy(np.array(array, copy=True, order="C"))
        except TypeError:
            raise TypeError(
                f"{where}: a numpy array of dtype {array.dtype} cannot go into a checkpoint "
                f"(numbers and booleans only)"
            ) from None
        return {_NUMPY_TAG: tensor, "scalar": isinstance(value, np.generic)}
    if isinstance(value, _EXTRA_LEAVES):
        return value
    if isinstance(value, Mapping):
        return {key: _encode_extra(item, f"{where}[{key!r}]") for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_encode_extra(item, f"{where}[{i}]") for i, item in enumerate(value))
    raise TypeError(
        f"{where} is a {type(value).__name__}: a checkpoint's extra holds tensors, numpy arrays, "
        f"numbers, strings, None and lists, tuples and dicts of them (it is read back with "
        f"torch.load(weights_only=True), which refuses other objects); store its state_dict() "
        f"or plain data instead"
    )


def _decode_extra(value: Any) -> Any:
    if isinstance(value, dict):
        if _NUMPY_TAG in value:
            array = value[_NUMPY_TAG].numpy()
            return array[()] if value.get("scalar") else array
        return {key: _decode_extra(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_decode_extra(item) for item in value)
    return value


def save_training_checkpoint(
    path: PathLike,
    models: Mapping[str, nn.Module],
    optimizers: Mapping[str, torch.optim.Optimizer],
    lr_schedulers: Mapping[str, Any] | None = None,
    counters: Mapping[str, Number] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write everything needed to resume training exactly; returns the file's path.

    ``extra`` may hold tensors, numpy arrays, numbers, strings and nested lists/dicts of them
    (for example the ``state_dict()`` of a ``parl.utils`` scheduler, or the running statistics
    of ``wrap_rms``'s ``get_rms_state()``); it comes back from ``load_training_checkpoint``.
    Anything else is a ``TypeError`` here (the load, with ``weights_only=True``, would refuse
    it).
    """
    payload = {
        "format": _FORMAT,
        "version": _VERSION,
        "models": {name: model.state_dict() for name, model in models.items()},
        "optimizers": {name: opt.state_dict() for name, opt in optimizers.items()},
        # the state of one kind loads into another without complaint, and fails at its step
        "optimizer_classes": {name: type(opt).__name__ for name, opt in optimizers.items()},
        "lr_schedulers": {name: s.state_dict() for name, s in (lr_schedulers or {}).items()},
        "rng": capture_rng_state(),
        "counters": _check_counters(counters),
        "extra": _encode_extra(dict(extra or {}), "extra"),
    }
    return atomic_save(payload, path)


def _check_names(
    kind: str, expected: Mapping[str, Any], found: Mapping[str, Any], src: str
) -> None:
    if set(expected) != set(found):
        raise ValueError(
            f"{src} holds {kind} {sorted(found)} but the algorithm has {sorted(expected)}"
        )


def _check_optimizer_classes(
    optimizers: Mapping[str, torch.optim.Optimizer], written: Mapping[str, str], src: str
) -> None:
    """Refuse an optimizer of another class than the checkpoint's (Adam's state in an RMSprop
    loads, and its first step fails on a missing key). Checkpoints written before the classes
    were recorded have none to compare."""
    for name, optimizer in optimizers.items():
        kind = written.get(name)
        if kind is not None and kind != type(optimizer).__name__:
            raise ValueError(
                f"{src}: optimizer {name!r} was {kind} in the run that wrote it, but it is "
                f"{type(optimizer).__name__} here; build the algorithm with that run's optimizer "
                "(the examples' --optimizer)"
            )


def _snapshot(
    models: Mapping[str, nn.Module], optimizers: Mapping[str, Any], schedulers: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Copies of every ``state_dict``, to put back if a restore fails half-way."""
    return {
        "models": {
            name: {k: v.detach().clone() for k, v in model.state_dict().items()}
            for name, model in models.items()
        },
        "optimizers": {name: copy.deepcopy(opt.state_dict()) for name, opt in optimizers.items()},
        "lr_schedulers": {name: copy.deepcopy(s.state_dict()) for name, s in schedulers.items()},
    }


def load_training_checkpoint(
    path: PathLike,
    models: Mapping[str, nn.Module],
    optimizers: Mapping[str, torch.optim.Optimizer],
    lr_schedulers: Mapping[str, Any] | None = None,
    map_location: Any = None,
    restore_rng: bool = True,
) -> TrainingState:
    """Restore what ``save_training_checkpoint`` wrote, after checking that it all fits."""
    source = f"checkpoint {os.fspath(path)!r}"
    payload = load_file(path, map_location)
    if not isinstance(payload, Mapping) or payload.get("format") != _FORMAT:
        raise ValueError(
            f"{source} is not a training checkpoint (write one with Agent.save_checkpoint; "
            f"use Agent.restore for a model checkpoint)"
        )
    lr_schedulers = lr_schedulers or {}
    _check_names("models", models, payload["models"], source)
    _check_names("optimizers", optimizers, payload["optimizers"], source)
    _check_names("lr_schedulers", lr_schedulers, payload["lr_schedulers"], source)
    _check_optimizer_classes(optimizers, payload.get("optimizer_classes", {}), source)
    for name, model in models.items():  # check every model before changing any
        check_tensors_fit(
            dict(model.state_dict(keep_vars=True)),
            payload["models"][name],
            what=f"{source}, model {name!r}",
            owner=type(model).__name__,
        )
    # an optimizer or scheduler that does not fit shows only when loading it: keep what was
    # there, so that a failed restore leaves the algorithm as it was, not half restored
    before = _snapshot(models, optimizers, lr_schedulers)
    try:
        for name, model in models.items():
            model.load_state_dict(payload["models"][name])
        for name, optimizer in optimizers.items():
            try:
                optimizer.load_state_dict(payload["optimizers"][name])
            except ValueError as exc:
                raise ValueError(f"{source}: optimizer {name!r} does not fit: {exc}") from None
        for name, scheduler in lr_schedulers.items():
            scheduler.load_state_dict(payload["lr_schedulers"][name])
    except BaseException:
        for kind, objects in (("models", models), ("optimizers", optimizers),
                              ("lr_schedulers", lr_schedulers)):  # fmt: skip
            for name, obj in objects.items():
                obj.load_state_dict(before[kind][name])
        raise
    if restore_rng:
        restore_rng_state(payload["rng"])
    return TrainingState(
        counters=dict(payload["counters"]), extra=_decode_extra(dict(payload["extra"]))
    )
