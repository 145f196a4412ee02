"""Review of the lean call path (issue 7): what a demanding user could break.

Each test names what a user sees and what was expected. The interrupts are simulated where a
signal's handler runs in real life: Python runs it as the first thing after the C call during
which the signal arrived returns, so a Ctrl-C can land right after a pickle was made or right
after a system call sent part of a message (found by sending SIGINT to a process calling an
actor in a loop: later calls returned the arguments of earlier ones).
"""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import parl
from parl.errors import ActorClosedError
from parl.wire.classes import ClassTable
from parl.wire.protocol import InlineLink
from parl.wire.serialization import Encoder, loads
from tests.runtime.actors import Sampler

AsyncSampler = parl.remote_class(wait=False)(Sampler._original)


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
