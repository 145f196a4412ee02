"""The lean path of a large value: what it shortcuts must not change.

- plain contiguous arrays of built-in dtypes are reduced by parl, not numpy: dtype, shape,
  memory order, values and read-only flag come out as numpy's own reduction gives them, and every
  other array (structured, datetime, strings, big-endian, object, strided, subclasses) still
  takes the general path;
- weak-reference callbacks replaced ``weakref.finalize`` for blocks and received views: the
  memory still comes back to the sender, and nothing stays registered once views are dropped;
- arrays of every layout and dtype, and tensors of every dtype, still round-trip through an actor.
"""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import parl
import parl.shm
import parl.shm.link as shm_link
from parl.wire.serialization import Encoder, loads
from tests.runtime.actors import Sampler

BUILTIN = [
    np.float32,
    np.float64,
    np.float16,
    np.int8,
    np.int64,
    np.uint16,
    np.bool_,
    np.complex64,
    np.complex128,
    np.longdouble,
]
OTHER = ["M8[ns]", "m8[s]", "U5", "S3", "V8", ">f4", "<f4, <i4", "O"]


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _through(array: np.ndarray) -> np.ndarray:
    stream, buffers = Encoder().dumps(array)
    # the receiver gets writable buffers, as the links give it (shared views, frame bodies)
    return loads(stream, [bytearray(b.raw()) for b in buffers])


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(
        st.sampled_from(BUILTIN),
        hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
    ),
    st.sampled_from(["C", "F"]),
)
def test_plain_arrays_come_back_as_numpy_would_give_them(array, order):
    array = np.asarray(array, order=order)
    back = _through(array)
    expected = pickle.loads(pickle.dumps(array, 5))
    assert back.dtype == expected.dtype == array.dtype
    assert back.shape == array.shape
    assert back.flags.c_contiguous == expected.flags.c_contiguous
    assert back.flags.f_contiguous == expected.flags.f_contiguous
    assert back.flags.writeable
    np.testing.assert_array_equal(back, array)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_the_short_reduction_is_taken_for_plain_arrays_only():
    plain = np.arange(6, dtype=np.float32).reshape(2, 3)
    stream, buffers = Encoder().dumps(plain)
    assert b"_rebuild_array" in stream and len(buffers) == 1
    for dtype in OTHER:
        array = np.zeros(4, dtype=dtype)
        stream, buffers = Encoder().dumps(array)
        assert b"_rebuild_array" not in stream, dtype
        back = loads(stream, [bytearray(b.raw()) for b in buffers])
        assert back.dtype == array.dtype and back.shape == array.shape
    strided = np.arange(20.0)[::2]
    assert b"_rebuild_array" not in Encoder().dumps(strided)[0]
    np.testing.assert_array_equal(_through(strided), strided)
    matrix = np.asmatrix(np.eye(3))
    assert type(_through(matrix)) is np.matrix


def test_a_read_only_array_stays_read_only_as_with_pickle():
    array = np.arange(1 << 18, dtype=np.float32)
    array.flags.writeable = False
    actor = Sampler()
    try:
        back = actor.echo(array)
        assert not back.flags.writeable  # pickle's READONLY_BUFFER, as numpy's reduction gives
        assert actor.info(array)["writeable"] is False
        np.testing.assert_array_equal(back, array)
        array = np.arange(1 << 18, dtype=np.float32)
        assert actor.echo(array).flags.writeable and actor.info(array)["writeable"]
    finally:
        parl.close_actor(actor)


def test_dropped_views_unregister_and_their_memory_comes_back():
    actor = Sampler()
    try:
        data = np.ones(1 << 18, np.float32)  # 1 MiB: through shared memory both ways
        gc.collect()
        before = len(shm_link._watched)
        views = [actor.echo(data) for _ in range(20)]
        assert len(shm_link._watched) >= before + 20
        assert all(np.array_equal(v, data) for v in views)
        del views
        gc.collect()
        assert len(shm_link._watched) == before
        # each reply's block comes back to the actor with the next request, which then copies
        # its reply into that same block: the same private mapping here, the same address
        addresses = {_address(actor.apply(np.ones, 1 << 18, np.float32)) for _ in range(10)}
        assert len(addresses) == 1
        gc.collect()
        assert len(shm_link._watched) == before
    finally:
        parl.close_actor(actor)


