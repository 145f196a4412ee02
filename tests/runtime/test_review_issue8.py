"""Review of the TCP cluster (issue 8): problems found by a hostile user on loopback.

Each test says what a user saw and what was expected. They run against the session's loopback
cluster (tests/runtime/cluster.py: a master without slots, host agents with 2 and 3 slots).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import pytest

import parl
from parl.cluster import auth, control
from parl.cluster.carrier import ClusterCarrier
from parl.errors import AuthenticationError, ClusterError
from tests.runtime.actors import Sampler
from tests.runtime.cluster import SECRET
from tests.runtime.conftest import wait_until


def _master(cluster) -> control.FrameSocket:
    """A raw, authenticated caller connection to the master."""
    sock = control.dial(("127.0.0.1", cluster.port), SECRET.encode(), "master")
    control.request(sock, {"op": "client"}, "master", 10)
    return sock


# -- slots ------------------------------------------------------------------------------------


def test_a_grant_of_a_caller_that_went_away_frees_its_slot_at_once(cluster):
    """Seen: a caller killed between the master's grant and the actor's start (or one whose
    start failed) held its slot for 30 s (the grant's TTL): on a full cluster, other callers
    waited or got "no free slot". Expected: the slot is free again as soon as the caller's
    connection ends, as for a dead caller's actors (issue 8: "within 5 s")."""
    sock = _master(cluster)
    try:
        control.send(sock, {"op": "place", "timeout": 5})
        assert control.recv(sock, 10)["op"] == "placed"
        assert cluster.used() == 1
    finally:
        sock.close()  # the caller dies before it starts the actor
    assert wait_until(lambda: cluster.used() == 0, timeout=5), cluster.status()


def test_a_failed_actor_start_gives_its_grant_back(on_cluster, monkeypatch):
    """Seen: when starting an actor failed after the master granted a slot (the host agent
    could not be reached, refused, ...), the slot stayed taken for 30 s although the caller
    lives on. Expected: the caller gives the grant back; the slot is free at once."""
    parl.connect(on_cluster.address, linger=0, slot_timeout=5)

    def unreachable(self, where, what, token):
        raise ClusterError(f"cannot reach {what}")

    monkeypatch.setattr(ClusterCarrier, "_channel", unreachable)
    with pytest.raises(ClusterError, match="cannot reach"):
        Sampler()
    assert wait_until(lambda: on_cluster.used() == 0, timeout=5), on_cluster.status()


# -- hostile control messages from a peer that holds the secret --------------------------------


@pytest.mark.parametrize("timeout", ["NaN", "Infinity", '"soon"'])
def test_a_place_with_a_timeout_that_is_not_finite_is_refused(cluster, timeout):
    """Seen: ``{"op": "place", "timeout": NaN}`` (valid JSON for Python) made a master
    thread spin on ``Condition.wait(nan)`` forever, holding a core and never answering.
    Expected: an error answer at once; the master keeps serving."""
    sock = _master(cluster)
    try:
        sock.send(b'{"op":"place","timeout":%s}' % timeout.encode())
        answer = control.recv(sock, 5)
        assert answer is None or answer["op"] == "error", answer
    finally:
        sock.close()
    assert wait_until(lambda: cluster.status()["clients"] == 0, timeout=5)
    assert cluster.used() == 0


@pytest.mark.parametrize("slots", [-3, 0, 2.5, "4"])
def test_a_host_with_a_slot_count_below_one_is_refused(cluster, slots):
    """Seen: a ``register`` with ``slots: -3`` joined the cluster, and the master's totals
    (``xparl status``, the "no free slot" error) counted negative slots. Expected: refused."""
    sock = control.dial(("127.0.0.1", cluster.port), SECRET.encode(), "master")
    try:
        hello = {"op": "register", "host": "127.0.0.1", "port": 9, "hostname": "x"}
        control.send(sock, {**hello, "slots": slots})
        answer = control.recv(sock, 5)
        assert answer is None or answer["op"] == "error", answer
    finally:
        sock.close()
    assert wait_until(lambda: len(cluster.status()["hosts"]) == 2, timeout=5)
    assert sorted(h["slots"] for h in cluster.status()["hosts"]) == [2, 3]


def test_another_callers_id_cannot_take_its_actors_down(on_cluster):
    """Seen: a second control connection to a host agent that gave the id of a connected
    caller (ids are listed by the agent's ``host`` status) took its place, and when it closed,
    the agent stopped the *first* caller's actors. Expected: the agent refuses an id that is
    already connected; the first caller's actor keeps working."""
    actor = Sampler()
    pid = actor.pid()
    agents = [("127.0.0.1", port) for port in on_cluster.agent_ports]
    cid = None
    for where in agents:
        sock = control.dial(where, SECRET.encode(), "agent")
        try:
            actors = control.request(sock, {"op": "host"}, "agent", 10)["actors"]
        finally:
            sock.close()
        mine = [a for a in actors if a["pid"] == pid]
        if mine:
            cid = mine[0]["client"]
            break
    assert cid is not None
    other = control.dial(where, SECRET.encode(), "agent")
    try:
        control.send(other, {"op": "caller", "client": cid, "forward": True})
        answer = control.recv(other, 10)
        assert answer is None or answer["op"] == "error", answer
    finally:
        other.close()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # a second: the agent has seen the close by then
        assert actor.add(1, 2) == 3
    del actor
    gc.collect()


# -- the secret file --------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(auth.SECRET_ENV, raising=False)
    os.makedirs(tmp_path / ".parl", mode=0o700)
    return tmp_path


def test_a_secret_that_is_a_symlink_is_refused_with_a_clear_error(home, tmp_path_factory):
    """Seen: ``xparl start`` (and ``parl.connect``) with ~/.parl/cluster_secret a symlink
    died with a raw ``OSError: [Errno 40] Too many levels of symbolic links`` traceback.
    Expected: an AuthenticationError that names the file (xparl prints it on one line)."""
    target = tmp_path_factory.mktemp("elsewhere") / "secret"
    target.write_text("0123456789abcdef0123456789abcdef\n")
    os.chmod(target, 0o600)
    os.symlink(target, home / ".parl" / "cluster_secret")
    with pytest.raises(AuthenticationError, match="cluster_secret"):
        auth.load_secret()


def test_a_secret_that_is_a_directory_is_refused_with_a_clear_error(home):
    """Seen: a directory at ~/.parl/cluster_secret (mode 0700 passes the mode check) gave
    ``IsADirectoryError`` from deep inside ``load_secret``. Expected: AuthenticationError."""
    os.mkdir(home / ".parl" / "cluster_secret", 0o700)
    with pytest.raises(AuthenticationError, match="not a plain file"):
        auth.load_secret()


def test_a_secret_that_is_a_fifo_does_not_hang(home):
    """Seen: a FIFO at ~/.parl/cluster_secret made ``xparl start`` and ``parl.connect``
    block forever in ``open``. Expected: an AuthenticationError at once."""
    os.mkfifo(home / ".parl" / "cluster_secret", 0o600)
    code = (
        "from parl.cluster import auth\n"
        "try:\n    auth.load_secret()\n"
        "except auth.AuthenticationError as exc:\n    print('refused:', exc)\n"
    )
    env = dict(os.environ, HOME=str(home))
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("load_secret blocked on a FIFO")
    assert "refused:" in done.stdout and "not a plain file" in done.stdout, done


# -- placement: several threads of one caller ---------------------------------------------------


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


# -- deployment: the code cache's job folders ----------------------------------------------------


def _cache_with_code(tmp_path, root="cache"):
    from parl.cluster import deploy, packer

    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "main.py").write_text("print('hi')\n")
    pack = packer.pack_project(project)
    cache = deploy.CodeCache(tmp_path / root)
    packer.unpack(pack.data, cache.root / pack.digest)
    return cache, pack.digest


