"""Pickle protocol 5 with out-of-band buffers; cloudpickle for what must travel by value.

``dumps`` separates large payloads (numpy arrays, CPU torch tensors) from the pickle stream as
:class:`pickle.PickleBuffer` objects so that a carrier can move them without copying through the
stream. What the receiver could not import travels by value: classes and functions defined in
the main script (``__main__``, or ``__mp_main__`` in a ``multiprocessing`` child), lambdas,
closures and classes defined inside functions. Modules always travel by name.

The plain C pickler runs first; the first object that needs saving by value sends the whole
message to a cloudpickle pickler instead. A class that travels by value keeps its identity and
is defined once per connection (:mod:`parl.wire.classes`): a message carrying an instance of a
script class whose definition the peer already holds stays on the plain pickler. ``loads``
needs nothing but the standard unpickler.
"""

from __future__ import annotations

import io
import marshal
import pickle
import sys
import types
import weakref
from collections import ChainMap
from typing import Any, Protocol

from parl.errors import SerializationError
from parl.wire import classes
from parl.wire.unpicklable import find_unpicklable

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
    dtype_name = str(tensor.dtype).removeprefix("torch.")
    view_dtype = ""
    if dtype_name in _VIEW_AS_INT:  # same element size: a view whatever the strides
        tensor = tensor.view(getattr(torch, _VIEW_AS_INT[dtype_name]))
        view_dtype = dtype_name
    try:
        array = tensor.numpy()  # strided like the tensor: the array reducer handles the layout
    except (TypeError, RuntimeError):
        return NotImplemented
    is_parameter = isinstance(obj, torch.nn.Parameter)
    return _rebuild_tensor, (array, obj.requires_grad, is_parameter, view_dtype)


class Memory(Protocol):
    """What the carrier's link tells the pickler about memory (see ``parl.wire.protocol``)."""

    def stage(self, nbytes: int) -> Any:
        """Writable memory to build an outgoing buffer of ``nbytes`` in, or None."""

    def is_handle(self, address: int, nbytes: int) -> bool:
        """Whether ``[address, address + nbytes)`` is memory shared on purpose (a handle)."""


