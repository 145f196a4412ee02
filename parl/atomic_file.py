"""Files written whole or not at all: a checkpoint or a saved replay memory is never left half
written by a crash, a full disk or Ctrl-C in the middle of a save."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> Path:
    """Write ``path`` through ``write(handle)`` atomically, creating missing parent folders.

    The bytes go to a temporary file beside ``path``, are flushed to the disk and the file is
    then renamed over ``path``: a reader, or the next run after a crash, finds the old file or
    the new one, never a part of either. The file's permissions are those a plain
    ``open(path, "wb")`` gives: an existing file's, else 0666 less the process's umask (so
    that, as with ``torch.save``, others on a shared cluster folder can read it where the
    umask lets them).
    """
    target = Path(os.fspath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = None
    while True:
        temporary = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:  # os.open applies the umask to 0o666, as open() does
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:  # pragma: no cover - 48 random bits taken: draw again
            continue
    try:
        if mode is not None:
            os.chmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return target
