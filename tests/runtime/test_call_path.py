"""The lean call path (issue 7): fast paths must keep the slow paths' semantics.

- one pickler reused per connection: nothing it pickled stays alive, and a message it failed
  on leaves no trace in the next one;
- small frames sent with one system call and read with one: a send the socket cannot take at
  once, frames split across reads and frames that carry descriptors still arrive whole;
- the spin learns from the waits it missed, and stops while the CPU is under pressure;
- a large value copied by two threads arrives intact, also in a forked child.
"""

from __future__ import annotations

import fcntl
import gc
import os
import pickle
import socket
import struct
import subprocess
import sys
import termios
import threading
import weakref

import numpy as np
import pytest

import parl
import parl.shm.copying as copying
from parl.errors import SerializationError
from parl.wire import framing
from parl.wire.classes import ClassTable
from parl.wire.framing import FrameSocket, Spin
from parl.wire.protocol import InlineLink
from parl.wire.serialization import Encoder, loads
from tests.runtime.actors import Sampler
from tests.runtime.conftest import wait_until


class Token:
    pass


def test_the_reused_pickler_keeps_nothing_alive():
    encoder = Encoder(InlineLink(), ClassTable("caller").sending)
    token = Token()
    ref = weakref.ref(token)
    stream, buffers = encoder.dumps({"a": token, "b": [token]})
    assert type(loads(stream, buffers)["a"]) is Token
    del token
    gc.collect()
    assert ref() is None  # the pickler's memo let go of it


def test_a_failed_message_leaves_no_trace_in_the_next():
    encoder = Encoder(InlineLink(), ClassTable("caller").sending)
    lock = threading.Lock()
    with pytest.raises(SerializationError):
        encoder.dumps(["x" * 100_000, lock])  # half pickled, then fails
    stream, buffers = encoder.dumps(("noop", (), {}))
    assert loads(stream, buffers) == ("noop", (), {})
    assert stream == pickle.dumps(("noop", (), {}), 5)  # not a byte of the failed one


def test_the_reused_pickler_falls_back_to_by_value_and_back():
    encoder = Encoder(InlineLink(), ClassTable("caller").sending)

    def local(x):  # a closure-free local function: only cloudpickle saves it
        return x + 1

    stream, buffers = encoder.dumps([local, 2])
    fn, arg = loads(stream, buffers)
    assert fn(arg) == 3
    stream, buffers = encoder.dumps({"k": np.arange(3)})  # the plain pickler again
    assert loads(stream, buffers)["k"].tolist() == [0, 1, 2]
    assert len(buffers) == 1  # the array's data out of band, as before


def test_a_large_array_pickled_twice_gives_two_buffer_lists():
    """The encoder hands out a copy of its buffer list: the first message's buffers must not
    change when the second is encoded."""
    encoder = Encoder(InlineLink(), None)
    _, first = encoder.dumps(np.ones(10))
    _, second = encoder.dumps(np.zeros(20))
    assert len(first) == 1 and len(second) == 1
    assert first[0].raw().nbytes == 80 and second[0].raw().nbytes == 160


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    left, right = FrameSocket(a), FrameSocket(b)
    yield left, right
    left.close()
    right.close()