class _Extent:
    """The bytes spanned by a strided array, as an array whose base keeps that array alive."""

    def __init__(self, start: int, nbytes: int, owner: Any) -> None:
        self.__array_interface__ = {
            "data": (start, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }
        self.owner = owner


def _rebuild_strided(
    extent: Any, offset: int, dtype: Any, shape: tuple, strides: tuple, cls: Any
) -> Any:
    np = sys.modules["numpy"]
    out = np.ndarray(shape, dtype, buffer=extent, offset=offset, strides=strides)
    return out if cls is None else out.view(cls)


def _strided_handle(obj: Any, cls: Any, memory: Memory | None, np: Any) -> Any:
    """A strided view of a shared handle (``buf[:, 0]``) travels as the handle's bytes it spans
    plus its strides, so that the receiver writes into the same memory; None otherwise."""
    if memory is None or obj.size == 0:
        return None
    first = obj.__array_interface__["data"][0]
    steps = [(n - 1) * stride for n, stride in zip(obj.shape, obj.strides, strict=True)]
    low = first + sum(step for step in steps if step < 0)  # reversed axes reach below
    span = sum(abs(step) for step in steps) + obj.itemsize
    if not memory.is_handle(low, span):
        return None
    extent = np.asarray(_Extent(low, span, obj))
    return _rebuild_strided, (extent, first - low, obj.dtype, obj.shape, obj.strides, cls)


# numpy.ndarray once numpy has been seen (a stand-in class until then): checked first, since
# arrays are what most messages carry
class _NotYet:
    pass


_ndarray: type = _NotYet
_dtypes: dict[str, Any] = {}  # dtype.str -> dtype, on the receiving side


def _reduce_plain_array(obj: Any) -> Any:
    """A contiguous ``numpy.ndarray`` of a built-in, native dtype, reduced more cheaply than
    numpy does it (numpy pickles the dtype object in full, every message: about 20 us of a
    1 MiB array's transfer): the data out of band, the dtype as its short string. None for
    any other array, which takes the general path (:func:`_reduce_array`)."""
    dtype = obj.dtype
    if dtype.isbuiltin != 1 or dtype.hasobject:
        return None
    flags = obj.flags
    if flags.c_contiguous:
        order = "C"
    elif flags.f_contiguous:
        order = "F"
    else:
        return None
    return _rebuild_array, (pickle.PickleBuffer(obj), dtype.str, obj.shape, order)


def _rebuild_array(buffer: Any, dtype: str, shape: tuple, order: str) -> Any:
    try:
        kind = _dtypes[dtype]
    except KeyError:
        kind = _dtypes[dtype] = sys.modules["numpy"].dtype(dtype)
    array = sys.modules["numpy"].frombuffer(buffer, kind)
    return array.reshape(shape, order=order) if len(shape) != 1 else array


def _rebuild_subclass(base: Any, cls: type) -> Any:
    return base.view(cls)


def _reduce_array(obj: Any, memory: Memory | None) -> Any:
    """Out-of-band buffers for the arrays numpy itself pickles in band: non-contiguous arrays
    (copied once, into ``stage`` memory when the link offers it) and plain subclasses (matrix,
    recarray, memmap...: the data out of band, the class applied again on arrival)."""
    global _ndarray
    np = sys.modules.get("numpy")
    if np is None or not isinstance(obj, np.ndarray) or obj.dtype.hasobject:
        return NotImplemented
    _ndarray = np.ndarray
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
        handle = _strided_handle(base, None if cls is np.ndarray else cls, memory, np)
        if handle is not None:
            return handle
        staged = memory.stage(obj.nbytes) if memory is not None and obj.nbytes else None
        if staged is None:
            base = np.ascontiguousarray(base)
        else:
            out = staged.view(obj.dtype).reshape(obj.shape)
            np.copyto(out, base)
            base = out
    if cls is np.ndarray:
        return base.__reduce_ex__(PROTOCOL)
    return _rebuild_subclass, (base, cls)


def _rebuild_exception(cls: type, base: Any, args: tuple, state: Any, slots: Any) -> Any:
    exc = base.__new__(cls, *args)
    base.__init__(exc, *args)  # the built-in fields (StopIteration.value, OSError.errno...)
    if state:
        exc.__dict__.update(state)
    for name, value in (slots or {}).items():
        setattr(exc, name, value)
    return exc


def reduce_exception(obj: BaseException) -> Any:
    """An exception class of the user's is rebuilt without calling its ``__init__`` (pickle
    calls ``cls(*args)``, which fails for an ``__init__(self, code, message)`` that passes a
    formatted message up): its first built-in base makes it from ``args`` as pickle would,
    then its attributes (``__dict__`` and slots) are put back as they were."""
    cls = type(obj)
    if cls.__module__ == "builtins":
        return NotImplemented  # built-in exceptions pickle well as they are
    base = next(b for b in cls.__mro__ if b.__module__ == "builtins")
    if cls.__reduce__ is not base.__reduce__ or any(
        "__new__" in vars(b) for b in cls.__mro__ if b.__module__ != "builtins"
    ):
        return NotImplemented  # a reduction or a __new__ of its own: pickled its way
    reduced = obj.__reduce__()
    args = reduced[1] if isinstance(reduced, tuple) and len(reduced) > 1 else obj.args
    slots = {
        name: getattr(obj, name)
        for klass in cls.__mro__
        for name in _slot_names(klass)
        if hasattr(obj, name)
    }
    return _rebuild_exception, (cls, base, tuple(args), obj.__dict__ or None, slots or None)


def _slot_names(klass: type) -> list[str]:
    slots = vars(klass).get("__slots__", ())
    names = [slots] if isinstance(slots, str) else list(slots)
    return [n for n in names if n not in ("__dict__", "__weakref__")]


# types whose instances none of the reductions below applies to (a user's dataclass, say):
# asked first, so that an instance of one costs one set lookup. A type found by its module
# and name lives as long as its module and is held here; one that travels by value (made at
# run time, or inside a function, or a script's) is held weakly, by id, and forgotten when it
# is collected: holding it would keep every class made per call alive for good.
_PLAIN: set[type] = set()
_PLAIN_BY_VALUE: dict[int, weakref.ref[type]] = {}


def _is_plain(kind: type) -> bool:
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    return not (
        (np is not None and issubclass(kind, np.ndarray))
        or (torch is not None and issubclass(kind, torch.Tensor))
    )


def _remember_plain(kind: type) -> None:
    if not classes.travels_by_value(kind):
        _PLAIN.add(kind)
        return
    key = id(kind)
    by_value = _PLAIN_BY_VALUE  # held here: at interpreter exit module globals may be None

    def forget(ref: weakref.ref[type]) -> None:
        if by_value.get(key) is ref:
            del by_value[key]

    try:
        by_value[key] = weakref.ref(kind, forget)
    except TypeError:  # no weak references to it: ask the reducers every time
        pass


class _ByValue(Exception):
    """Raised inside the plain pickler for what only cloudpickle can save (by value)."""


class _Reducer:
    """What both picklers share: classes by id or by value, functions, tensors, arrays."""

    memory: Memory | None = None
    sending: Any = None  # the connection's class scope (see parl.wire.classes)

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is _ndarray:
            reduced = _reduce_plain_array(obj)
            if reduced is not None:
                return reduced
        elif kind in _PLAIN or id(kind) in _PLAIN_BY_VALUE:
            return NotImplemented
        if kind is types.FunctionType:
            return self._function(obj)
        if issubclass(kind, type):
            sending = self.sending
            if sending is not None and obj in sending.references:
                return sending.references[obj]  # a class the peer holds: its id, cached
            if classes.travels_by_value(obj):
                # a metaclass may say how its classes travel (parl's proxy classes: as their
                # original class and options, never as generated methods)
                hook = getattr(kind, "_parl_reduce_class", None)
                if hook is not None:
                    return hook(obj)
                return classes.reference(obj, self.sending) or self._class_by_value(obj)
            return self._class_by_reference(obj)
        if issubclass(kind, BaseException):
            return reduce_exception(obj)
        reduced = _reduce_tensor(obj)
        if reduced is NotImplemented:
            reduced = _reduce_array(obj, self.memory)
            if reduced is NotImplemented and _is_plain(kind):
                _remember_plain(kind)
        return reduced

    def _class_by_value(self, obj: type) -> Any:
        raise _ByValue

    def _class_by_reference(self, obj: type) -> Any:
        return NotImplemented

    def _function(self, obj: types.FunctionType) -> Any:
        # plain pickle would name a function of __main__, which the receiver cannot import;
        # lambdas and closures fail by themselves and land in the cloudpickle pickler
        if classes.module_travels_by_value(obj.__module__):
            raise _ByValue
        return NotImplemented


class _Pickler(_Reducer, pickle.Pickler):
    pass


_full_pickler: type | None = None
_registered_mains: set[str] = set()


def _full_pickler_class() -> type:
    """A cloudpickle pickler (imported on first use: most programs never need it)."""
    global _full_pickler
    if _full_pickler is None:
        import cloudpickle

        class _FullPickler(_Reducer, cloudpickle.Pickler):
            # code objects keep their file name (see _reduce_code)
            dispatch_table = ChainMap(
                {types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table
            )

            def _class_by_value(self, obj: type) -> Any:
                _by_value_in_cloudpickle(obj)
                reduced = cloudpickle.Pickler.reducer_override(self, obj)
                if isinstance(reduced, tuple) and len(reduced) == 6:
                    return classes.definition(obj, reduced, self.sending)
                return reduced

            def _class_by_reference(self, obj: type) -> Any:
                return cloudpickle.Pickler.reducer_override(self, obj)  # e.g. NoneType

            def _function(self, obj: types.FunctionType) -> Any:
                _by_value_in_cloudpickle(obj)
                return cloudpickle.Pickler.reducer_override(self, obj)

        _full_pickler = _FullPickler
    return _full_pickler


def _reduce_code(code: types.CodeType) -> tuple[Any, tuple[bytes]]:
    """A function's code by value, with its real ``co_filename``: cloudpickle's own reduction
    renames every file ``<dynamic-code>``, so a remote traceback could not say which file and
    line of the user's script raised. ``marshal`` keeps the code whole (nested code included);
    it ties the payload to this Python version, which a code object's bytecode does anyway
    (the launchers check that both ends run the same Python)."""
    return marshal.loads, (marshal.dumps(code),)


def _by_value_in_cloudpickle(obj: Any) -> None:
    """cloudpickle saves ``__mp_main__`` (a multiprocessing child's script) by name: tell it
    that this module, like ``__main__``, travels by value."""
    name = getattr(obj, "__module__", None)
    if name == "__mp_main__" and name not in _registered_mains and name in sys.modules:
        import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[name])
        _registered_mains.add(name)


def dumps(
    obj: Any, memory: Memory | None = None, sending: Any = None
) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Serialize ``obj``; returns the pickle stream and its out-of-band buffers.

    ``memory`` (the link) says which memory is a shared handle and gives memory that a
    non-contiguous array is copied into once. ``sending`` is the class scope of the connection
    the message is for (``ClassTable.sending``; else the one entered with ``with``).

    Raises :class:`parl.errors.SerializationError` (a ``TypeError``) when ``obj`` cannot be
    pickled, naming the part of it that cannot (``B.run -> global HEADER``).
    """
    try:
        return _dump(_Pickler, obj, memory, sending)
    except Exception:  # noqa: BLE001 - any failure means "try by value"
        return _dumps_by_value(obj, memory, sending)


class Encoder:
    """:func:`dumps` for one connection, with one plain pickler reused for every message:
    making a pickler costs several times what pickling a small call does. Not thread-safe (a
    connection encodes under its send lock)."""

    def __init__(self, memory: Memory | None = None, sending: Any = None) -> None:
        self._memory = memory
        self._sending = sending
        self._chunks: list[bytes] = []
        self._buffers: list[pickle.PickleBuffer] = []
        # the pickler writes each frame of its output with one call: collect them in a list
        out = types.SimpleNamespace(write=self._chunks.append)
        self._pickler = _Pickler(out, PROTOCOL, buffer_callback=self._buffers.append)
        self._pickler.memory = memory
        self._pickler.sending = sending

    def dumps(self, obj: Any) -> tuple[bytes, list[pickle.PickleBuffer]]:
        chunks, buffers, pickler = self._chunks, self._buffers, self._pickler
        if chunks or buffers:
            # left by a message cut short after its pickle was made (a Ctrl-C whose handler
            # ran below, outside the try): never let them go out in front of this one
            chunks.clear()
            buffers.clear()
            pickler.clear_memo()
        try:
            pickler.dump(obj)
        except BaseException as exc:
            chunks.clear()
            buffers.clear()
            pickler.clear_memo()
            if not isinstance(exc, Exception):
                raise
            return _dumps_by_value(obj, self._memory, self._sending)
        pickler.clear_memo()  # it holds the objects pickled: let them go
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        if buffers:
            out = buffers[:]
            buffers.clear()
            return data, out
        return data, _NO_BUFFERS


_NO_BUFFERS: list[pickle.PickleBuffer] = []  # returned for "none", never filled


def _dumps_by_value(
    obj: Any, memory: Memory | None, sending: Any
) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """The cloudpickle pickler, for what the plain one could not pickle."""
    try:
        return _dump(_full_pickler_class(), obj, memory, sending)
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
        found = find_unpicklable(obj, _can_pickle)
        if found is not None:
            message += f" (found at {found})"
        raise SerializationError(message) from exc


def _dump(
    pickler_class: type, obj: Any, memory: Memory | None = None, sending: Any = None
) -> tuple[bytes, list[pickle.PickleBuffer]]:
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    pickler = pickler_class(stream, PROTOCOL, buffer_callback=buffers.append)
    pickler.memory = memory
    pickler.sending = sending
    pickler.dump(obj)
    return stream.getvalue(), buffers


def _can_pickle(obj: Any) -> bool:
    try:
        _dump(_full_pickler_class(), obj)
    except Exception:  # noqa: BLE001
        return False
    return True


def loads(data: bytes | bytearray | memoryview, buffers: list[Any] | tuple[Any, ...] = ()) -> Any:
    """Inverse of :func:`dumps`: ``buffers`` replace the out-of-band buffers, in order."""
    return pickle.loads(data, buffers=buffers)
