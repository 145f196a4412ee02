"""The lean call path: fast paths must keep the slow paths' semantics.

- one pickler reused per connection: nothing it pickled stays alive, and a message it failed
  on leaves no trace in the next one;
- small frames sent with one system call and read with one: a send the socket cannot take at
  once, frames split across reads and frames that carry descriptors still arrive whole;
- the spin learns from the waits it missed, and stops while the CPU is under pressure;
- a large value copied by two threads arrives intact, also in a forked child;
- a Ctrl-C at any point of a call leaves the connection usable, or closed with a clear error,
  never out of step;
- a connection that one thread finds dead while another is blocked sending on it: the sender
  wakes and raises the connection's error, never the OSError of a socket closed under it.
"""

from __future__ import annotations

import fcntl
import gc
import os
import pickle
import signal
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
from parl.errors import ActorClosedError, SerializationError
from parl.wire import framing
from parl.wire.classes import ClassTable
from parl.wire.framing import FrameSocket, Spin
from parl.wire.protocol import InlineLink
from parl.wire.serialization import Encoder, loads
from tests.runtime.actors import AsyncSampler, Sampler
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


# -- interrupted calls ------------------------------------------------------------------------
# A Ctrl-C at any point of a call leaves the connection usable, or closed with a clear error:
# never out of step. The interrupts are simulated where a signal's handler runs in real life:
# Python runs it as the first thing after the C call during which the signal arrived returns,
# so a Ctrl-C can land right after a pickle was made or right after a system call sent part of
# a message (found by sending SIGINT to a process calling an actor in a loop: later calls
# returned the arguments of earlier ones).


class _InterruptAfterDump:
    """The connection's pickler, with a Ctrl-C whose handler runs right after a whole message
    was pickled (at the first call that follows ``dump``)."""

    def __init__(self, real):
        self.real = real
        self.armed = True

    def dump(self, obj):
        self.real.dump(obj)

    def clear_memo(self):
        self.real.clear_memo()
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt


def test_ctrl_c_after_a_message_was_pickled_does_not_resend_it_with_the_next_call():
    """User sees: after a Ctrl-C during ``actor.add(1, 2)`` (caught, as in Jupyter), the next
    call ``actor.add(10, 20)`` returns 3: the interrupted call's pickle was left in the reused
    pickler's output and went out in front of the next message, whose header the actor then
    read with the old arguments. Expected: the next call runs with its own arguments."""
    with Sampler() as s:
        encoder = s._parl_conn._encoder
        encoder._pickler = _InterruptAfterDump(encoder._pickler)
        with pytest.raises(KeyboardInterrupt):
            s.add(1, 2)
        assert s.add(10, 20) == 30
        encoder._pickler.armed = True
        with pytest.raises(KeyboardInterrupt):
            s.add(np.full(300_000, 1.0), 0)  # out-of-band buffers left behind this time
        got = s.add(np.arange(300_000, dtype=np.float64), 1)
        assert got[0] == 1.0 and got[-1] == 300_000.0


def test_the_encoder_starts_clean_after_an_interrupt_outside_its_pickler():
    """The same at the level of the encoder: a message cut short after ``dump`` leaves
    nothing in the next one."""
    encoder = Encoder(InlineLink(), ClassTable("caller").sending)
    encoder._pickler = _InterruptAfterDump(encoder._pickler)
    with pytest.raises(KeyboardInterrupt):
        encoder.dumps(("first", np.arange(10)))
    stream, buffers = encoder.dumps(("second", 2))
    assert loads(stream, buffers) == ("second", 2)


def _local_class():
    class Point:  # defined in a function: travels by value
        def __init__(self, x):
            self.x = x

    return Point


class _CtrlCWhilePickled:
    def __reduce__(self):
        raise KeyboardInterrupt


def test_ctrl_c_while_a_class_definition_is_pickled_does_not_lose_the_class():
    """User sees: a Ctrl-C while a message carrying the first instance of a script class was
    being pickled, then an unrelated call, and from then on every call passing that class
    fails in the actor with ``LookupError: class Point arrived by reference to its definition
    ... never loaded that definition``: the interrupted message's class definitions were
    counted as held by the actor with the next message. Expected: the class is sent again."""
    Point = _local_class()
    with Sampler() as s:
        with pytest.raises(KeyboardInterrupt):
            s.add(Point(1), _CtrlCWhilePickled())
        assert s.add(1, 2) == 3  # an unrelated call
        assert s.apply(lambda p: p.x + 1, Point(41)) == 42


def test_classes_made_at_run_time_are_not_kept_alive_by_the_pickler():
    """User sees: a class made per call (``type(...)``, ``namedtuple``, ``make_dataclass``)
    passed to an actor is never freed, not even after the actor is closed: memory grows with
    every class (the pickler's set of "plain" types held them). Expected: they are freed
    with the actor, as before the call path was rewritten."""
    refs = []
    s = Sampler()
    for _ in range(5):
        kind = type("Made", (), {"__module__": __name__})  # not found by name: by value
        refs.append(weakref.ref(kind))
        assert type(s.apply(lambda v: v, kind())) is kind
        del kind
    parl.close_actor(s)
    del s
    gc.collect()
    assert [r for r in refs if r() is not None] == []