@pytest.mark.parametrize("nbytes", [1 << 17, 1 << 20, 5 << 20])
def test_a_sender_reuses_its_block_once_the_view_is_gone(nbytes):
    """The block's weak-reference callback files it as free: the next value of that size is
    copied into the same block (no new pages, no new segment), also when other free blocks of
    its size are cached (the most recently freed is taken: warm, and mapped by the peer)."""
    actor = Sampler()
    try:
        data = np.ones(nbytes // 4, np.float32)
        # blocks of the size in flight at once, then free: cached for reuse
        actor.add(data, np.stack([data, data])[1])
        addresses = {actor.address(data) for _ in range(10)}
        assert len(addresses) == 1  # where the actor maps the block it received
    finally:
        parl.close_actor(actor)


# -- every layout and dtype still round-trips --------------------------------------------------


def test_arrays_of_every_layout_and_dtype_round_trip():
    n = 1 << 16
    cases = {
        "empty": np.zeros(0),
        "empty-2d": np.zeros((0, 5), np.float32),
        "0-d": np.array(3.5),
        "strided": np.arange(4 * n, dtype=np.float64)[::3],
        "reversed": np.arange(n, dtype=np.float64)[::-1],
        "fortran": np.asfortranarray(np.arange(2 * n, dtype=np.float64).reshape(512, -1)),
        "broadcast": np.broadcast_to(np.arange(8.0), (n, 8)),
        "bool": np.ones(4 * n, bool),
        "complex": np.arange(n) * (1 + 2j),
        "structured": np.zeros(n, dtype=[("a", "i4"), ("b", "f8", (2,))]),
        "unicode": np.array(["hello", "w"] * n),
        "datetime": np.arange(n).astype("datetime64[s]"),
        "float16": np.ones(n, np.float16),
        "read-only": np.frombuffer(b"\x01" * (4 * n), np.uint8),
        "object": np.array([1, "a", None], object),
    }
    actor = Sampler()
    try:
        for name, value in cases.items():
            back = actor.echo(value)
            assert back.dtype == value.dtype and back.shape == value.shape, name
            if value.dtype != object:
                assert np.array_equal(back, value), name
            else:
                assert back.tolist() == value.tolist(), name
        same = np.arange(1 << 16, dtype=np.float64)
        pair = actor.echo((same, same))
        assert pair[0] is pair[1]  # one buffer, identity kept
        shared = parl.shm.zeros(1 << 10)
        alias = actor.echo(shared)
        alias[3] = 7.0
        assert shared[3] == 7.0  # a shared array comes back as a view of itself
        del pair, alias
    finally:
        parl.close_actor(actor)


def test_torch_tensors_of_unusual_dtypes_round_trip():
    """Every case below, and complex32 and the *fnuz float8 types: with serialization.py's
    _VIEW_AS_INT covering bfloat16 and two float8 types only, _reduce_tensor fell back to
    torch's own pickling, which cannot load them (AttributeError: UntypedStorage has no
    attribute 'dtype')."""
    torch = pytest.importorskip("torch")
    import warnings

    n = 1 << 16
    cases = {
        "bfloat16": torch.ones(n, dtype=torch.bfloat16),
        "float8_e4m3fn": torch.ones(n).to(torch.float8_e4m3fn),
        "float8_e5m2": torch.ones(n).to(torch.float8_e5m2),
        "uint16": torch.ones(n, dtype=torch.uint16),
        "uint32": torch.ones(n, dtype=torch.uint32),
        "bool": torch.ones(n, dtype=torch.bool),
        "conj": torch.ones(n, dtype=torch.complex64).conj(),
        "transposed": torch.arange(4.0 * n).reshape(4, -1).t(),
        "empty": torch.zeros(0, 3),
        "0-d": torch.tensor(2.0),
        "strided-int8": torch.ones(8, dtype=torch.int8)[::2],
        "parameter": torch.nn.Parameter(torch.ones(n)),
        "requires-grad": torch.ones(n, requires_grad=True),
    }
    actor = Sampler()
    try:
        for name, value in cases.items():
            back = actor.echo(value)
            assert type(back) is type(value), name
            assert back.dtype == value.dtype and back.shape == value.shape, name
            assert back.requires_grad == value.requires_grad, name
            if value.dtype.itemsize == 1 and value.dtype.is_floating_point:
                assert torch.equal(back.view(torch.uint8), value.view(torch.uint8)), name
            else:
                assert torch.equal(back.detach(), value.detach().resolve_conj()), name

        # torch dtypes numpy lacks, besides bfloat16 and float8
        failures = {}
        for name in ["complex32", "float8_e4m3fnuz", "float8_e5m2fnuz"]:
            dtype = getattr(torch, name, None)
            if dtype is None:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = torch.zeros(1 << 10).to(dtype)
            try:
                back = actor.echo(value)
                assert back.dtype == value.dtype and back.shape == value.shape
            except Exception as exc:  # noqa: BLE001
                failures[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        assert failures == {}
    finally:
        parl.close_actor(actor)
