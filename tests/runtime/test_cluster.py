"""A real cluster on loopback: placement, slots, output, dead workers and callers, xparl.
(A killed host agent: test_cluster_failures.py.)"""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

import parl
from tests.runtime import cluster as clusters
from tests.runtime.actors import Sampler
from tests.runtime.conftest import wait_until


def _per_host(cluster) -> list[int]:
    return sorted(h["used"] for h in cluster.status()["hosts"])


def test_actors_fill_the_slots_of_both_hosts(on_cluster):
    actors = [Sampler() for _ in range(5)]
    assert _per_host(on_cluster) == [2, 3]
    pids = {a.pid() for a in actors}
    assert len(pids) == 5 and os.getpid() not in pids
    assert {w.pid for w in on_cluster.workers()} == pids


def test_no_free_slot_waits_then_fails_naming_the_slots(on_cluster, caplog):
    parl.connect(on_cluster.address, slot_timeout=0.5)
    actors = [Sampler() for _ in range(5)]
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="parl.cluster"):
        with pytest.raises(parl.errors.ResourceError, match=r"2 host\(s\), 5 slot\(s\), 5 used"):
            Sampler()
    assert time.monotonic() - start >= 0.45
    assert "no free slot in the cluster" in caplog.text and "waiting up to 0.5 s" in caplog.text
    assert actors[0].add(1, 2) == 3  # the others are untouched


def test_after_disconnect_new_actors_run_on_local_workers(on_cluster):
    from parl.local import LocalCarrier
    from parl.remote.context import actors_share_memory, current

    remote = Sampler()
    assert remote.pid() in {w.pid for w in on_cluster.workers()}
    parl.disconnect()
    with pytest.raises(parl.ActorClosedError):
        remote.add(1, 2)
    local = Sampler()  # as without any connect: not on the cluster
    assert isinstance(current().carrier, LocalCarrier) and actors_share_memory()
    assert local.pid() not in {w.pid for w in on_cluster.workers()}
    assert psutil.Process(local.pid()).ppid() == current().carrier.server_pid
    parl.close_actor(local)


def test_a_closed_actors_slot_is_reused_at_once(on_cluster, caplog):
    parl.connect(on_cluster.address, slot_timeout=10)
    actors = [Sampler() for _ in range(5)]
    for _ in range(3):
        parl.close_actor(actors.pop())
        start = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="parl.cluster"):
            actors.append(Sampler())  # waits only for the closed worker to end
        assert time.monotonic() - start < 5.0  # not for a slot (up to slot_timeout, 10 s)
        assert actors[-1].add(2, 2) == 4
    # that short wait is not a "no free slot" wait: nothing is logged
    assert "no free slot" not in caplog.text


