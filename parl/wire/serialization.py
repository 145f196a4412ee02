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


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        # Plain pickle saves objects of __main__ by reference, which the receiver cannot import.
        if type(obj).__module__ == "__main__" or (
            isinstance(obj, _BY_REFERENCE_KINDS) and getattr(obj, "__module__", "") == "__main__"
        ):
            raise _ByValue
        return _reduce_tensor(obj)


_dill_pickler: type | None = None


def _dill_pickler_class() -> type:
    global _dill_pickler
    if _dill_pickler is None:
        import dill

        class _DillPickler(dill.Pickler):
            def reducer_override(self, obj: Any) -> Any:
                return _reduce_tensor(obj)

        _dill_pickler = _DillPickler
    return _dill_pickler


def dumps(obj: Any) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Serialize ``obj``; returns the pickle stream and its out-of-band buffers.

    Raises :class:`parl.errors.SerializationError` (a ``TypeError``) when neither pickle nor
    dill can save the object.
    """
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    try:
        _Pickler(stream, PROTOCOL, buffer_callback=buffers.append).dump(obj)
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
