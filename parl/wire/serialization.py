"""Pickle protocol 5 with out-of-band buffers, falling back to dill for by-value objects.

``dumps`` separates large payloads (numpy arrays, CPU torch tensors) from the pickle stream as
:class:`pickle.PickleBuffer` objects so that a carrier can move them without copying through the
stream. Objects that plain pickle can only save by reference and that the receiver could not
import (classes and functions defined in ``__main__``, lambdas, closures) are saved by value
with dill. ``loads`` needs nothing but the standard unpickler: dill's output names its own
helpers, which the unpickler imports on demand.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
from collections.abc import Callable
from typing import Any

from parl.errors import SerializationError

PROTOCOL = 5

# torch dtypes that numpy lacks, moved as the integer type of the same width
_VIEW_AS_INT = {
    "bfloat16": "int16",
    "complex32": "int32",
    "float8_e4m3fn": "int8",
    "float8_e5m2": "int8",
    "float8_e4m3fnuz": "int8",
    "float8_e5m2fnuz": "int8",
}


def _rebuild_tensor(array: Any, requires_grad: bool, is_parameter: bool, view_dtype: str) -> Any:
    import torch

    tensor = torch.from_numpy(array)
    if view_dtype:
        tensor = tensor.view(getattr(torch, view_dtype))
    if is_parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _reduce_tensor(obj: Any) -> Any:
    """Reduce a dense CPU tensor to a numpy view so its storage travels out of band."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return NotImplemented
    if type(obj) not in (torch.Tensor, torch.nn.Parameter):
        return NotImplemented
    if obj.device.type != "cpu" or obj.layout != torch.strided or obj.is_quantized:
        return NotImplemented
    tensor = obj.detach()
    if tensor.is_conj() or tensor.is_neg():
        tensor = tensor.resolve_conj().resolve_neg()
    tensor = tensor.contiguous()
    dtype_name = str(tensor.dtype).removeprefix("torch.")
    view_dtype = ""
    if dtype_name in _VIEW_AS_INT:
        tensor = tensor.view(getattr(torch, _VIEW_AS_INT[dtype_name]))
        view_dtype = dtype_name
    try:
        array = tensor.numpy()
    except (TypeError, RuntimeError):
        return NotImplemented
    is_parameter = isinstance(obj, torch.nn.Parameter)
    return _rebuild_tensor, (array, obj.requires_grad, is_parameter, view_dtype)


class _ByValue(Exception):
    """Raised inside pickle for what only dill can save (by value)."""


_BY_REFERENCE_KINDS = (type, types.FunctionType)


Stage = Callable[[int], Any]  # nbytes -> writable memory to build a buffer in, or None


def _rebuild_subclass(base: Any, cls: type) -> Any:
    return base.view(cls)


def _reduce_array(obj: Any, stage: Stage | None) -> Any:
    """Out-of-band buffers for the arrays numpy itself pickles in band: non-contiguous arrays
    (copied once, into ``stage`` memory when the link offers it) and plain subclasses (matrix,
    recarray, memmap...: the data out of band, the class applied again on arrival)."""
    np = sys.modules.get("numpy")
    if np is None or not isinstance(obj, np.ndarray) or obj.dtype.hasobject:
        return NotImplemented
    cls = type(obj)
    if cls is not np.ndarray and (
        cls.__reduce_ex__ is not np.ndarray.__reduce_ex__
        or cls.__reduce__ is not np.ndarray.__reduce__
        or cls.__setstate__ is not np.ndarray.__setstate__
    ):
        return NotImplemented  # e.g. masked arrays: pickled their own way
    contiguous = obj.flags.c_contiguous or obj.flags.f_contiguous
    if contiguous and cls is np.ndarray:
        return NotImplemented  # numpy's own reduction is out of band already
    base = obj.view(np.ndarray)
    if not contiguous:
        memory = stage(obj.nbytes) if stage is not None and obj.nbytes else None
        if memory is None:
            base = np.ascontiguousarray(base)
        else:
            out = memory.view(obj.dtype).reshape(obj.shape)
            np.copyto(out, base)
            base = out
    if cls is np.ndarray:
        return base.__reduce_ex__(PROTOCOL)
    return _rebuild_subclass, (base, cls)


class _Pickler(pickle.Pickler):
    stage: Stage | None = None

    def reducer_override(self, obj: Any) -> Any:
        # Plain pickle saves objects of __main__ by reference, which the receiver cannot import.
        if type(obj).__module__ == "__main__" or (
            isinstance(obj, _BY_REFERENCE_KINDS) and getattr(obj, "__module__", "") == "__main__"
        ):
            raise _ByValue
        reduced = _reduce_tensor(obj)
        if reduced is NotImplemented:
            reduced = _reduce_array(obj, self.stage)
        return reduced


_dill_pickler: type | None = None


def _dill_pickler_class() -> type:
    global _dill_pickler
    if _dill_pickler is None:
        import dill

        class _DillPickler(dill.Pickler):
            def reducer_override(self, obj: Any) -> Any:
                reduced = _reduce_tensor(obj)
                if reduced is NotImplemented:
                    reduced = _reduce_array(obj, None)
                return reduced

        _dill_pickler = _DillPickler
    return _dill_pickler


def dumps(obj: Any, stage: Stage | None = None) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Serialize ``obj``; returns the pickle stream and its out-of-band buffers.

    ``stage`` (from the link) gives memory that a non-contiguous array is copied into once.

    Raises :class:`parl.errors.SerializationError` (a ``TypeError``) when neither pickle nor
    dill can save the object.
    """
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    try:
        pickler = _Pickler(stream, PROTOCOL, buffer_callback=buffers.append)
        pickler.stage = stage
        pickler.dump(obj)
        return stream.getvalue(), buffers
    except Exception:  # noqa: BLE001 - any failure means "try by value"
        pass
    buffers.clear()
    stream = io.BytesIO()
    try:
        pickler = _dill_pickler_class()(
            stream, PROTOCOL, buffer_callback=buffers.append, recurse=True, byref=False
        )
        pickler.dump(obj)
    except Exception as exc:  # noqa: BLE001
        raise SerializationError(f"{type(exc).__name__}: {exc}") from exc
    return stream.getvalue(), buffers


def loads(data: bytes | bytearray | memoryview, buffers: list[Any] | tuple[Any, ...] = ()) -> Any:
    """Inverse of :func:`dumps`: ``buffers`` replace the out-of-band buffers, in order."""
    return pickle.loads(data, buffers=buffers)
