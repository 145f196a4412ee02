"""Review of the monitor (issue 14): what a demanding user broke, each fixed and kept fixed.

- a monitor that saw a worker die must not take away a reply the worker sent before it died;
- a client that never finishes its request must not keep a thread and a descriptor of the
  user's process after ``close()``, nor print tracebacks into the user's terminal;
- an actor printing very long lines must not make status answers megabytes long, nor stop a
  cluster host agent's reports (which must fit in a control frame).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import threading
import urllib.request

import pytest

import parl
from parl.cluster import control
from parl.cluster.hostagent import _Worker
from parl.cluster.monitor import host_stats
from parl.shm.output import LINE_CHARS
from parl.wire import caller
from tests.runtime import cluster as clusters
from tests.runtime.conftest import wait_until


@parl.remote_class(wait=False)
class Talker:
    def pid(self):
        return os.getpid()

    def value(self):
        return 42

    def shout(self, lines, chars):
        for i in range(lines):
            print(f"{i}:" + "y" * chars, flush=True)
        return os.getpid()


def _connection(pid):
    return next(c for c in caller.live_connections() if f"pid={pid}" in c.label)


def test_a_reply_sent_before_the_worker_died_survives_a_monitor_seeing_the_death():
    actor = Talker()
    pid = actor.pid().get()
    conn = _connection(pid)
    future = actor.value()
    # the reply is in the socket, not read yet; then the worker dies
    assert wait_until(lambda: select.select([conn._sock.fileno()], [], [], 0)[0])
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not conn._liveness.is_alive())
    with parl.monitor() as mon:
        mon.status()  # sees the death first
        assert future.get() == 42  # as without a monitor: the reply came before the death
        with pytest.raises(parl.ActorDiedError, match="SIGKILL"):
            actor.pid().get()
        (record,) = [a for c in mon.status()["clients"] for a in c["actors"] if a["pid"] == pid]
        assert record["state"] == "dead" and "SIGKILL" in record["reason"]


def test_close_ends_unfinished_requests_quietly(capfd):
    threads = threading.active_count()
    mon = parl.monitor()
    host, port = mon._server.host, mon._server.port
    clients = []
    for _ in range(8):  # slowloris: a request line and a header, never the blank line
        sock = socket.create_connection((host, port))
        sock.sendall(b"GET /api/status HTTP/1.1\r\nHost: x\r\n")
        clients.append(sock)
    assert wait_until(lambda: threading.active_count() >= threads + 2 + 8)
    mon.close()
    try:
        # nothing of the monitor is left: no thread waits on those clients any more
        assert wait_until(lambda: threading.active_count() == threads)
        for sock in clients:
            sock.settimeout(5)
            while sock.recv(65536):  # the server ended the connection
                pass
    finally:
        for sock in clients:
            sock.close()
    assert "Traceback" not in capfd.readouterr().err


def test_a_monitor_refuses_connections_beyond_its_limit_and_still_serves():
    from parl.monitoring import server

    with parl.monitor() as mon:
        host, port = mon._server.host, mon._server.port
        idle = [socket.create_connection((host, port)) for _ in range(server._MAX_CONNECTIONS)]
        try:
            extra = socket.create_connection((host, port))
            extra.settimeout(5)
            assert extra.recv(1) == b""  # closed at once: no thread for it
            extra.close()
        finally:
            for sock in idle:
                sock.close()
        assert wait_until(lambda: not mon._server._httpd._open)
        with urllib.request.urlopen(mon.url + "api/status", timeout=10) as response:
            assert response.status == 200


def test_long_lines_are_cut_in_the_local_monitor(capfd):
    with parl.monitor() as mon:
        actor = Talker()
        pid = actor.shout(20, 200_000).get()

        def output():
            actors = [a for c in mon.status()["clients"] for a in c["actors"]]
            return next(a["output"] for a in actors if a["pid"] == pid)

        assert wait_until(lambda: len(output()) == 20)
        lines = output()
        assert all(len(line) < LINE_CHARS + 50 for line in lines)
        assert lines[-1].startswith("19:yyy") and "more characters" in lines[-1]
        with urllib.request.urlopen(mon.url + "api/status", timeout=10) as response:
            assert len(response.read()) < 200_000
    assert "y" * 200_000 in capfd.readouterr().out  # the terminal still gets each line whole


def test_a_host_report_fits_a_control_frame_whatever_workers_print():
    workers = []
    for i in range(300):  # a big machine whose workers all print long lines of odd text
        worker = _Worker(pid=10_000 + i, label=f"Sampler{i}", client="c", pidfd=-1)
        worker.lines.extend(["\x1b[31m" + "é" * (2 * LINE_CHARS)] * 100)
        workers.append(worker)
    report = host_stats(workers, "node1")
    assert len(json.dumps(report)) <= control.CONTROL_MAX_FRAME // 2
    assert len(report["workers"]) == 300


@pytest.fixture
def cluster_page(tmp_path, monkeypatch):
    monkeypatch.setenv("PARL_CLUSTER_SECRET", clusters.SECRET)
    port = clusters.free_port()
    cluster = clusters.start(str(tmp_path / "home"), monitor_port=port)
    try:
        parl.connect(cluster.address, linger=0)
        yield f"http://127.0.0.1:{port}/"
    finally:
        parl.disconnect()
        parl.connect(linger=0)
        clusters.stop(cluster)


def test_long_lines_keep_a_cluster_host_reporting(cluster_page, capfd):
    actor = Talker()
    pid = actor.shout(20, 100_000).get()  # 2 MB of lines: more than a control frame

    def lines():
        with urllib.request.urlopen(cluster_page + "api/status", timeout=10) as response:
            status = json.loads(response.read())
        actors = [a for c in status["clients"] for a in c["actors"]]
        return next((a["output"] for a in actors if a["pid"] == pid), [])

    assert wait_until(lambda: len(lines()) == 20, timeout=15)
    assert all(len(line) < LINE_CHARS + 50 for line in lines())
    capfd.readouterr()
