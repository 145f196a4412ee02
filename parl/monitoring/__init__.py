"""A live web page of actors and hosts: ``parl.monitor()`` for this process's local actors
(the cluster's master serves the same page for a cluster).

    mon = parl.monitor()          # http://127.0.0.1:<free port>/
    print(mon.url)
    ...
    mon.close()                   # or: with parl.monitor() as mon: ...
"""

from __future__ import annotations

from typing import Any

from parl.monitoring.server import MonitorServer
from parl.validation import check_int

__all__ = ["Monitor", "MonitorServer", "monitor"]

_running: list[Monitor] = []


class Monitor:
    """A running monitor of this process's actors. ``url`` is the page; ``token`` is what a
    browser must offer when the monitor listens on a non-loopback address
    (``url_with_token`` opens it directly)."""

    def __init__(
        self, host: str, port: int, token: str | None, token_required: bool | None
    ) -> None:
        from parl.monitoring.snapshot import LocalSource
        from parl.wire import caller

        self._source = LocalSource()
        try:
            self._server = MonitorServer(
                self._source.snapshot, host, port, token, token_required=token_required
            )
        except BaseException:
            self._source.close()
            raise
        _running.append(self)
        self._names = caller.NAMES.hold()  # calls note their method names: "busy in step()"
        self.url = self._server.url
        self.token = self._server.token
        self._closed = False

    @property
    def url_with_token(self) -> str:
        """The page's address with its access token as a query string (just ``url`` when the monitor is open to all)."""
        return self.url if self._server.open_to_all else f"{self.url}?token={self.token}"

    def status(self) -> dict[str, Any]:
        """What ``/api/status`` serves, without HTTP."""
        return self._source.snapshot()

    def close(self) -> None:
        """Stop serving and stop recording the actors' method names; idempotent."""
        if self._closed:
            return
        self._closed = True
        _running.remove(self)
        self._names.release()
        self._server.close()
        self._source.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<parl.Monitor {self.url}>"


def monitor(
    port: int = 0,
    host: str = "127.0.0.1",
    token: str | None = None,
    token_required: bool | None = None,
) -> Monitor:
    """Serve the monitor page of this process's actors over HTTP.

    Args:
        port: The port to listen on; 0 picks a free one (the address is then in ``.url``).
        host: The address to listen on: loopback unless you say otherwise.
        token: What a browser must offer when the page asks for one (at least 12
            characters); None makes one up (``.token``).
        token_required: Whether the page asks for the token. None: only when ``host`` is not
            a loopback address; True suits a machine shared with other users.

    Returns:
        The running :class:`Monitor`; close it (or leave its ``with`` block) to stop serving.

    Raises:
        TypeError: ``port`` is not an int.
        ValueError: ``port`` is not from 0 to 65535, or ``token`` is too short.
        OSError: ``host:port`` cannot be bound (e.g. the port is taken).
    """
    check_int("port", port, low=0, high=65535)
    if token is not None and len(token) < 12:
        raise ValueError("a monitor's token must have at least 12 characters")
    return Monitor(host, port, token, token_required)