def _unread(sock: socket.socket) -> int:
    """Bytes waiting in ``sock``'s receive queue."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


def test_small_frames_split_across_reads_arrive_whole(pair):
    """The one-read fast path must fall back when a frame is cut between two reads: the reader
    has the first part buffered (checked) before the rest is sent."""
    left, right = pair
    raw = left.sock
    for i in range(50):
        meta = b"m%03d" % i + b"x" * (i * 37)
        data = framing.PREFIX.pack(len(meta), 0, 0) + meta
        cut = len(data) // 2 if i % 2 else 3  # inside the prefix or inside the meta
        got = []
        raw.sendall(data[:cut])
        reader = threading.Thread(target=lambda got=got: got.append(right.recv_parts()))
        reader.start()
        assert wait_until(lambda: _unread(right.sock) == 0)  # the reader took the first part
        raw.sendall(data[cut:])
        reader.join(timeout=10)
        assert got and got[0] is not None and bytes(got[0][0]) == meta


def test_a_small_frame_the_socket_cannot_take_at_once_still_goes_whole(pair, monkeypatch):
    """The fast send (one MSG_DONTWAIT send) finishes a partial send the slow way. Each frame
    is larger than the send buffer, so no single send can take it."""
    left, right = pair
    left.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    slow_sends = []
    real = FrameSocket._send_parts
    monkeypatch.setattr(
        FrameSocket, "_send_parts", lambda self, *a: slow_sends.append(1) or real(self, *a)
    )
    got = []
    reader = threading.Thread(
        target=lambda: got.extend(bytes(right.recv().meta) for _ in range(20))
    )
    reader.start()
    metas = [bytes([i]) * 60_000 for i in range(20)]
    for meta in metas:
        left.send(meta, on_blocked=lambda: None)
    reader.join(timeout=30)
    assert got == metas
    assert len(slow_sends) == 20  # every frame went out partly, then the slow way


def test_frames_with_and_without_descriptors_interleave(pair, tmp_path):
    left, right = pair
    path = tmp_path / "f"
    path.write_text("hello")
    fd = os.open(path, os.O_RDONLY)
    try:
        for i in range(10):
            left.send(b"plain%d" % i)
            left.send(b"fd%d" % i, [], [fd])
    finally:
        os.close(fd)
    for i in range(10):
        meta, bodies, fds = right.recv_parts()
        assert bytes(meta) == b"plain%d" % i and fds == []
        meta, bodies, fds = right.recv_parts()
        assert bytes(meta) == b"fd%d" % i and len(fds) == 1
        assert os.pread(fds[0], 5, 0) == b"hello"
        os.close(fds[0])


def test_the_spin_learns_from_missed_waits():
    spin = Spin(500e-6)
    spin.missed(100e-6)  # a short wait: spin a little longer than it
    assert spin.seconds == pytest.approx(150e-6)
    spin.missed(5e-3)  # a long one: spin half as long
    assert spin.seconds == pytest.approx(75e-6)
    for _ in range(20):
        spin.missed(1.0)
    assert spin.seconds == 0.0  # long waits only: no spin at all
    spin.missed(200e-6)  # short waits again: spin again
    assert spin.seconds == pytest.approx(300e-6)
    spin.missed(450e-6)
    assert spin.seconds == 500e-6  # never beyond the cap


def test_crowded_reads_the_kernels_count_of_runnable_processes():
    """Nobody spins (and no copy takes a second thread) while more processes are runnable
    than there are cores."""
    assert os.path.exists("/proc/loadavg")
    cores = len(os.sched_getaffinity(0))
    assert framing.crowded(extra=cores)  # this process is running: 1 + cores > cores
    assert not framing.crowded(extra=-10_000)


def test_a_crowded_machine_gets_no_spin(monkeypatch):
    """With the machine crowded the caller sleeps in poll at once: a call still works and the
    spin never ran (FrameSocket.spin is not called)."""
    monkeypatch.setattr("parl.wire.caller.crowded", lambda: True)
    spins = []
    real = FrameSocket.spin
    monkeypatch.setattr(FrameSocket, "spin", lambda self, s: spins.append(s) or real(self, s))
    actor = Sampler()
    try:
        for _ in range(20):
            assert actor.echo(3) == 3
        assert spins == []
    finally:
        parl.close_actor(actor)


def test_parl_spin_us_sets_or_turns_off_the_spin_in_callers_and_workers(tmp_path):
    """PARL_SPIN_US in the environment: the longest spin in microseconds, 0 for none; the
    workers inherit it. Calls still work without a spin (they sleep in poll)."""
    script = tmp_path / "spin.py"
    script.write_text(
        "import parl\n"
        "from parl.wire import framing\n"
        "@parl.remote_class\n"
        "class Probe:\n"
        "    def spin(self):\n"
        "        from parl.wire import framing\n"
        "        return framing.SPIN_S\n"
        "probe = Probe()\n"
        "print(framing.SPIN_S, probe.spin(), sum(probe.spin() == framing.SPIN_S for _ in range(50)))\n"
    )
    for value, expected in (("0", 0.0), ("120", 120e-6), ("", 500e-6)):
        env = dict(os.environ, PARL_SPIN_US=value)
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        here, there, calls = done.stdout.split()
        assert float(here) == float(there) == pytest.approx(expected) and calls == "50"


@pytest.fixture
def parallel_copies(monkeypatch):
    """Pretend the machine is idle, so that large copies take two threads."""
    monkeypatch.setattr(copying, "_busy", lambda: False)


@pytest.mark.parametrize("nbytes", [copying.PARALLEL_FROM, copying.PARALLEL_FROM * 3 + 4095])
def test_a_two_thread_copy_copies_every_byte(parallel_copies, nbytes):
    src = np.frombuffer(os.urandom(nbytes), np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    copying.copy_into(dst, src)
    assert np.array_equal(dst, src)


def test_a_two_thread_copy_works_in_a_forked_child(parallel_copies):
    src = np.arange(copying.PARALLEL_FROM, dtype=np.uint8)
    copying.copy_into(np.empty_like(src), src)  # the parent's helper thread exists now
    pid = os.fork()
    if pid == 0:  # the child has no helper thread: a new one must start
        dst = np.empty_like(src)
        copying.copy_into(dst, src)
        os._exit(0 if np.array_equal(dst, src) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_large_values_cross_intact_both_ways(parallel_copies):
    """Through an actor: the argument and the return value copied by two threads."""
    actor = Sampler()
    try:
        data = np.random.default_rng(1).random((3 << 20) // 8 * 4)  # 12 MiB of float64
        back = actor.echo(data)
        assert np.array_equal(back, data)
        assert back.__array_interface__["data"][0] != data.__array_interface__["data"][0]
    finally:
        parl.close_actor(actor)


def test_an_interrupted_two_thread_copy_waits_for_its_helper(parallel_copies, monkeypatch):
    """A Ctrl-C during the caller's half must not return while the helper thread still
    writes the other half (the block would be reused under it)."""
    src = np.ones(copying.PARALLEL_FROM * 4, np.uint8)
    dst = np.zeros_like(src)
    real_copyto = np.copyto
    calls = []

    def interrupted_copyto(d, s):
        calls.append(threading.current_thread().name)
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt  # the caller's half, as if Ctrl-C landed in it
        real_copyto(d, s)

    monkeypatch.setattr(copying.np, "copyto", interrupted_copyto)
    with pytest.raises(KeyboardInterrupt):
        copying.copy_into(dst, src)
    # by the time copy_into raised, the helper's half is complete
    half = (src.nbytes // 2) & ~4095
    assert dst[half:].all() and "parl-copy" in calls
