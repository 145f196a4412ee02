"""The cluster's monitor: what the master's page (``xparl start --monitor_port``) shows.

Three sources, each for what it knows first hand:

- each host agent sends ``stats`` every ``STATS_PERIOD_S``: the machine's CPU, load and memory,
  and each worker's resident memory and last lines of output;
- each caller, while the master has a monitor, sends ``actors`` every ``ACTORS_PERIOD_S``: its
  actors as it sees them (busy in which method, calls served, dead and why, or closed);
- the master merges them with its own slot counts into the same JSON the local monitor serves
  (:mod:`parl.monitoring`), adding the last minutes of CPU and memory per host.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeGuard

import psutil

from parl.cluster import control, messages
from parl.monitoring.snapshot import HISTORY_S, actor_record, resident_memory

STATS_PERIOD_S = 1.0
ACTORS_PERIOD_S = 1.0
LINES_SHOWN = 20
_LINES_KEPT = 2000  # workers whose last lines the master keeps, ended ones included
_CLIENT_STALE_S = 10.0  # a caller silent this long shows as not reporting


def monitor_token(secret: bytes) -> str:
    """The token the page asks for on a non-loopback address: derived from the cluster secret,
    so that ``xparl start`` can print it and any holder of the secret can compute it."""
    return hmac.new(secret, b"parl-monitor-token", hashlib.sha256).hexdigest()[:24]


# -- host agents --------------------------------------------------------------------------------


def host_stats(workers: list[Any], hostname: str) -> messages.Stats:
    """A host agent's ``stats`` report: this machine and each of ``workers`` (its _Worker
    records: pid, label, client, lines that carry the actor's prefix). Fewer lines per worker
    when they would not fit in half a control frame: a report the master refuses would stop
    the whole host's figures."""
    shown = LINES_SHOWN
    while True:
        report = _host_stats(workers, hostname, shown)
        if shown == 0 or len(json.dumps(report)) <= control.CONTROL_MAX_FRAME // 2:
            return report
        shown //= 2


def _host_stats(workers: list[Any], hostname: str, shown: int) -> messages.Stats:
    memory = psutil.virtual_memory()
    return {
        "op": "stats",
        "cpu_percent": psutil.cpu_percent(interval=None),
        "load": list(os.getloadavg()),
        "cpus": os.cpu_count() or 1,
        "memory_used": memory.total - memory.available,
        "memory_total": memory.total,
        "workers": [
            {
                "pid": w.pid,
                "label": w.label,
                "client": w.client,
                "rss": resident_memory(w.pid),
                "lines": [
                    line.removeprefix(f"({w.label} pid={w.pid} on {hostname}) ")
                    for line in (list(w.lines)[-shown:] if shown else [])
                ],
            }
            for w in workers
        ],
    }


class Every:
    """Calls ``action()`` every ``period`` seconds in a daemon thread until ``close``."""

    def __init__(self, period: float, action: Callable[[], None], name: str) -> None:
        self._period = period
        self._action = action
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self._action()
            except Exception:  # noqa: BLE001 - a monitor must never end what it watches
                pass

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(2)


# -- callers ------------------------------------------------------------------------------------


def actors_report(client: str, connections: list[Any]) -> messages.Actors:
    """A caller's ``actors`` report: its cluster actors as it sees them."""
    now = time.time()
    return {
        "op": "actors",
        "client": client,
        "hostname": os.uname().nodename,
        "pid": os.getpid(),
        "actors": [actor_record(c, "?", now, local=False) for c in connections],
    }


# -- the master ---------------------------------------------------------------------------------


