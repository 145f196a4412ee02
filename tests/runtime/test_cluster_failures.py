"""Failures on a real loopback cluster: a killed worker or host agent ends
pending and later calls within 5 s, each with its own cause (the worker's exit status; the
lost connection to the host), and a killed host agent leaves the cluster; a killed master
leaves the actors working, gives new creations a clear error, and host agents register again
with a master restarted on its port. (A killed caller's actors and slots: test_cluster.py.)"""

from __future__ import annotations

import gc
import os
import signal
import socket
import time

import psutil
import pytest

import parl
from parl.cluster import control
from tests.runtime import cluster as clusters
from tests.runtime.actors import AsyncSampler, Sampler
from tests.runtime.conftest import wait_until

pytestmark = pytest.mark.slow  # masters and host agents killed and restarted


def _pending(fifo) -> tuple[AsyncSampler, parl.Future, int]:
    """An actor whose call is pending: it blocks on opening ``fifo`` (nobody writes)."""
    os.mkfifo(fifo)
    actor = AsyncSampler()
    pid = actor.pid().get(timeout=30)
    return actor, actor.block(str(fifo)), pid


def test_a_killed_workers_pending_and_later_calls_fail_within_5s(on_cluster, tmp_path):
    actor, pending, pid = _pending(tmp_path / "fifo")
    other = Sampler()
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(parl.ActorDiedError, match="SIGKILL") as info:
        pending.get(timeout=5)
    assert time.monotonic() - start < 5.0
    # a worker's own end, not a lost host
    assert str(info.value).startswith("the worker process of actor AsyncSampler"), info.value
    assert "connection" not in str(info.value)
    with pytest.raises(parl.ActorDiedError):
        actor.add(1, 2).get(timeout=5)
    assert other.add(1, 2) == 3


