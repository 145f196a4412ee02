from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from parl.errors import SerializationError
from parl.wire.serialization import dumps, loads


def round_trip(obj):
    stream, buffers = dumps(obj)
    return loads(stream, [b.raw() for b in buffers]), buffers


def test_numpy_arrays_travel_out_of_band():
    a = np.arange(1000, dtype=np.float64).reshape(10, 100)
    out, buffers = round_trip({"a": a, "n": 3})
    assert len(buffers) == 1
    assert buffers[0].raw().nbytes == a.nbytes
    np.testing.assert_array_equal(out["a"], a)
    assert out["n"] == 3


def test_out_of_band_load_does_not_copy():
    a = np.arange(10, dtype=np.int32)
    stream, buffers = dumps(a)
    target = bytearray(buffers[0].raw())
    out = loads(stream, [target])
    target[0] = 99  # the loaded array is a view of the buffer it was given
    assert out[0] == 99


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool])
def test_cpu_tensors_travel_out_of_band(dtype):
    t = (torch.arange(12) % 3).to(dtype).reshape(3, 4)
    out, buffers = round_trip(t)
    assert len(buffers) == 1
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == t.shape
    assert torch.equal(out, t)


def test_parameter_and_requires_grad_survive():
    p = torch.nn.Parameter(torch.ones(3))
    t = torch.zeros(2, requires_grad=True)
    (p2, t2), _ = round_trip((p, t))
    assert isinstance(p2, torch.nn.Parameter) and p2.requires_grad
    assert t2.requires_grad and not isinstance(t2, torch.nn.Parameter)


def test_non_contiguous_tensor():
    t = torch.arange(20.0).reshape(4, 5).t()
    out, _ = round_trip(t)
    assert torch.equal(out, t)


def test_lambdas_and_closures_travel_by_value():
    offset = 10
    fn = lambda x: x + offset  # noqa: E731

    def closure(x):
        return x * offset

    (f, g), _ = round_trip((fn, closure))
    assert f(1) == 11 and g(2) == 20


def test_local_class_travels_by_value():
    class Local:
        def __init__(self, v):
            self.v = v

        def double(self):
            return self.v * 2

    out, _ = round_trip(Local(4))
    assert out.double() == 8


def test_unpicklable_raises_type_error():
    with pytest.raises(TypeError) as info:
        dumps({"gen": (i for i in range(3))})
    assert isinstance(info.value, SerializationError)
    assert "generator" in str(info.value)


def test_plain_pickle_can_read_plain_payloads():
    stream, buffers = dumps([1, "a", (2.5,)])
    assert not buffers
    assert pickle.loads(stream) == [1, "a", (2.5,)]


def test_a_module_sent_by_value_can_go_back_to_by_reference(monkeypatch):
    import sys
    import types

    import cloudpickle

    from parl.wire import classes

    module = types.ModuleType("parl_by_value_probe")
    exec("class Probe:\n    pass\n", module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    probe = module.Probe
    assert not classes.travels_by_value(probe)
    classes.send_by_value(module.__name__)
    assert classes.travels_by_value(probe) and module.__name__ in classes.by_value_modules()
    classes.class_id(probe)  # sent by value once
    classes.send_by_reference(module.__name__)
    assert not classes.travels_by_value(probe)
    assert module.__name__ not in classes.by_value_modules()
    assert b"parl_by_value_probe" in cloudpickle.dumps(probe)  # by reference: the name only
    classes.send_by_reference(module.__name__)  # a second time does nothing
