"""Lost networks. A cluster whose host agent is another machine (a network namespace), reached
over a 100 Mbit/s link that the tests cut in the middle of a transfer: the call fails within
seconds with :class:`parl.ActorDiedError` naming the host and the lost connection (no hang for
the kernel's minutes of retries, no raw ``OSError``), in both directions; the master drops the
host, which registers again once the link is back; a lost master fails a new actor within
seconds. On loopback: a busy actor's zero window outlasts the timeout that ends lost
connections, and a sender blocked on an actor that another thread finds dead gets its error.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import parl
from parl.cluster import control
from parl.workers import BackgroundWriter
from tests.runtime import cluster as clusters
from tests.runtime.actors import Mover
from tests.runtime.conftest import wait_until
from tests.runtime.netns import Machine, Network

pytestmark = pytest.mark.slow  # namespace machines with shaped and cut links

BIG = 64 << 20  # about 5 s over the shaped link: long enough to cut it in the middle
UNDER_WAY = 8 << 20  # bytes across before the cut


@dataclass
class FarCluster:
    """A master in the test's namespace (no slots) and a host agent with one slot on ``agent``."""

    net: Network
    agent: Machine
    port: int

    @property
    def address(self) -> str:
        return f"{self.net.here}:{self.port}"

    def hosts(self) -> list[dict[str, Any]]:
        sock = control.dial((self.net.here, self.port), clusters.SECRET.encode(), "test master")
        try:
            return control.request(sock, {"op": "status"}, "test master", 10.0)["hosts"]
        finally:
            sock.close()


def start_agent(machine: Machine, master: str, home: str) -> None:
    """``xparl connect`` on ``machine``, with a home (and code cache) of its own."""
    env = dict(os.environ, HOME=home, PARL_CLUSTER_SECRET=clusters.SECRET)
    argv = [sys.executable, "-m", "parl.cluster.cli", "connect", "--address", master]
    argv += ["--host", machine.address, "--cpu_num", "1"]
    done = machine.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"xparl connect failed: {done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
def far_lab(tmp_path_factory) -> Iterator[FarCluster]:
    """The network, master and far host agent, started once for the module's tests that cut
    the agent's link (``far_cluster`` gives the link back and waits for the host to serve)."""
    folder = tmp_path_factory.mktemp("far")
    with Network() as net:
        agent = net.machine("agent")
        env = dict(os.environ, HOME=str(folder / "home"), PARL_CLUSTER_SECRET=clusters.SECRET)
        port = clusters.free_port()
        clusters.xparl(env, "start", "--port", str(port), "--host", net.here, "--cpu_num", "0")
        try:
            far = FarCluster(net, agent, port)
            start_agent(agent, far.address, str(folder / "agent-home"))
            assert wait_until(lambda: len(far.hosts()) == 1, timeout=15), "no host registered"
            yield far
        finally:
            clusters.xparl(env, "stop", "--port", str(port), check=False)


@pytest.fixture
def far_cluster(far_lab, monkeypatch) -> Iterator[FarCluster]:
    """The test's actors go to the far host. Afterwards the link is whole and unshaped again:
    a link the test left cut stays cut until the master has dropped the host (its keepalive
    ends the connection), then comes back, and the agent registers again with its slot free."""
    far = far_lab
    monkeypatch.setenv("PARL_CLUSTER_SECRET", clusters.SECRET)
    parl.connect(far.address, linger=0)
    try:
        yield far
    finally:
        far.agent.unlimit()
        dropped = not far.agent.is_cut or wait_until(lambda: far.hosts() == [], timeout=30)
        far.agent.restore()
        gc.collect()
        parl.disconnect()
        parl.connect(linger=0)
        assert dropped, f"the master kept a host it lost: {far.hosts()}"
        back = wait_until(lambda: [h["used"] for h in far.hosts()] == [0], timeout=30)
        assert back, f"the far host does not serve again: {far.hosts()}"


def _lost_connection(error: BaseException | None, far: FarCluster) -> BaseException:
    """``error`` is the ActorDiedError of a lost connection to the far host (not a worker's
    exit)."""
    assert isinstance(error, parl.ActorDiedError), f"not an ActorDiedError: {error!r}"
    text = str(error)
    assert f"host agent at {far.agent.address}:" in text, text
    assert "was lost" in text and "network" in text, text
    assert "worker process" not in text, text
    return error