def test_a_restarted_master_gets_its_host_agents_back_and_a_killed_agent_fails_its_calls(
    small_cluster, tmp_path
):
    """One small cluster: its master killed and started again on its port gets the host agent
    back; then the agent killed ends its actor's pending and later calls within 5 s with the
    lost connection to the host as the cause, and leaves the cluster with no worker."""
    actor = Sampler()
    (master,) = small_cluster.pids("master")
    (agent,) = small_cluster.pids("agent")
    os.kill(master, signal.SIGKILL)
    assert wait_until(lambda: not clusters.port_open(small_cluster.port), timeout=15)
    assert actor.add(1, 2) == 3  # calls never pass through the master
    start = time.monotonic()
    with pytest.raises(parl.ClusterError, match="cannot reach the master at 127.0.0.1:"):
        Sampler()  # no hang: a clear error at once
    assert time.monotonic() - start < 5.0
    assert psutil.pid_exists(agent)  # the host agent waits for its master

    clusters.xparl(small_cluster.env, "start", "--port", str(small_cluster.port), "--cpu_num", "0")
    hosts = wait_until(lambda: small_cluster.status()["hosts"], timeout=10)
    assert [(h["slots"], h["used"]) for h in hosts] == [(1, 1)]  # registered, with its actor
    parl.close_actor(actor)
    again = Sampler()  # this caller connects to the new master by itself
    assert again.add(2, 3) == 5
    assert psutil.pid_exists(agent)
    parl.close_actor(again)
    assert wait_until(lambda: small_cluster.used() == 0, timeout=10)

    # the host agent killed under a pending call
    actor, pending, pid = _pending(tmp_path / "fifo")
    (port,) = small_cluster.agent_ports
    os.kill(agent, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(parl.ActorDiedError) as info:
        pending.get(timeout=5)
    assert time.monotonic() - start < 5.0
    # the host is named, and the cause is the lost connection, not the worker
    text = str(info.value)
    assert f"the connection to the host agent at 127.0.0.1:{port} " in text, text
    assert "was lost" in text and "killed" in text, text
    assert "worker process" not in text, text
    with pytest.raises(parl.ActorDiedError):  # and every later call
        actor.add(1, 2).get(timeout=5)
    assert wait_until(lambda: not psutil.pid_exists(pid), timeout=15)
    assert wait_until(lambda: small_cluster.status()["hosts"] == [], timeout=15)
    assert wait_until(lambda: not small_cluster.workers(), timeout=10)


def test_a_killed_master_leaves_the_actors_on_its_own_slots_working(tmp_path, monkeypatch):
    """The slots of ``xparl start --cpu_num N`` belong to a host agent process of their own:
    a SIGKILL of the master leaves their actors answering, and the agent registers again with
    the master started next on that port (no second agent is started for them; ``xparl start``
    names the slots the agent has, not its own ``--cpu_num``). A master started again with
    another secret (a shell without PARL_CLUSTER_SECRET, a secret file made anew): the
    surviving agent cannot register, and ``xparl start`` says so instead of claiming its
    slots."""
    monkeypatch.setenv("PARL_CLUSTER_SECRET", clusters.SECRET)
    home = str(tmp_path / "home")
    cluster = clusters.start(home, agent_slots=(), master_args=("--cpu_num", "1"))
    try:
        parl.connect(cluster.address, linger=0)
        actor = Sampler()
        worker = actor.pid()
        (master,) = cluster.pids("master")
        (agent,) = cluster.pids("agent")
        assert worker in [p.pid for p in psutil.Process(agent).children(recursive=True)]
        os.kill(master, signal.SIGKILL)
        assert wait_until(lambda: not psutil.pid_exists(master), timeout=15)
        for i in range(20):  # well past the keepalive's 4 s: the agent holds on
            assert actor.add(i, 1) == i + 1
            time.sleep(0.25)
        assert actor.pid() == worker
        status = clusters.xparl(cluster.env, "status").stdout
        assert f"(pid {agent}) of this machine's slots; its master is not running" in status

        started = clusters.xparl(
            cluster.env, "start", "--port", str(cluster.port), "--cpu_num", "5"
        )
        assert f"outlived the earlier master (pid {agent})" in started.stdout
        assert "has its 1 CPU slot(s) here" in started.stdout, started.stdout
        hosts = wait_until(lambda: cluster.status()["hosts"], timeout=10)
        assert [(h["slots"], h["used"]) for h in hosts] == [(1, 1)]  # registered, with its actor
        assert cluster.pids("agent") == [agent]
        assert actor.add(2, 3) == 5
        parl.close_actor(actor)

        # killed again, and started with another secret
        (master,) = cluster.pids("master")
        os.kill(master, signal.SIGKILL)
        assert wait_until(lambda: not psutil.pid_exists(master), timeout=15)
        other = dict(cluster.env, PARL_CLUSTER_SECRET="another-secret-" + "x" * 32)
        started = clusters.xparl(other, "start", "--port", str(cluster.port), check=False)
        assert started.returncode == 1, started.stdout + started.stderr
        assert f"outlived the earlier master (pid {agent}) did not register" in started.stderr
        assert f"`xparl stop --port {cluster.port}`, then `xparl start` again" in started.stderr
        assert "has its" not in started.stdout
        clusters.xparl(other, "stop", "--port", str(cluster.port))
        assert wait_until(lambda: not psutil.pid_exists(agent), timeout=15)
    finally:
        gc.collect()
        parl.disconnect()
        parl.connect(linger=0)
        clusters.stop(cluster)


def test_cluster_connections_probe_dead_peers(cluster):
    """A peer whose machine vanishes sends no FIN: the kernel's keepalive probes (1 s idle,
    1 s apart, 3 tries) end such a connection in about 4 s, on both ends, and the user
    timeout one with data unacknowledged for 4 s; an actor's connection has no user timeout
    (its actor may leave a message unread for as long as a method runs)."""
    sock = control.dial(("127.0.0.1", cluster.port), clusters.SECRET.encode(), "master")
    try:
        raw = sock.sock
        assert raw.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 1
        assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 1
        assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
        assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 4000
        control.allow_zero_window(raw)
        assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 0
        assert raw.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    finally:
        sock.close()
