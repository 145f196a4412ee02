"""The cluster's monitor page: ``xparl start --monitor_port`` on a real cluster on loopback (a
master and two host agents, each its own process, shared by the module's tests), checked through ``/api/status``, ``xparl
status --json`` and a real headless Chromium. An actor printing very long lines does not stop
its host agent's reports, which must fit in a control frame."""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import time
import urllib.error
import urllib.request

import pytest

import parl
from parl.cluster import control
from parl.cluster.hostagent import _Worker
from parl.cluster.monitor import host_stats, monitor_token
from parl.workers import LINE_CHARS
from tests.runtime import cluster as clusters
from tests.runtime.actors import Talker
from tests.runtime.browser import ARTIFACTS, CHROMIUM, browser
from tests.runtime.conftest import wait_until


@parl.remote_class(wait=False)
class Trainer:
    def say(self, text):
        print(text, flush=True)
        return os.getpid()

    def wait_for(self, path):
        while not os.path.exists(path):
            time.sleep(0.01)
        return True


@pytest.fixture(scope="module")
def monitored_cluster(tmp_path_factory):
    """One cluster with its page for the module's tests (each leaves it as it found it)."""
    port = clusters.free_port()
    with clusters.secret_in_environment():
        cluster = clusters.start(str(tmp_path_factory.mktemp("monitored")), monitor_port=port)
        try:
            yield cluster, f"http://127.0.0.1:{port}/"
        finally:
            clusters.stop(cluster)


@pytest.fixture
def monitored(monitored_cluster):
    """The test's actors go to the monitored cluster; afterwards no caller is on its page and
    every slot is free again."""
    cluster, url = monitored_cluster
    parl.connect(cluster.address, linger=0)
    try:
        yield cluster, url
    finally:
        gc.collect()
        parl.disconnect()
        parl.connect(linger=0)
        assert wait_until(lambda: not _status(url)["clients"], timeout=10), "a caller is left"
        assert wait_until(lambda: cluster.used() == 0, timeout=10), "cluster slots still used"


def _status(url):
    with urllib.request.urlopen(url + "api/status", timeout=10) as response:
        return json.loads(response.read())


def _actors(status):
    return {a["pid"]: a for c in status["clients"] for a in c["actors"]}


@pytest.mark.slow  # a stress run
def test_the_page_shows_both_hosts_actors_output_and_deaths(monitored, tmp_path):
    cluster, url = monitored
    go = tmp_path / "go"
    actors = [Trainer() for _ in range(3)]  # 2 + 3 slots: the master spreads them
    pids = [a.say(f"hello from actor {i}").get() for i, a in enumerate(actors)]
    busy = actors[0].wait_for(str(go))

    def ready():
        found = _actors(_status(url))
        return (
            all(pid in found and found[pid]["output"] for pid in pids)
            and found[pids[0]]["state"] == "busy"
        )

    assert wait_until(ready, timeout=15)
    status = _status(url)
    assert status["mode"] == "cluster" and status["version"] == parl.__version__
    hosts = status["hosts"]
    assert sorted(h["slots"] for h in hosts) == [2, 3]
    assert sum(h["used_slots"] for h in hosts) == 3
    assert all(0 < h["memory_used"] < h["memory_total"] for h in hosts)
    found = _actors(status)
    assert found[pids[0]]["method"] == "wait_for"
    assert found[pids[1]]["output"] == ["hello from actor 1"]
    assert all(found[pid]["memory"] > 1 << 20 for pid in pids)
    # the same through `xparl status --json`
    listed = json.loads(clusters.xparl(cluster.env, "status", "--json").stdout)
    (entry,) = listed
    assert set(_actors(entry["status"])) == set(pids)

    if CHROMIUM is not None:
        dom = browser(url, "--dump-dom")
        assert dom.count('<tr class="actor"') == 3 and dom.count("<tr data-host=") == 2
        assert "hello from actor 2" in dom and "busy: wait_for()" in dom

    os.kill(pids[1], signal.SIGKILL)
    assert wait_until(
        lambda: "SIGKILL" in (_actors(_status(url))[pids[1]]["reason"] or ""), timeout=10
    )
    if CHROMIUM is not None:
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "cluster-monitor.png"
        shot.unlink(missing_ok=True)
        browser(url, f"--screenshot={shot}")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        dom = browser(url, "--dump-dom")
        row = re.search(
            rf'<tr class="actor" data-actor="Trainer pid={pids[1]} on [^"]+".*?</tr>', dom, re.S
        )
        assert row and 'data-state="dead"' in row.group(0) and "SIGKILL" in row.group(0)
    assert _actors(_status(url))[pids[1]]["output"] == ["hello from actor 1"]  # last words
    with pytest.raises(parl.ActorDiedError, match="SIGKILL"):
        actors[1].say("too late").get()
    go.touch()
    assert busy.get() is True
    parl.close_actor(actors[2])
    assert wait_until(lambda: _actors(_status(url))[pids[2]]["state"] == "closed", timeout=10)
    del actors, busy