def test_a_large_argument_on_its_way_fails_within_seconds_when_the_network_is_lost(
    far_cluster,
):
    far, agent = far_cluster, far_cluster.agent
    mover = Mover()
    assert mover.pid().get(timeout=60)
    agent.limit("100mbit")
    big = np.ones(BIG, np.uint8)
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["value"] = mover.nbytes(big).get(timeout=120)
        except BaseException as exc:  # noqa: BLE001 - what the call raised is the subject
            outcome["error"], outcome["at"] = exc, time.monotonic()

    before = agent.bytes_in()
    caller = threading.Thread(target=call)
    caller.start()
    assert wait_until(lambda: agent.bytes_in() - before > UNDER_WAY, timeout=30), "no transfer"
    agent.cut()
    cut = time.monotonic()
    caller.join(60)
    assert not caller.is_alive(), "the call still hangs 60 s after the network was lost"
    assert "value" not in outcome, "the whole argument went through a cut link"
    took = outcome["at"] - cut
    print(f"the call failed {took:.1f} s after the cut: {outcome['error']!r}")
    _lost_connection(outcome["error"], far)
    assert took < 30
    with pytest.raises(parl.ActorDiedError):  # and so does every later call
        mover.nbytes(np.ones(10, np.uint8)).get(timeout=30)

    # the master drops the host; the agent registers again once the link is back, its slot
    # free (the worker of a caller it lost was stopped)
    assert wait_until(lambda: far.hosts() == [], timeout=30), "the master kept a lost host"
    agent.restore()
    assert wait_until(lambda: [h["used"] for h in far.hosts()] == [0], timeout=30), (
        f"the agent did not register again: {far.hosts()}"
    )
    again = Mover()
    assert again.nbytes(np.ones(10, np.uint8)).get(timeout=60) == 10


def test_a_large_return_value_on_its_way_back_fails_within_seconds_when_the_network_is_lost(
    far_cluster,
):
    far, agent = far_cluster, far_cluster.agent
    mover = Mover()
    assert mover.pid().get(timeout=60)
    agent.limit("100mbit")
    outcome: dict[str, Any] = {}
    before = agent.bytes_out()
    future = mover.make(BIG)

    def wait() -> None:
        try:
            outcome["value"] = future.get(timeout=120)
        except BaseException as exc:  # noqa: BLE001 - what the call raised is the subject
            outcome["error"], outcome["at"] = exc, time.monotonic()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert wait_until(lambda: agent.bytes_out() - before > UNDER_WAY, timeout=30), "no transfer"
    agent.cut()
    cut = time.monotonic()
    waiter.join(60)
    assert not waiter.is_alive(), "the wait still hangs 60 s after the network was lost"
    assert "value" not in outcome, "the whole value came back through a cut link"
    took = outcome["at"] - cut
    print(f"the wait failed {took:.1f} s after the cut: {outcome['error']!r}")
    _lost_connection(outcome["error"], far)
    assert took < 30


def test_a_lost_idle_host_is_named_in_the_error_of_a_later_call(far_cluster):
    far, agent = far_cluster, far_cluster.agent
    mover = Mover()
    assert mover.pid().get(timeout=60)
    agent.cut()
    cut = time.monotonic()
    with pytest.raises(parl.ActorDiedError) as info:
        mover.nbytes(np.ones(10, np.uint8)).get(timeout=60)
    print(f"the call failed {time.monotonic() - cut:.1f} s after the cut: {info.value!r}")
    _lost_connection(info.value, far)


def test_a_busy_actor_may_leave_a_large_message_unread_longer_than_the_network_timeout(
    on_cluster, tmp_path
):
    """A zero window held longer than the control connections' user timeout is a healthy
    connection: a large argument waits for a busy actor, and a large return value for a
    caller that does not read it yet; both arrive whole."""
    busy, replier = Mover(), Mover()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    blocked = busy.block(str(fifo))
    reply = replier.make(BIG)  # nobody reads it for now
    big = np.ones(BIG, np.uint8)
    sent: dict[str, Any] = {}

    def send() -> None:
        try:
            sent["future"] = busy.nbytes(big)
        except BaseException as exc:  # noqa: BLE001 - what the call raised is the subject
            sent["error"] = exc

    sender = threading.Thread(target=send)
    sender.start()
    held = control.USER_TIMEOUT_MS / 1000 + 3.0
    sender.join(held)
    assert sender.is_alive(), f"the send did not wait for the busy actor: {sent}"
    with open(fifo, "w") as writer:
        writer.write("done")
    sender.join(60)
    assert not sender.is_alive() and "error" not in sent, sent
    assert blocked.get(timeout=30) == "done"
    assert sent["future"].get(timeout=60) == BIG
    assert reply.get(timeout=60).nbytes == BIG


def test_a_sender_blocked_on_an_actor_whose_death_another_thread_finds_gets_actor_died_error(
    on_cluster, tmp_path
):
    """The thread that finds the worker dead shuts the connection down; the thread blocked
    sending to it raises the actor's error, never the OSError of a socket closed under it."""
    actor = Mover()
    pid = actor.pid().get(timeout=30)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    blocked = actor.block(str(fifo))
    big = np.ones(BIG, np.uint8)
    outcome: dict[str, Any] = {}

    def send() -> None:
        try:
            outcome["future"] = actor.nbytes(big)
        except BaseException as exc:  # noqa: BLE001 - what the call raised is the subject
            outcome["error"] = exc

    sender = threading.Thread(target=send)
    sender.start()

    def sending() -> bool:  # the sender waits in the middle of its frame
        frame = sys._current_frames().get(sender.ident or 0)
        while frame is not None and frame.f_code.co_name != "_send_parts":
            frame = frame.f_back
        return frame is not None

    assert wait_until(sending, timeout=30), "the send did not block on the busy actor"
    os.kill(pid, 9)
    with pytest.raises(parl.ActorDiedError, match="SIGKILL"):
        blocked.get(timeout=30)
    sender.join(30)
    assert not sender.is_alive(), "the sender still blocks on a dead actor"
    assert isinstance(outcome.get("error"), parl.ActorDiedError), outcome