class _CutAfterSend:
    """The actor's socket, with a Ctrl-C whose handler runs right after a ``send`` that took
    only part of a large message returns (before the count of bytes sent is stored)."""

    def __init__(self, real):
        self.real = real
        self.armed = True

    def send(self, data, flags=0):
        sent = self.real.send(data, flags)
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return sent

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_ctrl_c_right_after_part_of_a_large_message_went_out_fails_the_next_call_clearly():
    """User sees: a Ctrl-C while ``actor.echo(b"x" * 8 MiB)`` is being sent (caught), then
    the next call waits forever: half of the big message went out, the stream is out of step
    and the actor waits for the rest of it. Expected: the next call returns, or raises
    ``ActorClosedError`` ("interrupted in the middle of sending a message") at once."""
    with AsyncSampler() as s:
        framed = s._parl_conn._sock
        framed.sock = _CutAfterSend(framed.sock)
        with pytest.raises(KeyboardInterrupt):
            s.add(b"x" * (8 << 20), b"")
        with pytest.raises(ActorClosedError, match="interrupted in the middle of sending"):
            s.add(1, 2).get(timeout=5)


class _CutAfterRecv:
    """The actor's socket, with a Ctrl-C whose handler runs right after a read that took
    bytes of a reply returns (before they are stored in the read-ahead buffer)."""

    def __init__(self, real):
        self.real = real
        self.armed = True

    def recvmsg_into(self, *args):
        out = self.real.recvmsg_into(*args)
        if self.armed and out[0] > 0:
            self.armed = False
            raise KeyboardInterrupt
        return out

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_ctrl_c_right_after_part_of_a_reply_was_read_fails_the_next_call_clearly():
    """User sees (before the fix): a Ctrl-C right as a reply is read, then the next call reads
    the rest of the old reply as a new frame (garbage, a MemoryError, or a hang). Expected:
    the next call raises ``ActorClosedError`` ("interrupted in the middle of receiving")."""
    with AsyncSampler() as s:
        assert s.add(1, 2).get(timeout=5) == 3
        framed = s._parl_conn._sock
        framed.sock = _CutAfterRecv(framed.sock)
        with pytest.raises(KeyboardInterrupt):
            s.add(3, 4).get(timeout=5)
        with pytest.raises(ActorClosedError, match="interrupted in the middle of receiving"):
            s.add(1, 2).get(timeout=5)


def test_a_sigint_in_the_middle_of_a_send_fails_later_calls_at_once(tmp_path):
    """A real SIGINT inside FrameSocket.send after part of the frame went out leaves the
    stream out of step (the worker waits for the rest of the frame): later calls fail with a
    parl error at once instead of hanging."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    actor = AsyncSampler()
    main = threading.main_thread()
    assert threading.current_thread() is main

    def sending_started() -> bool:
        frame = sys._current_frames().get(main.ident)
        while frame is not None:
            code = frame.f_code
            if code.co_name == "_send_parts" and code.co_filename.endswith("framing.py"):
                return frame.f_locals["self"]._sending  # part of the frame is out
            frame = frame.f_back
        return False

    def interrupter():
        if wait_until(sending_started, timeout=20):
            signal.pthread_kill(main.ident, signal.SIGINT)

    try:
        blocked = actor.block(str(fifo))  # the worker reads nothing until the fifo opens
        thread = threading.Thread(target=interrupter)
        thread.start()
        with pytest.raises(KeyboardInterrupt):
            actor.add(b"x" * (32 << 20), b"")  # in-band: far more than the socket buffer
        thread.join()
        # the stream is out of step: the connection is closed, and says so at once
        with pytest.raises(parl.ActorClosedError, match="interrupted in the middle"):
            actor.add(1, 2).get(timeout=2)
        with pytest.raises(parl.ActorClosedError):
            blocked.get(timeout=2)
    finally:
        parl.close_actor(actor)


class _GoneWorker:
    """The liveness of a worker that is gone (but whose socket is still open): what a
    monitor's ``poll_death`` finds."""

    def fileno(self) -> None:
        return None

    def is_alive(self) -> bool:
        return False

    def death_error(self) -> parl.ActorDiedError:
        return parl.ActorDiedError("the worker process of actor Fake pid=1 ended")

    def close(self) -> None:
        pass


def test_a_sender_blocked_while_another_thread_finds_the_actor_dead_raises_its_error():
    from parl.wire.caller import Connection
    from parl.wire.protocol import CALL

    ours, theirs = socket.socketpair()  # nobody reads ``theirs``: a send of 64 MiB blocks
    conn = Connection(FrameSocket(ours), InlineLink(), _GoneWorker(), "Fake pid=1")
    outcome: dict[str, BaseException] = {}

    def send() -> None:
        try:
            conn.submit(CALL, ("take", (np.ones(64 << 20, np.uint8),), {}))
        except BaseException as exc:  # noqa: BLE001 - what the send raised is the subject
            outcome["error"] = exc

    sender = threading.Thread(target=send)
    sender.start()
    try:

        def sending() -> bool:  # the sender waits in the middle of its frame
            frame = sys._current_frames().get(sender.ident or 0)
            while frame is not None and frame.f_code.co_name != "_send_parts":
                frame = frame.f_back
            return frame is not None

        assert wait_until(sending, timeout=10), "the send did not block"
        assert isinstance(conn.poll_death(), parl.ActorDiedError)  # this thread finds it dead
        sender.join(10)
        assert not sender.is_alive(), "the sender still blocks on a dead connection"
        assert isinstance(outcome.get("error"), parl.ActorDiedError), outcome
        assert ours.fileno() == -1  # closed once the sender let go of it
    finally:
        conn.close()
        theirs.close()
