"""Slot grants at the master (parl/cluster/master.py), in process on loopback: a grant that
no actor takes expires after GRANT_TTL_S, unless its caller renews it (op ``extend``: the
caller is still uploading its code to the granted host); only the caller holding a grant can
renew it, and a thread of the caller waiting for a slot does not let another's grant lapse.
The TTL is shortened to keep the test fast.

On the session's loopback cluster (tests/runtime/cluster.py: a master without slots, host
agents with 2 and 3 slots): a grant comes back at once when its caller goes away or its
actor's start fails, and a place request with a timeout that is not a finite number is
refused."""

from __future__ import annotations

import re
import secrets
import time

import pytest

import parl
from parl.cluster import control, master
from parl.cluster.carrier import ClusterCarrier
from parl.cluster.server import Server
from parl.errors import ClusterError
from tests.runtime.actors import Sampler
from tests.runtime.cluster import SECRET
from tests.runtime.conftest import wait_until

TTL = 0.6


@pytest.fixture
def one_slot(monkeypatch):
    monkeypatch.setattr(master, "GRANT_TTL_S", TTL)
    secret = secrets.token_bytes(32)
    boss = master.Master()
    boss.add_host("127.0.0.1", 9, "fake-host", slots=1)  # placement needs no real agent
    server = Server("127.0.0.1", 0, secret, boss.handlers)
    server.start()
    socks = []

    def client():
        sock = control.dial((server.host, server.port), secret, "the test master")
        socks.append(sock)
        assert control.request(sock, {"op": "client"}, "the master", 5.0)["op"] == "welcome"
        return sock

    yield client
    for sock in socks:
        sock.close()
    server.close()


def _place(sock, timeout: float) -> control.Message:
    control.send(sock, {"op": "place", "timeout": timeout, "n_gpu": 0})
    while True:
        answer = control.recv(sock, timeout + 5.0)
        assert answer is not None
        if answer["op"] != "waiting":
            return answer


def test_a_renewed_grant_outlives_its_ttl_and_an_unrenewed_one_does_not(one_slot):
    uploader, other = one_slot(), one_slot()
    grant = _place(uploader, 1.0)
    assert grant["op"] == "placed"
    end = time.monotonic() + 3 * TTL
    while time.monotonic() < end:  # a slow upload: renewed every TTL / 3
        control.send(uploader, {"op": "extend", "token": grant["token"]})
        time.sleep(TTL / 3)
    refused = _place(other, 0.1)  # three TTLs later the slot is still the uploader's
    assert refused["op"] == "error" and "1 slot(s), 1 used" in refused["message"]
    # no more renewals: the grant lapses and the slot goes to the next caller that waits
    assert _place(other, 5 * TTL)["op"] == "placed"


def test_only_the_caller_holding_a_grant_can_renew_it(one_slot):
    holder, thief = one_slot(), one_slot()
    grant = _place(holder, 1.0)
    started = time.monotonic()
    end = started + 3 * TTL
    while time.monotonic() < end:  # another caller's renewals do nothing
        control.send(thief, {"op": "extend", "token": grant["token"]})
        time.sleep(TTL / 3)
    assert _place(thief, 0.1)["op"] == "placed"  # the holder's grant lapsed after one TTL


# -- grants on the session's loopback cluster --------------------------------------------------


def _master(cluster) -> control.FrameSocket:
    """A raw, authenticated caller connection to the master."""
    sock = control.dial(("127.0.0.1", cluster.port), SECRET.encode(), "master")
    control.request(sock, {"op": "client"}, "master", 10)
    return sock


def test_a_grant_of_a_caller_that_went_away_frees_its_slot_at_once(cluster):
    """Seen: a caller killed between the master's grant and the actor's start (or one whose
    start failed) held its slot for 30 s (the grant's TTL): on a full cluster, other callers
    waited or got "no free slot". Expected: the slot is free again as soon as the caller's
    connection ends, as for a dead caller's actors (within 5 s)."""
    sock = _master(cluster)
    try:
        control.send(sock, {"op": "place", "timeout": 5})
        assert control.recv(sock, 10)["op"] == "placed"
        assert cluster.used() == 1
    finally:
        sock.close()  # the caller dies before it starts the actor
    assert wait_until(lambda: cluster.used() == 0, timeout=15), cluster.status()


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
    assert wait_until(lambda: on_cluster.used() == 0, timeout=15), on_cluster.status()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("stop_timeout", -1, "stop_timeout must be a finite number of seconds >= 0, got -1"),
        ("stop_timeout", float("nan"), "stop_timeout must be a finite number of seconds"),
        ("num_threads", 0, "num_threads must be a positive int"),
        ("max_memory", -5, "max_memory must be a positive number of megabytes, got -5"),
        ("max_frame", 100, "max_frame must be an int of at least 65536 (bytes), got 100"),
    ],
)
def test_a_host_agent_names_an_actor_setting_out_of_range(on_cluster, monkeypatch, field,
                                                          value, words):  # fmt: skip
    """A client that skipped the caller's checks (another version, or not this package) asks
    for an actor with a setting out of range. Seen: a Python conversion error, or a worker
    started with it. Expected: the start is refused with an error that names the setting, and
    the slot is free again."""
    from parl.cluster import carrier as cluster_carrier

    parl.connect(on_cluster.address, linger=0, slot_timeout=5)
    real = cluster_carrier.messages.Actor

    def with_bad_setting(**fields):
        if field == "max_frame":
            fields[field] = value
        else:
            fields["options"] = {**fields["options"], field: value}
        return real(**fields)

    monkeypatch.setattr(cluster_carrier.messages, "Actor", with_bad_setting)
    with pytest.raises(ClusterError, match="cannot start an actor: " + re.escape(words)):
        Sampler()
    assert wait_until(lambda: on_cluster.used() == 0, timeout=15), on_cluster.status()


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
    assert wait_until(lambda: cluster.status()["clients"] == 0, timeout=15)
    assert cluster.used() == 0


# -- several threads of one caller -------------------------------------------------------------


def test_a_grant_does_not_lapse_while_another_thread_of_its_caller_waits_for_a_slot(one_slot):
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