def test_threads_creating_actors_at_once_on_a_new_host_all_get_one(on_cluster, monkeypatch):
    """Seen: a script that creates its actors from several threads at once (a thread pool)
    got ``ClusterError: caller id '...' is already connected`` for some of them: each thread
    that found no control connection to the granted host opened its own, and the host agent
    takes one per caller id. Expected: every thread gets its actor (one connection per host is
    opened, and the code uploaded, by one thread while the others wait)."""
    import threading

    from parl.cluster import carrier as carriers

    entered = threading.Barrier(3)
    opened = carriers._HostChannel.__init__

    def together(self, *args, **kwargs):  # the threads dial the agents at the same moment
        try:
            entered.wait(timeout=1.0)
        except threading.BrokenBarrierError:
            pass  # only one thread gets here at a time
        opened(self, *args, **kwargs)

    monkeypatch.setattr(carriers._HostChannel, "__init__", together)
    errors, actors = [], []

    def create():
        try:
            actors.append(Sampler())
        except Exception as exc:  # noqa: BLE001 - what the user saw
            errors.append(exc)

    # three grants on hosts of 2 and 3 free slots: two of them on the same host
    threads = [threading.Thread(target=create) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert sorted(actor.add(i, 1) for i, actor in enumerate(actors)) == [1, 2, 3]
    actors.clear()
    gc.collect()


def test_output_reaches_the_caller_with_actor_and_host(on_cluster, capsys):
    actor = Sampler()
    pid = actor.pid()
    assert actor.speak("hello over tcp")
    assert actor.speak("error over tcp", err=True)
    out, err = "", ""

    def seen():
        nonlocal out, err
        captured = capsys.readouterr()
        out, err = out + captured.out, err + captured.err
        return "hello over tcp" in out and "error over tcp" in err

    assert wait_until(seen, timeout=10)
    host = os.uname().nodename
    assert f"(Sampler pid={pid} on {host}) hello over tcp\n" in out
    assert f"(Sampler pid={pid} on {host}) error over tcp\n" in err
    lines = [a["lines"] for a in _agent_status(on_cluster) if a["pid"] == pid]
    prefix = f"(Sampler pid={pid} on {host}) "
    assert lines and {prefix + "hello over tcp", prefix + "error over tcp"} <= set(lines[0])


def _agent_status(cluster) -> list[dict]:
    """Every actor of both host agents, with its last lines of output."""
    from parl.cluster import control

    actors = []
    for port in cluster.agent_ports:
        sock = control.dial(("127.0.0.1", port), clusters.SECRET.encode(), "agent")
        try:
            actors += control.request(sock, {"op": "host"}, "agent", 10)["actors"]
        finally:
            sock.close()
    return actors


def test_a_killed_worker_is_a_dead_actor_and_frees_its_slot(on_cluster):
    doomed, other = Sampler(), Sampler()
    os.kill(doomed.pid(), signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(parl.ActorDiedError, match="was killed by SIGKILL"):
        doomed.add(1, 2)
    assert time.monotonic() - start < 5.0  # seen at once, not after a timeout
    assert other.add(1, 2) == 3
    assert wait_until(lambda: on_cluster.used() == 1, timeout=15)


def test_a_killed_callers_actors_end_and_their_slots_come_back(on_cluster, tmp_path):
    script = tmp_path / "caller.py"
    script.write_text(
        "import sys, parl\n"
        "from tests.runtime.actors import Sampler\n"
        f"parl.connect({on_cluster.address!r})\n"
        "actors = [Sampler() for _ in range(3)]\n"
        "print(' '.join(str(a.pid()) for a in actors), flush=True)\n"
        "sys.stdin.read()\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    caller = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=root),
        text=True,
    )
    try:
        pids = [int(p) for p in caller.stdout.readline().split()]
        assert len(pids) == 3 and on_cluster.used() == 3
        caller.kill()
        caller.wait()
        assert wait_until(lambda: on_cluster.used() == 0, timeout=15)
        assert wait_until(lambda: not any(psutil.pid_exists(p) for p in pids), timeout=15)
    finally:
        caller.kill()
        caller.wait()
        caller.stdin.close()
        caller.stdout.close()


def test_connect_errors_name_the_problem(cluster, monkeypatch):
    with pytest.raises(parl.ClusterError, match="cannot reach the master at 127.0.0.1:1"):
        parl.connect("127.0.0.1:1")
    monkeypatch.setenv("PARL_CLUSTER_SECRET", "another-secret-0123456789")
    with pytest.raises(parl.AuthenticationError, match="refused this machine's cluster secret"):
        parl.connect(cluster.address)
    with pytest.raises(ValueError, match="'host:port'"):
        parl.connect("localhost:http")


def test_xparl_start_on_a_name_of_loopback_says_what_it_listens_on(cluster):
    """``--host`` given as a name that resolves to loopback here (Debian maps the machine's
    own name to 127.0.1.1): the user meant other machines to join; the output says why they
    cannot."""
    port = clusters.free_port()
    out = clusters.xparl(cluster.env, "start", "--port", str(port), "--host", "localhost").stdout
    try:
        said = "cannot join, the master listens on 127.0.0.1 only (--host localhost is 127.0.0.1"
        assert said in out, out
        assert f"xparl start --port {port} --host 0.0.0.0" in out
    finally:
        clusters.xparl(cluster.env, "stop", "--port", str(port))


def test_xparl_start_status_stop_one_cluster_only(cluster, tmp_path):
    env = dict(cluster.env)  # the same user (HOME) as the session's cluster
    port = clusters.free_port()
    start = time.monotonic()
    out = clusters.xparl(env, "start", "--port", str(port), "--cpu_num", "2").stdout
    try:
        took = time.monotonic() - start
        # returns once its daemons answer: not after a hang (a loaded machine takes seconds to
        # start three interpreters, so the bound is loose)
        assert took < 20.0, f"xparl start took {took:.2f} s"
        assert f"xparl connect --address 127.0.0.1:{port}" in out
        assert "other machines:  cannot join, the master listens on 127.0.0.1 only" in out
        ours = {s["role"]: s for s in _states(cluster.home) if s["cluster_port"] == port}
        assert sorted(ours) == ["agent", "master"] and ours["agent"]["master_slots"]
        daemon = psutil.Process(ours["master"]["pid"])
        agent = psutil.Process(ours["agent"]["pid"])
        assert daemon.children(recursive=True) == []  # the slots are the agent's, not the master's
        assert len([agent, *agent.children(recursive=True)]) <= 2  # idle: agent + fork server
        status = clusters.xparl(env, "status").stdout
        assert f"cluster 127.0.0.1:{port} " in status and "0 of 2 slot(s) used, 2 free" in status
        assert f"cluster {cluster.address} " in status and "0 of 5 slot(s) used" in status
        again = clusters.xparl(env, "start", "--port", str(port), check=False)
        assert again.returncode == 1 and "already runs on port" in again.stderr
    finally:  # (a failed check above leaves no cluster behind)
        stopped = clusters.xparl(env, "stop", "--port", str(port), check=False)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert wait_until(lambda: not daemon.is_running() and not agent.is_running(), timeout=30)
    assert not clusters.port_open(port)
    assert len(cluster.status()["hosts"]) == 2  # the other cluster still serves
    gone = clusters.xparl(env, "stop", "--port", str(port), check=False)
    assert gone.returncode == 1 and "no cluster of yours is running on port" in gone.stdout


def test_xparl_status_on_a_machine_with_only_an_agent_names_it_and_its_master(cluster, tmp_path):
    # another machine: its own HOME, the cluster's secret, an agent that `xparl connect` started
    home = tmp_path / "agent-machine"
    home.mkdir()
    env = dict(cluster.env, HOME=str(home))
    before = len(cluster.status()["hosts"])
    joined = clusters.xparl(env, "connect", "--address", cluster.address, "--cpu_num", "1")
    assert "joined the cluster" in joined.stdout
    try:
        assert wait_until(lambda: len(cluster.status()["hosts"]) == before + 1, timeout=10)
        status = clusters.xparl(env, "status").stdout
        assert "no cluster of yours" not in status
        (agent,) = _states(str(home))
        assert f"host agent at {agent['address']} (pid {agent['pid']})" in status
        assert f"in the cluster at {cluster.address}" in status
    finally:
        port = cluster.address.rsplit(":", 1)[1]
        clusters.xparl(env, "stop", "--port", port)
    assert wait_until(lambda: len(cluster.status()["hosts"]) == before, timeout=10)
    assert "no cluster of yours is running" in clusters.xparl(env, "status").stdout


def _states(home: str) -> list[dict]:
    import json

    folder = os.path.join(home, ".parl", "clusters")
    found = []
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as file:
            found.append(json.load(file))
    return found


def test_large_arrays_cross_intact_and_writable(on_cluster):
    import numpy as np

    actor = Sampler()
    array = np.random.default_rng(0).random((1 << 21) + 1)  # 16 MiB, inline in the frame
    back = actor.echo(array)
    np.testing.assert_array_equal(back, array)
    back[0] = -1.0  # a value of its own, writable
    strided = actor.echo(array[::3])
    np.testing.assert_array_equal(strided, array[::3])


def test_a_forked_child_does_not_keep_a_killed_callers_actors_alive(on_cluster, tmp_path):
    script = tmp_path / "caller.py"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    script.write_text(
        "import os, sys, parl\n"
        "from tests.runtime.actors import AsyncSampler\n"
        f"parl.connect({on_cluster.address!r})\n"
        "actor = AsyncSampler()\n"
        "pid = actor.pid().get()\n"
        f"busy = actor.block({str(fifo)!r})  # never answered: the worker is busy\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    sys.stdin.read()\n"
        "    os._exit(0)\n"
        "print(pid, child, flush=True)\n"
        "sys.stdin.read()\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    caller = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=root),
        text=True,
    )
    child = None
    try:
        worker, child = (int(p) for p in caller.stdout.readline().split())
        caller.kill()
        caller.wait()
        assert psutil.pid_exists(child)  # still holds copies of the parent's sockets
        assert wait_until(lambda: on_cluster.used() == 0, timeout=15)
        assert wait_until(lambda: not psutil.pid_exists(worker), timeout=15)
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
            wait_until(lambda: not psutil.pid_exists(child), timeout=15)
        caller.kill()
        caller.wait()
        caller.stdin.close()
        caller.stdout.close()


class Pid:
    """A class each test decorates with the options it tries."""

    def pid(self) -> int:
        return os.getpid()


def test_numpy_numbers_as_options_reach_the_cluster_as_json(on_cluster):
    """The checks accept numpy's ints and floats; what they pass on is Python's, since the
    cluster's control messages are JSON (a numpy int is not JSON-serializable)."""
    import numpy as np

    parl.connect(on_cluster.address, linger=0, max_frame=np.int64(1 << 20))
    options = [
        {"n_gpu": np.int64(0)},
        {"num_threads": np.int64(1)},
        {"max_memory": np.float32(2048)},
        {"max_memory": np.int64(2048)},
    ]
    for kwargs in options:
        actor = parl.remote_class(**kwargs)(Pid)()
        assert actor.pid() != os.getpid(), kwargs
        parl.close_actor(actor)
