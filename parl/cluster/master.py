"""The master: which host agents a cluster has, and which of their slots are free.

Host agents register (op ``register``) with the address callers reach them at and their slot
count, then report how many slots they use. A registration from another machine is refused,
with what to pass to ``xparl connect``, when callers could not reach its address: loopback,
``""`` (the master's own address: for the agent of the master's machine only) or an address
where the master finds no cluster peer. An agent on loopback serves only callers on the
master's machine: callers from elsewhere are never granted its slots.

A caller (op ``client``) asks for a slot with ``place``: the master grants the host with the
most free slots (of those the caller reaches) and counts the grant as used until the agent
reports the actor started (or the grant expires; ``extend`` renews it while the caller
uploads its code to that host). With no free slot, it answers ``waiting`` at once and the
grant (or an error naming the slots) when one frees or the caller's timeout passes. Calls
never pass through the master.
"""

from __future__ import annotations

import itertools
import math
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TypeGuard

from parl._version import __version__
from parl.cluster import control, messages
from parl.cluster.hostagent import Report
from parl.cluster.monitor import ClusterView
from parl.cluster.server import Handler, Route, by_op
from parl.wire.framing import FrameSocket

GRANT_TTL_S = 30.0  # a grant that no actor used by then is a free slot again
DIAL_BACK_TIMEOUT_S = 3.0  # opening a connection to a registering agent's address


@dataclass
class _Host:
    hid: int
    host: str
    port: int
    hostname: str
    slots: int
    versions: dict[str, str] = field(default_factory=dict)
    gpus: int = 0
    label: str = ""  # an SSH-launched host's name in its hosts file
    used: int = 0
    gpu_used: int = 0
    # grant token -> (expiry, GPUs): 0 for a CPU slot
    pending: dict[str, tuple[float, int]] = field(default_factory=dict)

    def reachable(self, local: bool) -> bool:
        """Whether a caller reaches this host: one on the master's machine (``local``)
        reaches every host, one elsewhere every host not on loopback."""
        return local or not control.is_loopback(self.host)

    def free(self, now: float, gpu: bool = False) -> int:
        """Free CPU slots (or GPUs), counting the grants not taken yet as used."""
        for token, (expiry, _) in list(self.pending.items()):
            if expiry <= now:
                del self.pending[token]
        if gpu:
            return self.gpus - self.gpu_used - sum(n for _, n in self.pending.values())
        return self.slots - self.used - sum(1 for _, n in self.pending.values() if not n)

    def describe(self) -> control.Message:
        now = time.monotonic()
        return {
            "address": f"{self.host or self.hostname}:{self.port}",
            "hostname": self.hostname,
            "slots": self.slots,
            "used": self.slots - self.free(now),
            "gpus": self.gpus,
            "gpu_used": self.gpus - self.free(now, gpu=True),
            "versions": self.versions,
            **({"label": self.label} if self.label else {}),
        }