def test_a_lost_master_fails_a_new_actor_within_seconds_and_leaves_the_actors_working(
    tmp_path, monkeypatch
):
    """The caller's connection to a master on a machine that the network lost: asking it for
    a slot fails with ClusterError within seconds (not after the placement's own timeout),
    actors already made go on, as calls never pass through the master, and once the link is
    back the next placement connects to the master again."""
    monkeypatch.setenv("PARL_CLUSTER_SECRET", clusters.SECRET)
    with Network() as net:
        master, agent = net.machine("master"), net.machine("agent")
        env = dict(os.environ, HOME=str(tmp_path / "home"), PARL_CLUSTER_SECRET=clusters.SECRET)
        argv = [sys.executable, "-m", "parl.cluster.cli", "start", "--port", "8010"]
        done = master.run(
            [*argv, "--host", master.address, "--cpu_num", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"xparl start failed: {done.stdout}{done.stderr}"
        address = f"{master.address}:8010"
        start_agent(agent, address, str(tmp_path / "agent-home"))
        parl.connect(address, linger=0)
        try:
            mover = Mover()
            assert mover.nbytes(np.ones(10, np.uint8)).get(timeout=60) == 10
            master.cut()
            cut = time.monotonic()
            with pytest.raises(parl.ClusterError, match=f"the master at {address}") as info:
                Mover()
            took = time.monotonic() - cut
            print(f"creating an actor failed {took:.1f} s after the cut: {info.value!r}")
            assert took < 30
            assert mover.nbytes(np.ones(10, np.uint8)).get(timeout=60) == 10
            master.restore()
            parl.close_actor(mover)  # its slot comes back to the master
            again = Mover()  # the next placement connects to the master again
            assert again.nbytes(np.ones(10, np.uint8)).get(timeout=60) == 10
        finally:
            master.restore()
            gc.collect()
            parl.disconnect()
            parl.connect(linger=0)


QUIET_TERMINAL = """
import sys
import parl
from tests.runtime.actors import Talker

parl.connect(sys.argv[1], linger=0)
talker = Talker()
talker.shout(300, 100_000).get(timeout=120)  # 30 MB of lines to a stdout nobody reads
with open(sys.argv[2], "w") as f:
    f.write(str(talker.value().get(timeout=30)))
"""


def test_a_caller_whose_terminal_takes_no_output_keeps_its_actors(on_cluster, tmp_path):
    """The control connection that brings the actors' lines is read at once whatever the
    terminal does (a connection left unread for seconds would count as lost): lines the
    terminal cannot take are kept up to a limit, then dropped, with a note."""
    script, result = tmp_path / "quiet.py", tmp_path / "result"
    script.write_text(QUIET_TERMINAL)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    caller = subprocess.Popen(
        [sys.executable, str(script), on_cluster.address, str(result)],
        stdout=subprocess.PIPE,  # read by nobody until the end: a stalled terminal
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert wait_until(result.exists, timeout=120), "the actor did not finish its lines"
        _, err = caller.communicate(timeout=60)
    finally:
        caller.kill()
        caller.wait()
    assert result.read_text() == "42", err


class _StalledTerminal:
    """A stdout that takes nothing until ``go`` is set."""

    def __init__(self) -> None:
        self.writing = threading.Event()  # a write waits
        self.go = threading.Event()
        self.text = ""

    def write(self, text: str) -> int:
        self.writing.set()
        self.go.wait(30)
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_lines_a_stalled_terminal_cannot_take_wait_up_to_a_limit_then_are_dropped(
    capsys, monkeypatch
):
    # (capsys first: monkeypatch gives sys.stdout back to capsys, which gives it back)
    terminal = _StalledTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    writer = BackgroundWriter(backlog=100)
    lines = [f"line {i:02d} {'x' * 30}\n" for i in range(10)]  # 39 characters each
    writer.put("stdout", lines[0])
    assert terminal.writing.wait(30)  # the writer holds the first line, the terminal stalls
    for line in lines[1:]:
        writer.put("stdout", line)  # two fit in the backlog of 100, seven are dropped
    terminal.go.set()
    writer.close()
    assert writer._thread is not None
    writer._thread.join(30)
    assert terminal.text == "".join(lines[:3])
    note = capsys.readouterr().err
    dropped = sum(len(line) for line in lines[3:])
    assert f"(parl: {dropped} characters of actors' output were dropped" in note, note
