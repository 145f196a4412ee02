from __future__ import annotations

import os
import socket
import threading

import pytest

from parl.wire.framing import FrameSocket


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    left, right = FrameSocket(a), FrameSocket(b)
    yield left, right
    left.close()
    right.close()


def test_frame_round_trip_with_bodies(pair):
    left, right = pair
    left.send(b"meta", [b"abc", bytearray(b"defg"), memoryview(b"")])
    frame = right.recv()
    assert bytes(frame.meta) == b"meta"
    assert [bytes(b) for b in frame.bodies] == [b"abc", b"defg", b""]
    assert frame.fds == []


def test_burst_of_small_frames_is_read_in_order(pair):
    left, right = pair
    for i in range(100):
        left.send(str(i).encode())
    got = [int(bytes(right.recv().meta)) for _ in range(100)]
    assert got == list(range(100))


def test_body_larger_than_read_ahead(pair):
    left, right = pair
    payload = os.urandom(3 * 2**20 + 7)
    sender = threading.Thread(target=left.send, args=(b"m", [payload, b"tail"]))
    sender.start()
    frame = right.recv()
    sender.join()
    assert bytes(frame.bodies[0]) == payload
    assert bytes(frame.bodies[1]) == b"tail"


def test_file_descriptors_travel_with_their_frame(pair, tmp_path):
    left, right = pair
    path = tmp_path / "f"
    path.write_text("hello")
    fd = os.open(path, os.O_RDONLY)
    try:
        left.send(b"first")
        left.send(b"with-fd", [], [fd])
    finally:
        os.close(fd)
    assert right.recv().fds == []
    frame = right.recv()
    assert len(frame.fds) == 1
    assert os.read(frame.fds[0], 5) == b"hello"
    os.close(frame.fds[0])


def test_end_of_stream_between_frames_is_none(pair):
    left, right = pair
    left.send(b"last")
    left.sock.shutdown(socket.SHUT_WR)
    assert bytes(right.recv().meta) == b"last"
    assert right.recv() is None


def test_end_of_stream_inside_a_frame_raises(pair):
    left, right = pair
    left.sock.sendall(b"\x10\x00\x00\x00")  # a prefix cut short
    left.sock.shutdown(socket.SHUT_WR)
    with pytest.raises(ConnectionResetError):
        right.recv()


def test_blocked_sender_drains_the_peer(pair):
    """Both sides send more than a socket buffer holds; on_blocked keeps them from deadlocking."""
    left, right = pair
    chunk = b"x" * 65536
    received = []

    def echo_server():
        for _ in range(64):
            frame = right.recv()
            right.send(b"reply", [bytes(frame.bodies[0])])

    server = threading.Thread(target=echo_server)
    server.start()

    def drain():
        received.append(left.recv())

    for _ in range(64):
        left.send(b"req", [chunk], on_blocked=drain)
    while len(received) < 64:
        received.append(left.recv())
    server.join(timeout=30)
    assert not server.is_alive()
    assert all(bytes(f.bodies[0]) == chunk for f in received)


def test_a_frame_carries_more_descriptors_than_one_sendmsg(pair, tmp_path):
    left, right = pair
    path = tmp_path / "f"
    path.write_text("x")
    fds = [os.open(path, os.O_RDONLY) for _ in range(600)]
    try:
        left.send(b"many", [b"body"], fds)
        left.send(b"next", [], fds[:1])
    finally:
        for fd in fds:
            os.close(fd)
    frame = right.recv()
    assert bytes(frame.meta) == b"many" and len(frame.fds) == 600
    assert bytes(right.recv().meta) == b"next"
    for fd in frame.fds:
        os.close(fd)


def test_interrupted_send_marks_the_stream_broken(pair):
    left, right = pair
    right.send(b"a reply is waiting")  # so a blocked send calls on_blocked

    def interrupt():
        raise KeyboardInterrupt

    left.sock.setblocking(False)
    with pytest.raises(KeyboardInterrupt):
        left.send(b"m", [b"x" * (8 << 20)], on_blocked=interrupt)
    assert left.broken
    with pytest.raises(ConnectionResetError):
        left.send(b"again")


def test_large_body_arrives_intact_and_writable(pair):
    left, right = pair
    payload = os.urandom((4 << 20) + 3)  # above the size received into uninitialised memory
    sender = threading.Thread(target=left.send, args=(b"m", [payload]))
    sender.start()
    frame = right.recv()
    sender.join()
    body = memoryview(frame.bodies[0])
    assert body.tobytes() == payload and not body.readonly
