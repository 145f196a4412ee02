"""The monitor's web server: a read-only page, its static files and ``/api/status``.

It serves only what ships in ``parl/monitor/static`` (no CDN), answers GET and HEAD only, and
computes at most one snapshot per ``min_interval`` whatever the number of viewers. Bound to
loopback it is open to this machine's users, like the cluster itself; on any other address
every request must carry the monitor's token (``?token=`` once, then a cookie, or an
``Authorization: Bearer`` header), else it gets a page that asks for the token and nothing else.
"""

from __future__ import annotations

import hmac
import http.server
import ipaddress
import json
import logging
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATIC = Path(__file__).with_name("static")
_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}
_COOKIE = "parl_monitor"
_MAX_CONNECTIONS = 64  # open at once; more are closed at once (a page makes one at a time)
_IDLE_S = 20.0  # a client that sends nothing this long is dropped (slowloris)
log = logging.getLogger("parl.monitor")


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class MonitorServer:
    """Serves ``snapshot()`` (a JSON-ready dict) and the page on ``host:port`` (0: any free
    port) in a daemon thread. ``token``: required from every request when the address is not
    loopback, or when ``token_required`` (e.g. a machine shared with other users); made up when
    not given, and printed by whoever starts the monitor."""

    def __init__(
        self,
        snapshot: Callable[[], dict[str, Any]],
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        min_interval: float = 0.5,
        token_required: bool | None = None,
        also: tuple[str, ...] = (),
    ) -> None:
        self.open_to_all = is_loopback(host) if token_required is None else not token_required
        self.token = token or secrets.token_urlsafe(16)
        self._accepted = [t.encode() for t in (self.token, *also) if t]
        self._snapshot = snapshot
        self._min_interval = min_interval
        self._cached: tuple[float, bytes] = (0.0, b"")
        self._cache_lock = threading.Lock()
        self.requests = 0
        handler = type("Handler", (_Handler,), {"monitor": self})
        self._httpd = _Server((host, port), handler)
        address = self._httpd.server_address
        self.host, self.port = str(address[0]), int(address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="parl-monitor", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def status_json(self) -> bytes:
        with self._cache_lock:
            at, body = self._cached
            now = time.monotonic()
            if not body or now - at >= self._min_interval:
                body = json.dumps(self._snapshot(), separators=(",", ":")).encode()
                self._cached = (now, body)
            return body

    def allowed(self, cookie: str | None, query: dict[str, list[str]], bearer: str | None) -> bool:
        if self.open_to_all:
            return True
        offered = [*query.get("token", []), cookie or "", bearer or ""]
        return any(
            hmac.compare_digest(o.encode(), accepted)
            for o in offered
            if o
            for accepted in self._accepted
        )

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
        self._httpd.end_connections(5.0)


class _Server(http.server.ThreadingHTTPServer):
    """Keeps its open connections, at most ``_MAX_CONNECTIONS``, so that ``close`` can end
    them: a client that never finishes its request must not keep a thread and a descriptor of
    the user's process after the monitor is closed."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            full = len(self._open) >= _MAX_CONNECTIONS
            if not full:
                self._open.add(request)
        if full:
            return self.shutdown_request(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def end_connections(self, timeout: float) -> None:
        """Shut the open connections down and wait (up to ``timeout``) for their threads."""
        with self._open_lock:
            still = list(self._open)
        for request in still:
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        while self._open and time.monotonic() < deadline:
            time.sleep(0.01)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A viewer that went away mid-answer (or any failure of one request) must not print
        a traceback into the user's program."""
        log.debug("monitor request from %s failed", client_address, exc_info=True)


class _Handler(http.server.BaseHTTPRequestHandler):
    monitor: MonitorServer
    server_version = "parl-monitor"
    sys_version = ""
    timeout = _IDLE_S

    def log_message(self, format: str, *args: Any) -> None:  # the base class's names
        pass  # a monitor polled every second must not flood the terminal

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _refuse(self) -> None:
        self.send_error(405, "the monitor is read-only")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def _serve(self, head: bool) -> None:
        monitor = self.monitor
        monitor.requests += 1
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        cookie = _cookie(self.headers.get("Cookie", ""))
        auth = self.headers.get("Authorization", "")
        bearer = auth[7:] if auth.startswith("Bearer ") else None
        if monitor.open_to_all and not _local_host(self.headers.get("Host", "")):
            # a loopback page answers only to loopback names: a web page whose name resolves
            # to 127.0.0.1 (DNS rebinding) must not read the actors' data
            return self._send(403, "text/plain", b"this monitor answers on loopback only", head)
        if not monitor.allowed(cookie, query, bearer):
            body = _ask_for_token(bool(query.get("token")))
            return self._send(401, "text/html", body, head)
        extra = {}
        if query.get("token") and not monitor.open_to_all:
            extra["Set-Cookie"] = f"{_COOKIE}={monitor.token}; HttpOnly; SameSite=Strict; Path=/"
        if url.path == "/api/status":
            return self._send(200, "application/json", monitor.status_json(), head, extra)
        name = (
            "index.html" if url.path in ("/", "/index.html") else url.path.removeprefix("/static/")
        )
        path = STATIC / name
        if "/" in name or path.suffix not in _TYPES or not path.is_file():
            return self._send(404, "text/plain", b"not found", head)
        self._send(200, _TYPES[path.suffix], path.read_bytes(), head, extra)

    def _send(
        self, code: int, kind: str, body: bytes, head: bool, extra: dict | None = None
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
        )
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)


def _local_host(header: str) -> bool:
    """Whether a request's ``Host`` header names this machine's loopback (with any port)."""
    name = header.strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else name
    else:
        name = name.rsplit(":", 1)[0] if name.count(":") == 1 else name
    return name in ("localhost", "localhost.") or (name != "" and is_loopback(name))


def _cookie(header: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == _COOKIE:
            return value
    return None


def _ask_for_token(wrong: bool) -> bytes:
    note = "<p class=error>That token is not this monitor's.</p>" if wrong else ""
    return (
        "<!doctype html><meta charset=utf-8><title>parl monitor</title>"
        "<h1>parl monitor</h1><p>This monitor listens on a network address: enter the token "
        "printed when it started (or the cluster's secret).</p>"
        f"{note}<form method=get action=/><input name=token type=password autofocus>"
        "<button>Open</button></form>"
    ).encode()
