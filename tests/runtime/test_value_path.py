"""The lean path of a large value (issue 7, 1 MiB row): what it shortcuts must not change.

- plain contiguous arrays of built-in dtypes are reduced by parl, not numpy: dtype, shape,
  memory order, values and read-only flag come out as numpy's own reduction gives them, and every
  other array (structured, datetime, strings, big-endian, object, strided, subclasses) still
  takes the general path;
- weak-reference callbacks replaced ``weakref.finalize`` for blocks and received views: the
  memory still comes back to the sender, and nothing stays registered once views are dropped.
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
    copied into the same block (no new pages, no new segment)."""
    actor = Sampler()
    try:
        data = np.ones(nbytes // 4, np.float32)
        addresses = {actor.address(data) for _ in range(10)}
        assert len(addresses) == 1  # where the actor maps the block it received
    finally:
        parl.close_actor(actor)