def test_a_caller_that_leaves_leaves_the_page(monitored):
    _, url = monitored
    actor = Trainer()
    pid = actor.say("x").get()
    assert wait_until(lambda: pid in _actors(_status(url)), timeout=10)
    parl.disconnect()  # the caller's connection to the master ends
    assert wait_until(lambda: not _status(url)["clients"], timeout=10)
    del actor


def test_on_a_network_address_the_page_wants_the_token(tmp_path, monkeypatch):
    """Bound to every address (traffic in the test still goes to loopback only): nothing but
    the token page without the token; the derived token or the secret itself opens it."""
    monkeypatch.setenv("PARL_CLUSTER_SECRET", clusters.SECRET)
    home = str(tmp_path / "home")
    os.makedirs(home)
    env = dict(os.environ, HOME=home)
    port, page = clusters.free_port(), clusters.free_port()
    out = clusters.xparl(
        env,
        "start",
        "--port",
        str(port),
        "--host",
        "0.0.0.0",
        "--cpu_num",
        "1",
        "--monitor_port",
        str(page),
    ).stdout
    try:
        token = monitor_token(clusters.SECRET.encode())
        assert f":{page}/" in out and token in out
        url = f"http://127.0.0.1:{page}/"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url + "api/status", timeout=10)
        assert info.value.code == 401 and b"hosts" not in info.value.read()
        for key in (token, clusters.SECRET):
            with urllib.request.urlopen(f"{url}api/status?token={key}", timeout=10) as response:
                assert json.loads(response.read())["mode"] == "cluster"
    finally:
        clusters.xparl(env, "stop", "--port", str(port))
    assert wait_until(lambda: not clusters.port_open(page), timeout=10)


def test_a_monitor_port_equal_to_the_cluster_port_is_refused(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), PARL_CLUSTER_SECRET=clusters.SECRET)
    done = clusters.xparl(env, "start", "--port", "8123", "--monitor_port", "8123", check=False)
    assert done.returncode == 1 and "--monitor_port" in done.stderr


# -- long lines --------------------------------------------------------------------------------


def test_a_host_report_fits_a_control_frame_whatever_workers_print():
    workers = []
    for i in range(300):  # a big machine whose workers all print long lines of odd text
        worker = _Worker(pid=10_000 + i, label=f"Sampler{i}", client="c", pidfd=-1)
        worker.lines.extend(["\x1b[31m" + "é" * (2 * LINE_CHARS)] * 100)
        workers.append(worker)
    report = host_stats(workers, "node1")
    assert len(json.dumps(report)) <= control.CONTROL_MAX_FRAME // 2
    assert len(report["workers"]) == 300


def test_long_lines_keep_a_cluster_host_reporting(monitored, capfd):
    _, page = monitored
    actor = Talker()
    pid = actor.shout(20, 100_000).get()  # 2 MB of lines: more than a control frame

    def lines():
        with urllib.request.urlopen(page + "api/status", timeout=10) as response:
            status = json.loads(response.read())
        actors = [a for c in status["clients"] for a in c["actors"]]
        return next((a["output"] for a in actors if a["pid"] == pid), [])

    assert wait_until(lambda: len(lines()) == 20, timeout=15)
    assert all(len(line) < LINE_CHARS + 50 for line in lines())
    capfd.readouterr()


@pytest.mark.parametrize(
    "figures", [{"load": ["x"]}, {"load": 5}, {"load": [1.0, None]}, {"cpus": "8"}, {"cpus": 2.5}]
)
def test_a_report_with_figures_of_the_wrong_type_is_ignored(figures):
    """A host's report is kept for every later snapshot: one whose load or CPU count has the
    wrong type would make each snapshot (the page, xparl status --json) fail until the next."""
    from parl.cluster.monitor import ClusterView

    view = ClusterView()
    host = {"id": 1, "hostname": "node1", "address": "10.0.0.2:8011", "slots": 2, "used": 0}
    good = {"op": "stats", "cpu_percent": 5.0, "load": [0.5, 0.25, 0.125], "cpus": 4,
            "memory_used": 1, "memory_total": 4}  # fmt: skip
    view.host_stats(1, good)
    view.host_stats(1, {**good, **figures, "cpu_percent": 50.0})
    (row,) = view.snapshot([host], "0")["hosts"]
    assert (row["load"], row["cpus"], row["cpu_history"]) == ([0.5, 0.25, 0.12], 4, [5.0])