class ClusterView:
    """What the master has heard: hosts' stats (with their history) and callers' actors."""

    def __init__(self) -> None:
        self.started = time.time()
        self._lock = threading.Lock()
        self._stats: dict[int, messages.Stats] = {}
        self._history: dict[int, tuple[deque[float], deque[float]]] = {}
        self._clients: dict[str, tuple[float, messages.Actors]] = {}
        # (host id, pid) -> the last lines a worker printed, kept after it ended: a dead
        # actor's last words are what its user wants to see
        self._lines: dict[tuple[int, int], list[str]] = {}

    def host_stats(self, hid: int, message: messages.Stats) -> None:
        cpu = message.get("cpu_percent")
        used, total = message.get("memory_used"), message.get("memory_total")
        if not (_is_number(cpu) and _is_number(used) and _is_number(total)) or not total:
            return
        # the figures every snapshot reads again: one of the wrong type would fail each
        # snapshot (the page, xparl status --json) for as long as the report is the last
        load, cpus = message.get("load", []), message.get("cpus", 1)
        if not (isinstance(load, list) and all(_is_number(x) for x in load)):
            return
        if isinstance(cpus, bool) or not isinstance(cpus, int):
            return
        with self._lock:
            self._stats[hid] = message
            for worker in message.get("workers") or ():
                if isinstance(worker, dict) and isinstance(worker.get("pid"), int):
                    if worker.get("lines"):
                        self._lines[(hid, worker["pid"])] = list(worker["lines"])
            while len(self._lines) > _LINES_KEPT:
                del self._lines[next(iter(self._lines))]
            history = self._history.setdefault(
                hid, (deque(maxlen=HISTORY_S), deque(maxlen=HISTORY_S))
            )
            history[0].append(round(float(cpu), 1))
            history[1].append(round(100.0 * used / total, 1))

    def host_gone(self, hid: int) -> None:
        with self._lock:
            self._stats.pop(hid, None)
            self._history.pop(hid, None)

    def client_actors(self, key: str, message: messages.Actors) -> None:
        if isinstance(message.get("actors"), list):
            with self._lock:
                self._clients[key] = (time.monotonic(), message)

    def client_gone(self, key: str) -> None:
        with self._lock:
            self._clients.pop(key, None)

    def snapshot(self, hosts: list[dict[str, Any]], version: str) -> dict[str, Any]:
        """``hosts``: the master's records (``describe()`` plus ``id``)."""
        now = time.time()
        with self._lock:
            stats = dict(self._stats)
            kept = dict(self._lines)
            history = {hid: (list(c), list(m)) for hid, (c, m) in self._history.items()}
            clients = [(at, m.copy()) for at, m in self._clients.values()]
        workers: dict[tuple[str, int], dict[str, Any]] = {}
        last_words: dict[tuple[str, int], list[str]] = {}
        host_rows = []
        for host in hosts:
            own = stats.get(host["id"], messages.Stats(op="stats"))
            for (hid, pid), lines in kept.items():
                if hid == host["id"]:
                    last_words[(host["hostname"], pid)] = lines
            for worker in own.get("workers") or ():
                if isinstance(worker, dict) and isinstance(worker.get("pid"), int):
                    workers[(host["hostname"], worker["pid"])] = worker
            cpu, memory = history.get(host["id"], ([], []))
            host_rows.append(
                {
                    "name": host["hostname"],
                    "address": host["address"],
                    "cpus": own.get("cpus", host["slots"]),
                    "load": [round(x, 2) for x in own.get("load") or (0.0, 0.0, 0.0)],
                    "cpu_percent": cpu[-1] if cpu else None,
                    "memory_used": own.get("memory_used", 0),
                    "memory_total": own.get("memory_total", 0),
                    "slots": host["slots"],
                    "used_slots": host["used"],
                    "gpus": host.get("gpus", 0),
                    "cpu_history": cpu,
                    "memory_history": memory,
                }
            )
        client_rows = []
        for at, message in sorted(clients, key=lambda c: str(c[1].get("client"))):
            actors = []
            for actor in message.get("actors") or ():
                if not isinstance(actor, dict):
                    continue
                where = (str(actor.get("host")), actor.get("pid") or -1)
                worker = workers.get(where, {})
                running = actor.get("state") in ("idle", "busy")
                output = worker.get("lines") or last_words.get(where) or actor.get("output")
                actors.append(
                    dict(actor, memory=worker.get("rss") if running else None, output=output or [])
                )
            client_rows.append(
                {
                    "id": f"{message.get('hostname')} pid={message.get('pid')}",
                    "host": message.get("hostname"),
                    "pid": message.get("pid"),
                    "reporting": time.monotonic() - at < _CLIENT_STALE_S,
                    "actors": actors,
                }
            )
        return {
            "version": version,
            "mode": "cluster",
            "started": self.started,
            "uptime_s": round(now - self.started, 1),
            "hosts": host_rows,
            "clients": client_rows,
        }


def _is_number(value: object) -> TypeGuard[float]:
    """Whether a figure of a report is a JSON number (an int or a float)."""
    return isinstance(value, (int, float))
