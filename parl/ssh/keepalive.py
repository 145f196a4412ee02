"""SSH keepalive, as OpenSSH's ``ServerAliveInterval`` and ``ServerAliveCountMax`` do it.

Two jobs. Traffic: paramiko sends a keepalive packet after ``interval`` seconds without
sending anything (:meth:`paramiko.Transport.set_keepalive`), so that a NAT box or firewall
does not drop a launch that sits idle. Liveness: every ``interval`` seconds a request that
wants an answer goes to the server (``keepalive@openssh.com``; sshd answers it, with a
failure, which is an answer); when ``count`` intervals pass with a request unanswered, the
host counts as lost and its connection is closed, which ends what travels through it (a
``tunnel=yes`` host's calls then raise :class:`parl.ActorDiedError`). Calls over direct TCP
have their own, faster watch (the cluster connections' TCP keepalive and user timeout,
about 4 s; see :mod:`parl.cluster.control`).
"""

from __future__ import annotations

import logging
import threading
import time

import paramiko

from parl.errors import SSHError

log = logging.getLogger("parl.ssh")
DEFAULT_INTERVAL_S = 15.0
DEFAULT_COUNT = 3  # OpenSSH's default ServerAliveCountMax


def settings(entry: dict, shown: str) -> tuple[float, int]:
    """``(interval, count)`` from an ssh config entry (paramiko's lookup: lower-case keys);
    our default interval where the config gives none (OpenSSH's is off); interval 0: off."""
    interval, count = DEFAULT_INTERVAL_S, DEFAULT_COUNT
    for key in ("serveraliveinterval", "serveralivecountmax"):
        value = entry.get(key)
        if value is None:
            continue
        text = str(value)
        if not (text.isascii() and text.isdigit()) or (
            key == "serveralivecountmax" and int(value) < 1
        ):
            raise SSHError(
                f"host {shown}: the ssh config's {key} is {value!r}: a whole number of "
                + ("seconds (0: off)" if key == "serveraliveinterval" else "tries, >= 1")
            )
        if key == "serveraliveinterval":
            interval = float(value)
        else:
            count = int(value)
    return interval, count


class KeepAlive:
    """Keeps ``transport`` alive and watches it (see the module); ``lock`` serialises global
    requests on it (paramiko keeps one answer slot for them: a port-forward request must not
    run beside a probe). ``lost`` says why the host was given up, once it was."""

    def __init__(
        self,
        transport: paramiko.Transport,
        shown: str,
        interval: float,
        count: int,
        lock: threading.Lock,
    ) -> None:
        self.interval, self.count = interval, count
        self.lost: str | None = None
        self._transport, self._shown, self._lock = transport, shown, lock
        self._stop = threading.Event()
        if interval > 0:
            transport.set_keepalive(max(1, round(interval)))
            threading.Thread(target=self._watch, name="parl-ssh-keepalive", daemon=True).start()

    def _watch(self) -> None:
        probe: threading.Event | None = None
        sent = 0.0
        while not self._stop.wait(self.interval):
            if not self._transport.is_active():
                return
            if probe is None or probe.is_set():
                probe, sent = threading.Event(), time.monotonic()
                threading.Thread(target=self._probe, args=(probe,), daemon=True).start()
            elif time.monotonic() - sent >= self.interval * self.count:
                self._give_up()
                return

    def _probe(self, answered: threading.Event) -> None:
        with self._lock:
            try:
                self._transport.global_request("keepalive@openssh.com", wait=True)
            except (paramiko.SSHException, OSError, EOFError):
                pass
        answered.set()

    def _give_up(self) -> None:
        waited = self.interval * self.count
        self.lost = (
            f"host {self._shown} answered no SSH keepalive for {waited:g} s "
            f"(ServerAliveInterval {self.interval:g}, ServerAliveCountMax {self.count}): "
            "the host counts as lost"
        )
        log.warning("%s", self.lost)
        self._transport.close()

    def close(self) -> None:
        self._stop.set()
