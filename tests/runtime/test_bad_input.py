"""Bad input gets a clear error naming what was wrong."""

from __future__ import annotations

import threading

import pytest

import parl
from tests.runtime.actors import Sampler


def test_unknown_keyword_lists_the_valid_ones():
    with pytest.raises(TypeError, match="'gpu'.*valid keywords are: max_memory, num_threads, wait"):
        parl.remote_class(gpu=1)


def test_decorating_a_function_is_a_type_error():
    with pytest.raises(TypeError, match="decorates a class"):

        @parl.remote_class
        def not_a_class():
            pass

    with pytest.raises(TypeError, match="decorates a class"):
        parl.remote_class(wait=False)(42)


@pytest.mark.parametrize("bad", [0, -5, float("nan"), float("inf")])
def test_max_memory_must_be_positive(bad):
    with pytest.raises(ValueError, match="max_memory"):
        parl.remote_class(max_memory=bad)


@pytest.mark.parametrize("bad", ["100", True, [1]])
def test_max_memory_must_be_a_number(bad):
    with pytest.raises(TypeError, match="max_memory"):
        parl.remote_class(max_memory=bad)


def test_wait_must_be_bool():
    with pytest.raises(TypeError, match="wait"):
        parl.remote_class(wait="no")


def test_unpicklable_argument_names_the_argument():
    actor = Sampler()
    generator = (i for i in range(3))
    with pytest.raises(TypeError, match=r"argument 'b' of Sampler.add\(\)") as info:
        actor.add(1, generator)
    assert "generator" in str(info.value)
    with pytest.raises(TypeError, match=r"argument 'a' of Sampler.add\(\)"):
        actor.add(a=generator, b=2)
    assert actor.add(1, 2) == 3  # still usable
    with pytest.raises(TypeError, match="attribute 'buf'"):
        actor.buf = generator
    assert actor.add(2, 2) == 4


def test_unpicklable_constructor_argument():
    with pytest.raises(TypeError, match=r"argument 'n' of Sampler.__init__\(\)"):
        Sampler(i for i in range(2))


def test_connect_modes():
    parl.connect()
    parl.connect("local", linger=0)
    actor = Sampler()
    assert actor.add(1, 1) == 2
    with pytest.raises(parl.errors.HostsFileError, match="no file .*hosts.txt exists"):
        parl.connect("hosts.txt")  # no ':': a hosts file for the SSH launcher
    with pytest.raises(parl.ClusterError, match="secret|cannot reach the master"):
        parl.connect("localhost:1")  # no cluster there: the local actors stay usable
    with pytest.raises(TypeError, match="address"):
        parl.connect(8010)
    with pytest.raises(ValueError, match="linger"):
        parl.connect(linger=-1)
    assert actor.add(2, 2) == 4


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"forward_output": "no"}, TypeError, r"forward_output must be True or False, got 'no'"),
        ({"accept_unknown_host_keys": 1}, TypeError, "accept_unknown_host_keys must be True"),
        ({"monitor_port": "x"}, TypeError, r"monitor_port must be an int .*'x' \(str\)"),
        ({"monitor_port": 70000}, ValueError, r"monitor_port must be an int .*65535"),
    ],
)
def test_connect_names_an_option_of_the_wrong_kind(options, error, message):
    actor = Sampler()
    with pytest.raises(error, match=message):
        parl.connect(**options)
    assert actor.add(1, 2) == 3  # the refused connect changed nothing


def test_reserved_names_are_refused():
    class Bad:
        def _parl_conn(self):
            pass

    with pytest.raises(TypeError, match="reserved"):
        parl.remote_class(Bad)


@parl.remote_class
class _HoldsALock:
    def __init__(self):
        self.lock = threading.Lock()


def test_an_attribute_that_cannot_come_back_is_named():
    """User sees: reading ``actor.lock`` (a lock) says ``the result cannot be sent back``,
    without saying which; before the serve loop was rewritten it named the attribute.
    Expected: ``attribute 'lock' cannot be sent back to the caller``."""
    with _HoldsALock() as actor:
        with pytest.raises(TypeError, match="attribute 'lock' cannot be sent back"):
            _ = actor.lock


def test_connect_to_a_name_without_port_says_a_cluster_needs_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(parl.errors.HostsFileError) as caught:
        parl.connect("localhost")
    message = str(caught.value)
    assert "'localhost:8010'" in message and "needs the port" in message, message
    assert f"no file {tmp_path / 'localhost'} exists" in message, message


@pytest.mark.parametrize(
    ("address", "what"),
    [
        ("localhost:notaport", "the port 'notaport' is not a number"),
        ("10.0.0.1:99999", "port 99999 is out of range"),
        ("localhost:0", "port 0 is out of range"),
        (":8010", "has no host"),
    ],
)
def test_connect_refuses_a_bad_address_before_the_secret_or_the_network(
    address, what, tmp_path, monkeypatch
):
    """The address is checked first: no secret here (HOME empty, no variable) and no socket
    may be opened, yet the error is about the address."""
    import socket

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("PARL_CLUSTER_SECRET", raising=False)
    opened: list[object] = []

    class NoSocket(socket.socket):
        def __init__(self, *args: object, **kwargs: object) -> None:
            opened.append(args)
            raise AssertionError("parl.connect opened a socket for a bad address")

    monkeypatch.setattr(socket, "socket", NoSocket)
    monkeypatch.setattr(socket, "create_connection", NoSocket)
    with pytest.raises(ValueError, match=what) as caught:
        parl.connect(address)
    assert "secret" not in str(caught.value)
    assert opened == []


def test_checked_numbers_are_kept_as_python_numbers():
    """numpy's numbers pass the checks and come out as int and float: the options travel in
    JSON control messages and are compared with Python's numbers."""
    import numpy as np

    from parl.remote.options import connect_options
    from parl.wire.contract import RemoteOptions

    given = RemoteOptions(
        wait=np.bool_(False), n_gpu=np.int64(1), num_threads=np.int32(2),
        max_memory=np.float32(512), num_cpus=np.float64(0.5), num_gpus=np.int64(1),
    )  # fmt: skip
    assert given.wait is False
    assert [type(getattr(given, name)) for name in ("n_gpu", "num_threads")] == [int, int]
    assert [type(getattr(given, n)) for n in ("max_memory", "num_cpus", "num_gpus")] == [float] * 3
    options = connect_options(
        "localhost:8010", [], forward_output=True, preload=(), shm_threshold=np.int64(0),
        linger=np.float32(1), stop_timeout=np.int64(3), slot_timeout=np.float64(2),
        max_frame=np.int64(1 << 20), hosts=None, ssh=None, accept_unknown_host_keys=False,
        monitor_port=0, install=None, wheels=None,
    )  # fmt: skip
    assert type(options.max_frame) is int and type(options.shm_threshold) is int
    assert type(options.linger) is float and type(options.stop_timeout) is float


def test_an_int_too_large_for_a_float_is_infinite_not_an_overflow():
    with pytest.raises(ValueError, match="stop_timeout must be a finite number"):
        parl.connect(stop_timeout=10**400)
    parl.connect(linger=10**400)  # as linger=float("inf"): the pool stays
    parl.connect(linger=0)
