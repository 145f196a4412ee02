"""The cluster's control messages: one TypedDict per op, one check on every message received."""

from __future__ import annotations

import socket
from typing import get_args, get_type_hints

import pytest

from parl.cluster import control, messages
from parl.cluster.messages import MessageError
from parl.wire.framing import FrameSocket


def test_every_op_has_one_typed_dict():
    ops = [get_args(get_type_hints(cls)["op"])[0] for cls in messages.MESSAGES]
    assert len(ops) == len(set(ops))
    assert {"register", "place", "placed", "actor", "started", "exited", "stop"} <= set(ops)


@pytest.mark.parametrize(
    "message",
    [
        {"op": "register", "host": "10.0.0.2", "port": 8011, "slots": 4, "gpus": 0},
        {"op": "placed", "host": "", "port": 8011, "hostname": "box", "token": "ab12"},
        {"op": "place", "timeout": 60, "n_gpu": 0},
        {"op": "exited", "pid": 12, "code": None},
        {"op": "stop", "pid": 12},
        {"op": "send"},
        {"op": "an-op-of-a-newer-peer", "anything": 1},  # ignored by its receiver, as before
    ],
)
def test_a_well_formed_message_passes(message):
    messages.check(message)


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ({"op": "placed", "host": "h", "port": 8011}, "control message 'placed' lacks its field 'token'"),
        ({"op": "stop"}, "control message 'stop' lacks its field 'pid'"),
        ({"op": "exited", "pid": "12"}, "control message 'exited': field 'pid' must be an int, got '12'"),
        ({"op": "register", "host": "h", "port": True, "slots": 1}, "field 'port' must be an int, got True"),
        ({"op": "register", "host": 3, "port": 1, "slots": 1}, "field 'host' must be a string, got 3"),
        ({"op": "started", "pid": 1.5}, "control message 'started': field 'pid' must be an int"),
    ],
)  # fmt: skip
def test_a_malformed_message_names_the_op_and_the_field(message, words):
    with pytest.raises(MessageError) as info:
        messages.check(message)
    assert words in str(info.value)


def test_recv_checks_every_message_it_returns():
    """The master, the host agents and the carrier all read through control.recv: a peer out
    of step is a ConnectionError there, as a frame that is not JSON is."""
    ours, theirs = socket.socketpair()
    a, b = FrameSocket(ours), FrameSocket(theirs)
    try:
        control.send(a, {"op": "started", "pid": 7, "host": "box"})
        assert control.recv(b, 5) == {"op": "started", "pid": 7, "host": "box"}
        control.send(a, {"op": "started", "host": "box"})
        with pytest.raises(ConnectionError, match="'started' lacks its field 'pid'"):
            control.recv(b, 5)
        control.send(a, {"pid": 7})
        with pytest.raises(ConnectionError, match="a control message has no 'op'"):
            control.recv(b, 5)
    finally:
        a.close()
        b.close()
