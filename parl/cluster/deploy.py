"""Shipping the caller's code to host agents: once per host and content digest.

The caller packs its project at ``parl.connect`` (:mod:`parl.cluster.packer`). When it opens
its control connection to a host agent it names the digest; the agent answers whether its
cache holds it. If not, the caller opens one more connection (op ``code``, authenticated like
every cluster connection) and sends the archive in chunks; the agent checks the size cap and
the digest, unpacks it into ``<cache>/<digest>/`` (atomically) and answers ``stored``. Workers
of that caller's actors then start in that folder, with it first on ``sys.path``.
"""

from __future__ import annotations

import os
import re
import site
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

from parl.cluster import control
from parl.cluster.packer import Pack, digest_of, unpack
from parl.errors import DeploymentError
from parl.wire.framing import FrameSocket

MAX_UPLOAD_BYTES = 1 << 30  # the largest (compressed) archive a host agent accepts
CHUNK_BYTES = 512 << 10  # one frame of an upload, well under control.CONTROL_MAX_FRAME
UPLOAD_TIMEOUT_S = 600.0
_DIGEST = re.compile(r"[0-9a-f]{64}")


def default_cache_dir() -> Path:
    return Path.home() / ".parl" / "cache"


def valid_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


class CodeCache:
    """A host agent's unpacked archives, one folder per digest under ``root``; counts the
    uploads it received (``uploads``), which tests and ``xparl status`` read."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self.uploads = 0
        self._lock = threading.Lock()

    def folder(self, digest: str) -> Path | None:
        """The folder of ``digest``, or None when it is not here (or not a digest)."""
        if not valid_digest(digest):
            return None
        path = self.root / digest
        return path if path.is_dir() else None

    def receive(self, sock: FrameSocket, hello: control.Message) -> None:
        """The ``code`` handler: an archive of ``hello["size"]`` bytes, in raw frames."""
        try:
            digest, size = hello.get("digest"), hello.get("size")
            if not valid_digest(digest):
                raise DeploymentError("an upload needs the archive's sha256 digest (64 hex)")
            if not isinstance(size, int) or isinstance(size, bool) or not 0 < size:
                raise DeploymentError("an upload needs its size in bytes")
            if size > MAX_UPLOAD_BYTES:
                raise DeploymentError(
                    f"the code archive is {size} bytes, over this host's cap of "
                    f"{MAX_UPLOAD_BYTES} bytes: move large data out of the project folder"
                )
            assert isinstance(digest, str)
            if self.folder(digest) is None:
                self._store(sock, digest, size)
            control.send(sock, {"op": "stored", "digest": digest})
        except DeploymentError as exc:
            _answer(sock, {"op": "error", "message": str(exc)})
        finally:
            sock.close()

    def _store(self, sock: FrameSocket, digest: str, size: int) -> None:
        control.send(sock, {"op": "send"})
        data = bytearray()
        while len(data) < size:
            frame = sock.recv()
            if frame is None:
                raise DeploymentError("the upload ended early")
            if frame.bodies or frame.fds or len(data) + len(frame.meta) > size:
                raise DeploymentError("the upload is not the size it announced")
            data += frame.meta
        if digest_of(bytes(data)) != digest:
            raise DeploymentError(
                "the uploaded code archive does not match its digest; connect again"
            )
        unpack(bytes(data), self.root / digest)
        with self._lock:
            self.uploads += 1


def upload(
    address: tuple[str, int], secret: bytes, what: str, pack: Pack, label: str = "code"
) -> None:
    """Send ``pack`` to the host agent at ``address`` (``what`` names it in errors); a tqdm bar
    shows an upload that takes more than a second."""
    from tqdm import tqdm  # only for callers that upload

    sock = control.dial(address, secret, what)
    try:
        hello = {"op": "code", "digest": pack.digest, "size": len(pack.data)}
        answer = control.request(sock, hello, what, UPLOAD_TIMEOUT_S)
        if answer["op"] == "send":
            view = memoryview(pack.data)
            with tqdm(
                total=len(view),
                unit="B",
                unit_scale=True,
                delay=1.0,
                leave=False,
                desc=f"parl: {label} to {what}",
            ) as bar:
                for start in range(0, len(view), CHUNK_BYTES):
                    chunk = view[start : start + CHUNK_BYTES]
                    sock.send(chunk)  # type: ignore[arg-type]  # any bytes-like meta
                    bar.update(len(chunk))
            answer = control.recv(sock, UPLOAD_TIMEOUT_S) or {"op": "error", "message": "no answer"}
        if answer["op"] != "stored":
            raise DeploymentError(
                f"{what} did not take this project's code: {answer.get('message', answer)}"
            )
    except OSError as exc:
        raise DeploymentError(f"sending this project's code to {what} failed: {exc}") from None
    finally:
        sock.close()


def outside_modules(root: Path, names: Iterable[str]) -> list[str]:
    """Of the imported modules ``names``, those a host cannot import: their file lies neither
    in the deployed project folder ``root`` nor in the Python installation (the standard
    library, site-packages), and they are not parl. Their classes and functions must travel
    by value, as those of ``__main__`` do."""
    installed = [
        os.path.realpath(p)
        for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    ]
    user_site = site.getusersitepackages()
    if isinstance(user_site, str):
        installed.append(os.path.realpath(user_site))
    keep = [os.path.realpath(root), *installed]
    found = []
    for name in names:
        if name == "parl" or name.startswith("parl.") or name == "__main__":
            continue
        file = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(file, str):
            continue  # built in, or a namespace package
        path = os.path.realpath(file)
        if not any(os.path.commonpath([path, k]) == k for k in keep):
            found.append(name)
    return found


def _answer(sock: FrameSocket, message: control.Message) -> None:
    try:
        control.send(sock, message)
    except OSError:
        pass
