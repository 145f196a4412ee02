"""The fork server on its own."""

from __future__ import annotations

import os
import socket

import pytest

from parl.errors import ParlError
from parl.workers import ForkServer


def test_a_fork_server_with_another_parl_refuses_to_serve(capfd):
    server = ForkServer(parl_dir="/elsewhere/parl")
    ours, theirs = socket.socketpair()
    out_r, out_w = os.pipe()
    try:
        with pytest.raises(ParlError, match="another installation of parl"):
            server.spawn([theirs.fileno(), out_w, out_w], {"caller_pid": os.getpid()})
    finally:
        server.close()
        for s in (ours, theirs):
            s.close()
        os.close(out_r)
        os.close(out_w)
    assert "the caller runs parl from /elsewhere/parl" in capfd.readouterr().err


def test_spawn_and_exit_status():
    server = ForkServer()
    ours, theirs = socket.socketpair()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        pid = server.spawn([theirs.fileno(), devnull, devnull], {"caller_pid": os.getpid()})
        theirs.close()
        ours.close()  # end of stream: the worker leaves with status 0
        assert server.exit_code(pid, timeout=10) == 0
    finally:
        os.close(devnull)
        server.close()
