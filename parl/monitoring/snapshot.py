"""What a monitor shows, as plain JSON-ready dicts: hosts, clients, their actors.

The caller is the source of truth for its actors: it knows which calls it sent and which came
back (busy in which method, calls served), when the worker died and why (the connection's
error), and the last lines the actor printed (kept by the output forwarder). The host's CPU and
memory are sampled once a second by :class:`HostHistory` for the sparklines.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections import deque
from typing import Any

import psutil

from parl._version import __version__
from parl.wire import caller
from parl.wire.caller import Connection
from parl.workers import recent_lines

HISTORY_S = 300  # seconds of CPU and memory history per host
_GONE_KEPT = 200  # actors no longer referenced, kept in the listing as "closed" or "dead"


class HostHistory:
    """This machine's CPU and memory use, one sample a second, the last ``HISTORY_S``."""

    def __init__(self, period: float = 1.0) -> None:
        self.cpu: deque[float] = deque(maxlen=HISTORY_S)
        self.memory: deque[float] = deque(maxlen=HISTORY_S)
        self._period = period
        self._stop = threading.Event()
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement
        self._thread = threading.Thread(target=self._run, name="parl-monitor-host", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            self.sample()

    def sample(self) -> None:
        self.cpu.append(round(psutil.cpu_percent(interval=None), 1))
        self.memory.append(round(psutil.virtual_memory().percent, 1))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


def host_record(history: HostHistory, slots: int, used: int, name: str | None = None) -> dict:
    memory = psutil.virtual_memory()
    return {
        "name": name or socket.gethostname(),
        "cpus": os.cpu_count() or 1,
        "load": [round(x, 2) for x in os.getloadavg()],
        "cpu_percent": history.cpu[-1] if history.cpu else None,
        "memory_used": memory.total - memory.available,
        "memory_total": memory.total,
        "slots": slots,
        "used_slots": used,
        "cpu_history": list(history.cpu),
        "memory_history": list(history.memory),
    }


_LABEL = re.compile(r"^(?P<cls>.*?) pid=(?P<pid>\d+)(?: on (?P<host>.+))?$")


def parse_label(label: str) -> tuple[str, int | None, str | None]:
    """``"Sampler pid=12 on node1"`` (or without `` on HOST``, locally) as its class, pid and
    host."""
    match = _LABEL.match(label)
    if match is None:
        return label, None, None
    return match["cls"], int(match["pid"]), match["host"]


def actor_record(conn: Connection, host: str, now: float, local: bool = True) -> dict:
    """One actor as its caller sees it (``local``: its worker runs on this machine, whose
    /proc has its memory)."""
    label = conn.label
    class_name, pid, on = parse_label(label)
    host = on or host
    local = local and on is None  # " on HOST": a cluster's worker, whose pid is not ours
    state, method, reason = "idle", None, None
    if conn.closed:
        state = "closed"
    else:
        failure = conn.poll_death()
        if failure is not None:
            state, reason = "dead", str(failure)
        else:
            pending = conn.pending_calls()
            if pending:
                state = "busy"
                method = conn.names.get(min(pending))
    running = state in ("idle", "busy")
    memory = resident_memory(pid) if local and pid is not None and running else None
    return {
        "id": label,
        "class": class_name,
        "pid": pid,
        "host": host,
        "age_s": round(now - conn.created, 1),
        "state": state,
        "method": method,
        "reason": reason,
        "calls": max(0, conn.submitted - conn.outstanding() - 1),  # the first one made it
        "memory": memory,
        "output": recent_lines(label),
    }


_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_memory(pid: int) -> int | None:
    """Resident memory of ``pid`` in bytes (one read of /proc: a tenth of psutil's cost)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


class LocalSource:
    """The monitor's data in local mode: this process is the only client, this machine the
    only host. Actors whose proxies were dropped stay listed (closed or dead) for a while."""

    def __init__(self) -> None:
        self.started = time.time()
        self.history = HostHistory()
        self._seen: dict[str, dict] = {}
        self._lock = threading.Lock()

    def snapshot(self) -> dict[str, Any]:
        now = time.time()
        host = socket.gethostname()
        live = {conn.label: actor_record(conn, host, now) for conn in caller.live_connections()}
        with self._lock:
            for label, record in self._seen.items():
                if label not in live and record["state"] in ("idle", "busy"):
                    record.update(state="closed", method=None, memory=None)
            self._seen.update(live)
            while len(self._seen) > len(live) + _GONE_KEPT:
                oldest = next(label for label in self._seen if label not in live)
                del self._seen[oldest]
            actors = sorted(self._seen.values(), key=lambda r: (r["class"], r["pid"] or 0))
        running = sum(1 for a in actors if a["state"] in ("idle", "busy"))
        return {
            "version": __version__,
            "mode": "local",
            "started": self.started,
            "uptime_s": round(now - self.started, 1),
            "hosts": [host_record(self.history, os.cpu_count() or 1, running, host)],
            "clients": [
                {
                    "id": f"{host} pid={os.getpid()}",
                    "host": host,
                    "pid": os.getpid(),
                    "actors": actors,
                }
            ],
        }

    def close(self) -> None:
        self.history.close()
