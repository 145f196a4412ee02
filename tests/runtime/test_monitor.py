"""``parl.monitor()`` (local mode): what ``/api/status`` reports and who may read it.

A monitor that saw a worker die does not take away a reply the worker sent before it died; a
client that never finishes its request keeps no thread or descriptor after ``close()`` and
prints no traceback; an actor printing very long lines does not make status answers megabytes
long.

The page itself is checked in a real browser in test_monitor_browser.py.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import threading
import urllib.error
import urllib.request

import pytest

import parl
from parl.wire import caller
from parl.workers import LINE_CHARS
from tests.runtime.actors import Talker
from tests.runtime.conftest import wait_until


@parl.remote_class(wait=False)
class Worker:
    def hello(self, text):
        print(text, flush=True)
        return os.getpid()

    def block(self, path):
        while not os.path.exists(path):  # the test makes the file
            pass
        return 1


def _get(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, dict(response.headers), response.read()


def _status(mon):
    return json.loads(_get(mon.url + "api/status")[2])


def _actor(status, pid):
    return next(a for c in status["clients"] for a in c["actors"] if a["pid"] == pid)


def test_status_reports_hosts_actors_states_and_output(tmp_path):
    go = tmp_path / "go"
    with parl.monitor() as mon:
        a, b = Worker(), Worker()
        pid_a = a.hello("a line from the actor").get()
        pid_b = b.hello("b is here").get()
        busy = b.block(str(go))
        wait_until(lambda: "a line from the actor" in _actor(_status(mon), pid_a)["output"])
        status = _status(mon)
        assert status["version"] == parl.__version__ and status["mode"] == "local"
        (host,) = status["hosts"]
        assert host["cpus"] == os.cpu_count() and host["used_slots"] == 2
        assert 0 < host["memory_used"] < host["memory_total"]
        (client,) = status["clients"]
        assert client["pid"] == os.getpid()
        first, second = _actor(status, pid_a), _actor(status, pid_b)
        assert first["class"] == "Worker" and first["state"] == "idle" and first["calls"] == 1
        assert first["output"] == ["a line from the actor"] and first["memory"] > 1 << 20
        assert second["state"] == "busy" and second["method"] == "block"
        go.touch()
        assert busy.get() == 1
        os.kill(pid_a, signal.SIGKILL)
        assert wait_until(lambda: _actor(_status(mon), pid_a)["state"] == "dead")
        dead = _actor(_status(mon), pid_a)
        assert "SIGKILL" in dead["reason"] and dead["memory"] is None
        # the monitor saw the death first: the caller still gets the same, precise error
        with pytest.raises(parl.ActorDiedError, match="SIGKILL"):
            a.hello("too late").get()
        assert "SIGKILL" in _actor(_status(mon), pid_a)["reason"]
        parl.close_actor(b)
        assert wait_until(lambda: _actor(_status(mon), pid_b)["state"] == "closed")
        del a, b, busy


def test_dropped_actors_stay_listed_as_closed():
    with parl.monitor() as mon:
        actor = Worker()
        pid = actor.hello("x").get()
        assert _actor(_status(mon), pid)["state"] == "idle"
        del actor
        assert wait_until(lambda: _actor(_status(mon), pid)["state"] == "closed")


def test_history_grows_once_a_second():
    with parl.monitor() as mon:
        assert wait_until(lambda: len(mon.status()["hosts"][0]["cpu_history"]) >= 2, timeout=5)
        host = mon.status()["hosts"][0]
        assert all(0 <= x <= 100 for x in host["cpu_history"] + host["memory_history"])


def test_method_names_are_recorded_only_while_a_monitor_runs():
    actor = Worker()
    try:
        actor.hello("x").get()
        assert caller.NAMES.on is False and actor._parl_conn.names == {}
        with parl.monitor():
            actor.hello("y").get()
            assert "hello" in actor._parl_conn.names.values()
            with parl.monitor():
                pass
            assert caller.NAMES.on is True  # the first monitor still runs
        assert caller.NAMES.on is False
    finally:
        parl.close_actor(actor)


def test_closing_one_of_two_monitors_keeps_recording_on_for_the_other():
    actor = Worker()
    first, second = parl.monitor(), parl.monitor()
    try:
        first.close()
        first.close()  # a second close gives nothing more back
        assert caller.NAMES.on is True
        actor.hello("z").get()
        assert "hello" in actor._parl_conn.names.values()
        second.close()
        assert caller.NAMES.on is False
    finally:
        first.close()
        second.close()
        parl.close_actor(actor)


def test_a_monitored_cluster_that_closes_leaves_a_running_monitors_names_on():
    with parl.monitor():
        hold = caller.NAMES.hold()  # what a caller of a monitored cluster holds while connected
        hold.release()  # ... and gives back when it disconnects
        hold.release()  # (once: a hold counts once)
        assert caller.NAMES.on is True
    assert caller.NAMES.on is False


def test_a_token_protects_everything_when_required():
    with parl.monitor(token_required=True, token="a-long-enough-token") as mon:
        for path in ("", "api/status", "static/monitor.js"):
            with pytest.raises(urllib.error.HTTPError) as info:
                _get(mon.url + path)
            assert info.value.code == 401
            body = info.value.read()
            assert b"token" in body and b"Worker" not in body and b"clients" not in body
        with pytest.raises(urllib.error.HTTPError) as info:
            _get(mon.url + "api/status?token=wrong-token-value")
        assert info.value.code == 401
        code, headers, body = _get(mon.url + "?token=a-long-enough-token")
        assert code == 200 and b"monitor.js" in body
        cookie = headers["Set-Cookie"].split(";")[0]
        assert "HttpOnly" in headers["Set-Cookie"]
        assert _get(mon.url + "api/status", {"Cookie": cookie})[0] == 200
        bearer = {"Authorization": "Bearer a-long-enough-token"}
        assert json.loads(_get(mon.url + "api/status", bearer)[2])["mode"] == "local"


def test_the_page_is_read_only_and_serves_only_its_own_files():
    with parl.monitor() as mon:
        code, headers, body = _get(mon.url)
        assert code == 200 and "script-src 'self'" in headers["Content-Security-Policy"]
        assert b"http" not in body.replace(b"http-equiv", b"")  # no CDN: nothing from elsewhere
        for path in ("static/../server.py", "static/%2e%2e/server.py", "server.py", "static/x.py"):
            with pytest.raises(urllib.error.HTTPError) as info:
                _get(mon.url + path)
            assert info.value.code == 404, path
        request = urllib.request.Request(mon.url + "api/status", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=10)
        assert info.value.code == 405


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="port"):
        parl.monitor(port=70000)
    with pytest.raises(ValueError, match="12 characters"):
        parl.monitor(token="short")


def test_many_viewers_share_one_snapshot_per_interval():
    calls = []
    with parl.monitor() as mon:
        source = mon._source
        original = source.snapshot

        def counting():
            calls.append(1)
            return original()

        mon._server._snapshot = counting
        mon._server._min_interval = 60.0  # however slowly the viewers' threads start here
        threads = [threading.Thread(target=_status, args=(mon,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert len(calls) == 1


@pytest.mark.parametrize("host", ["evil.example:80", "attacker.test", "10.0.0.1:1234", ""])
def test_a_loopback_monitor_answers_only_to_loopback_names(host):
    """DNS rebinding: a web page of another site whose name resolves to 127.0.0.1 sends its own
    name as Host; the page refuses it, and serves 127.0.0.1, localhost and [::1]."""
    with parl.monitor() as mon:
        with pytest.raises(urllib.error.HTTPError) as info:
            _get(mon.url + "api/status", {"Host": host})
        assert info.value.code == 403 and b"clients" not in info.value.read()
        for good in (f"127.0.0.1:{mon._server.port}", "localhost", f"[::1]:{mon._server.port}"):
            assert _get(mon.url + "api/status", {"Host": good})[0] == 200


# -- a dead worker's last reply, unfinished requests, long lines -------------------------------


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


@pytest.mark.slow  # a stress run
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