class Master:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._hosts: dict[int, _Host] = {}
        self._ids = itertools.count(1)
        self._clients = 0
        self.view = ClusterView()  # what the monitor page shows
        self.monitoring = False  # callers report their actors only while a page is served

    @property
    def handlers(self) -> dict[str, Handler]:
        return by_op(
            Route(messages.Register, self._serve_host),
            Route(messages.Client, self._serve_client),
            Route(messages.Status, self._serve_status),
        )

    # -- hosts --------------------------------------------------------------------------------

    def add_host(
        self,
        host: str,
        port: int,
        hostname: str,
        slots: int,
        versions: object = None,
        gpus: int = 0,
        label: str = "",
        used: object = 0,
        gpu_used: object = 0,
    ) -> tuple[int, Report]:
        """Register a host agent; returns its id and the function its reports go to.
        ``used``/``gpu_used``: what its actors hold already (an agent registering again with
        a restarted master), counted from the start so that no caller is granted them."""
        known = {str(k): str(v) for k, v in versions.items()} if isinstance(versions, dict) else {}
        with self._changed:
            hid = next(self._ids)
            record = _Host(hid, host, port, hostname, slots, known, gpus, label)
            if _is_int(used) and _is_int(gpu_used) and used >= 0 and gpu_used >= 0:
                record.used, record.gpu_used = used, gpu_used
            self._hosts[hid] = record
            self._changed.notify_all()

        def report(message: messages.Used | messages.Stats) -> None:
            self._update(record, message)

        return hid, report

    def remove_host(self, hid: int) -> None:
        with self._changed:
            self._hosts.pop(hid, None)
            self._changed.notify_all()
        self.view.host_gone(hid)

    def _update(self, record: _Host, message: messages.Used | messages.Stats) -> None:
        if message["op"] == "stats":
            self.view.host_stats(record.hid, message)
            return
        used, gpu_used = message.get("used"), message.get("gpu_used", 0)
        if not _is_int(used) or used < 0 or not _is_int(gpu_used) or gpu_used < 0:
            return
        with self._changed:
            record.used = used
            record.gpu_used = gpu_used
            token = message.get("token")
            if token is not None:
                record.pending.pop(str(token), None)
            self._changed.notify_all()

    def _serve_host(self, sock: FrameSocket, hello: messages.Register) -> None:
        """A remote host agent's connection: its reports, until it ends (the host is gone)."""
        port, slots, gpus = hello["port"], hello["slots"], hello.get("gpus", 0)
        if (
            not _is_int(port)
            or not 0 < port < 65536
            or not _is_int(slots)
            or not _is_int(gpus)
            or slots < 0
            or gpus < 0
            or slots + gpus < 1
        ):
            reason = "a host needs a port, and slots or GPUs >= 1"
            control.send(sock, {"op": "error", "message": reason})
            sock.close()
            return
        refused = self._unreachable(sock, str(hello["host"]), port)
        if refused:
            control.send(sock, {"op": "error", "message": refused})
            sock.close()
            return
        hid, report = self.add_host(
            str(hello["host"]),
            port,
            str(hello.get("hostname", "?")),
            slots,
            hello.get("versions"),
            gpus,
            str(hello.get("label") or "")[:200],
            used=hello.get("used", 0),
            gpu_used=hello.get("gpu_used", 0),
        )
        try:
            control.send(sock, messages.Registered(op="registered", id=hid))
            while True:
                message = control.recv(sock)
                if message is None:
                    break
                if message["op"] in ("used", "stats"):  # another op: a newer agent's, ignored
                    report(message)
        finally:
            self.remove_host(hid)
            sock.close()

    def _unreachable(self, sock: FrameSocket, host: str, port: int) -> str:
        """Why callers could not reach an agent that registers on ``sock`` with ``host:port``
        ("" when they can). An agent of the master's machine (over loopback, or from the
        master's own address) is trusted as it is: its address may be the local end of a
        tunnel that opens only once the agent has registered."""
        if control.same_machine(sock.sock):
            return ""
        peer = sock.sock.getpeername()[0]
        here, port_here = sock.sock.getsockname()[:2]
        if not host or control.is_loopback(host):
            listens = f"on {host or 'the address of the master'}"
            return (
                f"this host agent listens {listens}, which only its own machine reaches: "
                f"callers on other machines could not use it. Start it with `xparl connect "
                f"--address {here}:{port_here} --host {peer}` (the address the master sees "
                "this machine at), or `--host 0.0.0.0` to listen on every address"
            )
        failure = control.greets((host, port), DIAL_BACK_TIMEOUT_S)
        if failure:
            return (
                f"the master cannot reach this host agent at {host}:{port} ({failure}), so "
                f"callers could not either: give `xparl connect` a `--host` address of this "
                f"machine that the others reach (the master sees it as {peer}), and let a "
                "firewall pass connections to the agent's port"
            )
        return ""

    # -- callers ------------------------------------------------------------------------------

    def _serve_client(self, sock: FrameSocket, hello: messages.Client) -> None:
        with self._lock:
            self._clients += 1
        grants: set[str] = set()  # this caller's grants: dropped when it goes
        key = f"{id(sock):x}-{next(self._ids)}"
        local = control.same_machine(sock.sock)  # the caller reaches agents on loopback
        try:
            with self._lock:
                hosts = [h.describe() for h in self._hosts.values()]
            control.send(sock, messages.Welcome(op="welcome", hosts=hosts, monitor=self.monitoring))
            while True:
                message = control.recv(sock)
                if message is None:
                    break
                if message["op"] == "place":
                    timeout, n_gpu = message.get("timeout", 60.0), message.get("n_gpu", 0)
                    if not isinstance(timeout, (int, float)) or not math.isfinite(timeout):
                        control.send(sock, {"op": "error", "message": "timeout: finite seconds"})
                        continue
                    if not _is_int(n_gpu) or n_gpu < 0:
                        control.send(sock, {"op": "error", "message": "n_gpu: an int >= 0"})
                        continue
                    self._place(sock, float(timeout), grants, n_gpu, local)
                elif message["op"] == "release":
                    self._release(grants, {str(message.get("token"))})
                elif message["op"] == "extend":
                    self._extend(grants, str(message.get("token")))
                elif message["op"] == "status":
                    control.send(sock, self.status())
                elif message["op"] == "actors":
                    self.view.client_actors(key, message)
        finally:
            self.view.client_gone(key)
            with self._lock:
                self._clients -= 1
            self._release(grants, set(grants))
            sock.close()

    def _release(self, grants: set[str], tokens: set[str]) -> None:
        """Free the slots of ``tokens`` among a caller's ``grants`` that no actor took yet (the
        caller failed to start it, or went away): they are free again at once."""
        with self._changed:
            for token in tokens & grants:
                grants.discard(token)
                for record in self._hosts.values():
                    record.pending.pop(token, None)
            self._changed.notify_all()

    def _extend(self, grants: set[str], token: str) -> None:
        """Keep a grant of this caller's for another ``GRANT_TTL_S``: the caller is still
        uploading its code to the granted host (a slow link), and will take the slot after."""
        if token not in grants:
            return
        with self._changed:
            for record in self._hosts.values():
                if token in record.pending:
                    _, n_gpu = record.pending[token]
                    record.pending[token] = (time.monotonic() + GRANT_TTL_S, n_gpu)

    def _renew(self, grants: set[str], now: float) -> None:
        """Push the expiry of ``grants`` (lock held) to ``now + GRANT_TTL_S``."""
        for record in self._hosts.values():
            for token in grants & record.pending.keys():
                record.pending[token] = (now + GRANT_TTL_S, record.pending[token][1])

    def _serve_status(self, sock: FrameSocket, request: messages.Status) -> None:
        """``xparl status``: one answer, then the connection ends (with ``full``: the monitor
        page's data too, for ``xparl status --json``)."""
        try:
            answer = self.status()
            if request.get("full"):
                answer["monitor"] = self.monitor_snapshot()
            control.send(sock, answer)
        finally:
            sock.close()

    def _place(
        self, sock: FrameSocket, timeout: float, grants: set[str], n_gpu: int, local: bool
    ) -> None:
        """Grant a CPU slot (``n_gpu`` 0) or ``n_gpu`` GPUs of one host: of the hosts the
        caller reaches (``local``: it runs on the master's machine), the one with the most
        free; wait up to ``timeout`` for one."""
        deadline = time.monotonic() + timeout
        told = False
        grant: messages.Placed | messages.Error
        gpu = n_gpu > 0
        need = max(n_gpu, 1)
        with self._changed:
            while True:
                now = time.monotonic()
                hosts = [h for h in self._hosts.values() if h.reachable(local)]
                best = max(hosts, key=lambda h: h.free(now, gpu), default=None)
                if best is not None and best.free(now, gpu) >= need:
                    token = secrets.token_hex(8)
                    best.pending[token] = (now + GRANT_TTL_S, n_gpu)
                    live = {t for h in self._hosts.values() for t in h.pending}
                    grants.intersection_update(live)  # forget the grants used by now
                    grants.add(token)
                    grant = messages.Placed(
                        op="placed",
                        host=best.host,
                        port=best.port,
                        hostname=best.hostname,
                        token=token,
                    )
                    if best.label:
                        grant["label"] = best.label
                    break
                slots, used = self._totals(now, gpu, local)
                if now >= deadline:
                    grant = messages.Error(
                        op="error",
                        message=self._none_free(timeout, n_gpu, now, local),
                        reason="no_slot",
                    )
                    break
                if not told:
                    control.send(sock, messages.Waiting(op="waiting", slots=slots, used=used))
                    told = True
                # this connection is not read while it waits here, so an ``extend`` from
                # another thread of the caller (uploading under an earlier grant) would not
                # arrive: the caller's own grants are kept for it meanwhile
                self._renew(grants, now)
                self._changed.wait(min(deadline - now, GRANT_TTL_S / 3))
        control.send(sock, grant)

    def _none_free(self, timeout: float, n_gpu: int, now: float, local: bool = True) -> str:
        hosts = sum(1 for h in self._hosts.values() if h.reachable(local))
        hint = ""
        apart = [h for h in self._hosts.values() if not h.reachable(local)]
        if apart:  # hosts this caller cannot reach, not counted above
            where = ", ".join(f"{h.host}:{h.port}" for h in apart)
            hint = (
                f" Not counted: {len(apart)} host agent(s) on the master's loopback ({where}), "
                "which callers on other machines cannot reach: restart them with `xparl "
                "connect --host <an address of the master's machine>`."
            )
        if n_gpu:
            gpus, used = self._totals(now, True, local)
            return (
                f"no host with {n_gpu} free GPU(s) in the cluster within {timeout:g} s: "
                f"{hosts} host(s), {gpus} GPU(s), {used} used. Close GPU actors you no longer "
                "need, add a machine with `xparl connect --gpu 0,1,...`, or ask for fewer GPUs"
                + hint
            )
        slots, used = self._totals(now, False, local)
        if slots == 0 and self._totals(now, True, local)[0]:
            hint += " This cluster has only GPUs: give the class @parl.remote_class(n_gpu=N)."
        return (
            f"no free slot in the cluster within {timeout:g} s: {hosts} host(s), {slots} "
            f"slot(s), {used} used. Close actors you no longer need (parl.close_actor), add a "
            "machine with `xparl connect`, or wait longer (parl.connect(..., slot_timeout=...))"
            + hint
        )

    def _totals(self, now: float, gpu: bool = False, local: bool = True) -> tuple[int, int]:
        """Slots (or GPUs) and used ones, over the hosts a caller reaches (``local``: one on
        the master's machine reaches all)."""
        hosts = [h for h in self._hosts.values() if h.reachable(local)]
        total = sum(h.gpus if gpu else h.slots for h in hosts)
        return total, total - sum(h.free(now, gpu) for h in hosts)

    def monitor_snapshot(self) -> dict:
        """What the monitor page shows (see :mod:`parl.cluster.monitor`)."""
        with self._lock:
            hosts = [dict(h.describe(), id=h.hid) for h in self._hosts.values()]
        return self.view.snapshot(hosts, __version__)

    def status(self) -> messages.Status:
        with self._lock:
            return messages.Status(
                op="status",
                hosts=[h.describe() for h in self._hosts.values()],
                clients=self._clients,
            )


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
