"""Slot grants at the master (parl/cluster/master.py), in process on loopback: a grant that
no actor takes expires after GRANT_TTL_S, unless its caller renews it (op ``extend``: the
caller is still uploading its code to the granted host); only the caller holding a grant can
renew it. The TTL is shortened to keep the test fast."""

from __future__ import annotations

import secrets
import time

import pytest

from parl.cluster import control, master
from parl.cluster.server import Server

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