def _week_old(path):
    then = time.time() - 8 * 86400
    os.utime(path, (then, then))


def test_a_long_runs_job_folder_is_not_pruned_while_its_caller_is_there(tmp_path):
    """Seen: a training run whose actors ran for more than a week (their working folder's
    own mtime does not change when files inside it are rewritten) had its folder deleted
    under its feet, checkpoints and all, when another caller on the host finished: the
    'orphan' rule removed every unfinished folder untouched for 7 days, live or not; an agent
    sharing the cache folder (two clusters of one user, ~/.parl/cache) did the same.
    Expected: a folder whose caller is still connected is never removed."""
    cache, digest = _cache_with_code(tmp_path)
    long = cache.job_folder("long0000", digest)
    (long / "checkpoint.pt").write_bytes(b"weeks of training")
    _week_old(long)
    cache.job_folder("done0000", digest)
    cache.job_done("done0000")
    assert (long / "checkpoint.pt").exists()
    from parl.cluster import deploy

    other = deploy.CodeCache(cache.root)  # another cluster's agent, same cache folder
    other.job_folder("other000", digest)
    other.job_done("other000")
    assert (long / "checkpoint.pt").exists()
    cache.job_done("long0000")


def test_a_caller_that_reconnects_keeps_its_folder_while_it_runs(tmp_path, monkeypatch):
    """Seen: a caller whose control connection to a host dropped and was opened again (same
    caller id) went on in its job folder, which still carried the 'finished' marker of the
    first connection: the next callers' ends pruned it while its actors were running in it.
    Expected: a folder in use again is not a finished one."""
    from parl.cluster import deploy

    monkeypatch.setattr(deploy, "KEEP_JOBS", 1)
    cache, digest = _cache_with_code(tmp_path)
    folder = cache.job_folder("again000", digest)
    cache.job_done("again000")  # the connection dropped
    assert cache.job_folder("again000", digest) == folder  # and came back
    for i in range(3):
        cache.job_folder(f"done{i:04d}", digest)
        cache.job_done(f"done{i:04d}")
    assert folder.is_dir()
    cache.job_done("again000")


from tests.runtime.test_cluster_grants import TTL, _place, one_slot  # noqa: E402,F401


def test_a_grant_does_not_lapse_while_another_thread_of_its_caller_waits_for_a_slot(one_slot):  # noqa: F811
    """Seen: thread A of a script was uploading its code under a grant (a slow link) while
    thread B waited for a slot on the same (full) cluster. B's wait holds the caller's one
    connection to the master, so A's renewals were skipped (and the master would not have
    read them): A's grant lapsed after its TTL and was handed to B. Both then went to a host
    with one free slot, and one of them failed with 'host ... has no free slot' after its
    upload. Expected: a live caller's grant does not lapse because another of its threads
    is waiting; B waits for its own slot."""
    caller = one_slot()
    grant = _place(caller, 1.0)  # thread A's grant; A is uploading
    assert grant["op"] == "placed"
    second = _place(caller, 3 * TTL)  # thread B, on the same connection
    assert second["op"] == "error", f"the one slot was granted twice: {grant} and {second}"
