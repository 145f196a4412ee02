"""Shipping the caller's code to host agents: once per host and content digest.

The caller packs its project at ``parl.connect`` (:mod:`parl.deploy.packer`). When it opens
its control connection to a host agent it names the digest; the agent answers whether its
cache holds it. If not, the caller opens one more connection (op ``code``, authenticated like
every cluster connection) and sends the archive in chunks; the agent checks the size cap and
the digest, unpacks it into ``<cache>/<digest>/`` (atomically, :meth:`CodeCache.store`) and
answers ``stored``. Workers of that caller's actors then start in that folder, with it first
on ``sys.path``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from parl.cluster import control, messages
from parl.deploy import cache
from parl.deploy.packer import Pack
from parl.errors import DeploymentError
from parl.wire.framing import FrameSocket

CHUNK_BYTES = 512 << 10  # one frame of an upload, well under control.CONTROL_MAX_FRAME
UPLOAD_TIMEOUT_S = 600.0
PROGRESS_PERIOD_S = 5.0


class CodeCache(cache.CodeCache):
    """A host agent's code cache (:class:`parl.deploy.cache.CodeCache`) that also takes the
    archives callers upload to it (the ``code`` op)."""

    def receive(self, sock: FrameSocket, hello: messages.Code) -> None:
        """The ``code`` handler: an archive of ``hello["size"]`` bytes, in raw frames."""
        try:
            digest, size = hello.get("digest"), hello.get("size")
            if not cache.valid_digest(digest):
                raise DeploymentError("an upload needs the archive's sha256 digest (64 hex)")
            if not isinstance(size, int) or isinstance(size, bool) or not 0 < size:
                raise DeploymentError("an upload needs its size in bytes")
            if size > cache.MAX_UPLOAD_BYTES:
                raise DeploymentError(
                    f"the code archive is {size} bytes, over this host's cap of "
                    f"{cache.MAX_UPLOAD_BYTES} bytes: move large data out of the project folder"
                )
            assert isinstance(digest, str)
            if self.folder(digest) is None:
                control.send(sock, {"op": "send"})
                self.store(_read_archive(sock, size), digest)
            control.send(sock, {"op": "stored", "digest": digest})
        except DeploymentError as exc:
            _answer(sock, {"op": "error", "message": str(exc)})
        finally:
            sock.close()


def _read_archive(sock: FrameSocket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        frame = sock.recv()
        if frame is None:
            raise DeploymentError("the upload ended early")
        if frame.bodies or frame.fds or len(data) + len(frame.meta) > size:
            raise DeploymentError("the upload is not the size it announced")
        data += frame.meta
    return bytes(data)


def upload(
    address: tuple[str, int],
    secret: bytes,
    what: str,
    pack: Pack,
    label: str = "code",
    progress: Callable[[], None] | None = None,
) -> None:
    """Send ``pack`` to the host agent at ``address`` (``what`` names it in errors); a tqdm bar
    shows an upload that takes more than a second. ``progress`` is called every
    ``PROGRESS_PERIOD_S`` while chunks go out (the carrier renews its slot grant with it)."""
    from tqdm import tqdm  # only for callers that upload

    sock = control.dial(address, secret, what)
    try:
        hello = messages.Code(op="code", digest=pack.digest, size=len(pack.data))
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
                told = time.monotonic()
                for start in range(0, len(view), CHUNK_BYTES):
                    chunk = view[start : start + CHUNK_BYTES]
                    sock.send(chunk)  # type: ignore[arg-type]  # any bytes-like meta
                    bar.update(len(chunk))
                    if progress is not None and time.monotonic() - told >= PROGRESS_PERIOD_S:
                        progress()
                        told = time.monotonic()
            answer = control.recv(sock, UPLOAD_TIMEOUT_S) or {"op": "error", "message": "no answer"}
        if answer["op"] != "stored":
            raise DeploymentError(
                f"{what} did not take this project's code: {answer.get('message', answer)}"
            )
    except OSError as exc:
        raise DeploymentError(f"sending this project's code to {what} failed: {exc}") from None
    finally:
        sock.close()


def _answer(sock: FrameSocket, message: control.Message) -> None:
    try:
        control.send(sock, message)
    except OSError:
        pass
