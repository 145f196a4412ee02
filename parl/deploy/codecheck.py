"""Checking that a cached code folder is what its name says: the unpacked archive of that digest.

A code folder is named by the sha256 of the archive it came from, and the archive is
deterministic (:mod:`parl.deploy.packer`), so anyone holding the code can compute the name;
a folder of that name proves nothing. :func:`folder_digest` proves it: it builds the archive
that would unpack to the folder as it is now (the same headers as the packer's, file by file,
into a hash, nothing kept in memory) and returns its digest. A file added, changed (content or
executable bit) or removed gives another digest; a link, a device or an entry of another user
is refused outright. No manifest is needed, so none can be forged.

Cost: reading and hashing every file once: 0.33 s for a 287 MB project of 2,020 files (files
in the page cache, a 2-core test machine), more where they must come from disk. :class:`Checked`
pays it once per process and digest: afterwards a folder's files are compared with what was
seen then (inode, size, mtime, mode and ctime: a stat per file, 23 ms for those 2,020 files),
and only a difference brings a full check again. Checking once is enough because the cache
folder is private (:mod:`parl.deploy.cachedir`): after the first check only this user's own
processes can change it, and every change they make moves the ctime, which no program can set
(``shutil.copy2`` of one cached file over another of the same size writes in place and then
sets the mtime back to the source's: only the ctime shows it). Hard-linking a file into a
working folder moves its ctime too: :meth:`Checked.relinked` takes those moves as seen.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import os
import stat
import tarfile
import threading
from pathlib import Path

from parl.deploy.packer import DERIVED, member_header
from parl.errors import DeploymentError

# name -> (inode, size, mtime_ns, mode, ctime_ns)
_Seen = dict[str, tuple[int, int, int, int, int]]


class _Hasher(io.RawIOBase):
    """A write-only file that only hashes what is written (tarfile also asks where it is)."""

    def __init__(self) -> None:
        super().__init__()
        self.sha = hashlib.sha256()
        self.offset = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        self.offset += len(data)
        return len(data)

    def tell(self) -> int:
        return self.offset


def folder_digest(folder: str | Path) -> str:
    """The digest of the archive that, unpacked, gives the folder ``folder`` as it is now:
    the digest it was unpacked from unless something in it was added, changed or removed.
    ``__pycache__`` folders are left out (Python writes them where code runs; the packer never
    ships them). Raises DeploymentError for what no archive unpacks to (a link, a device, an
    entry of another user)."""
    base = Path(folder)
    sink = _Hasher()
    with tarfile.open(fileobj=sink, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, info in sorted(entries(base).items()):
            if stat.S_ISDIR(info.st_mode):
                archive.addfile(member_header(name, None, False))
                continue
            with open(base / name, "rb") as file:  # its size now: a writer cannot shift it
                found = os.fstat(file.fileno())
                executable = bool(found.st_mode & stat.S_IXUSR)
                archive.addfile(member_header(name, found.st_size, executable), file)
    return sink.sha.hexdigest()


def entries(base: Path) -> dict[str, os.stat_result]:
    """The files and empty folders below ``base`` (archive names, as the packer lists them),
    each with its stat; DeploymentError for a link, a device or an entry that is not this
    user's (``__pycache__`` folders are not listed, but their owners are checked too)."""
    uid = os.getuid()
    found: dict[str, os.stat_result] = {}
    stack = [base]
    while stack:
        folder = stack.pop()
        listed = False
        for entry in os.scandir(folder):
            info = entry.stat(follow_symlinks=False)
            path = Path(entry.path)
            if info.st_uid != uid:
                raise DeploymentError(f"{path} belongs to another user (uid {info.st_uid})")
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)
                listed = listed or entry.name != DERIVED  # as the packer: derived is nothing
            elif stat.S_ISREG(info.st_mode):
                found[path.relative_to(base).as_posix()] = info
                listed = True
            else:
                raise DeploymentError(f"{path} is not a plain file or folder (a link?)")
        if not listed and folder != base:
            found[folder.relative_to(base).as_posix()] = folder.stat()
    return {n: i for n, i in found.items() if DERIVED not in n.split("/")}


def source() -> str:
    """A standalone script defining :func:`folder_digest` (the standard library only), for
    the SSH launcher's probe of a host that may not have parl yet: a host is checked with the
    very code the host agent uses."""
    head = (
        "import hashlib, io, os, stat, tarfile\n"
        "from pathlib import Path\n"
        f"DERIVED = {DERIVED!r}\n"
        "class DeploymentError(Exception):\n    pass\n"
    )
    parts = (member_header, _Hasher, entries, folder_digest)
    return head + "\n".join(inspect.getsource(part) for part in parts)


def _seen(folder: Path) -> _Seen:
    return {
        name: (info.st_ino, info.st_size, info.st_mtime_ns, info.st_mode, info.st_ctime_ns)
        for name, info in entries(folder).items()
    }


class Checked:
    """The code folders this process has checked, and what it saw of each then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}

    def problem(self, folder: Path, digest: str) -> str | None:
        """What is wrong with ``folder`` as the code of ``digest``, in words (naming what
        changed where it can), or None when it is that code (proved now or earlier)."""
        with self._lock:
            before = self._seen.get(digest)
        try:
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode):
                raise DeploymentError(f"{folder} is not a folder (a link?)")
            if info.st_uid != os.getuid():
                raise DeploymentError(f"{folder} belongs to another user (uid {info.st_uid})")
            now = _seen(folder)
            if now == before:
                return None
            actual = folder_digest(folder)
        except (OSError, DeploymentError, tarfile.TarError) as exc:
            return str(exc)
        if actual != digest:
            if before is None:
                return (
                    "its files are not those of the code it is named after (a file was added, "
                    "changed or removed)"
                )
            names = before.keys() | now.keys()
            changed = sorted(n for n in names if _kept(before.get(n)) != _kept(now.get(n)))
            changed = changed or sorted(n for n in names if before.get(n) != now.get(n))
            return (
                f"these files changed since it was checked: {', '.join(changed[:10])} (working "
                "folders share large files with the cache: an actor that rewrites one in place "
                "changes it here too)"
            )
        with self._lock:
            self._seen[digest] = now
        return None

    def trust(self, folder: Path, digest: str) -> None:
        """``folder`` was just unpacked here from an archive of ``digest``: what it holds now
        is that code (no need to hash it again)."""
        seen = _seen(folder)
        with self._lock:
            self._seen[digest] = seen

    def relinked(self, folder: Path, digest: str) -> None:
        """Files of the checked ``folder`` were just hard-linked (or copied) into a working
        folder, which moves their ctime: take the new ctimes of the files whose inode, size,
        mtime and mode are what was seen (any other change is left for :meth:`problem`)."""
        with self._lock:
            before = self._seen.get(digest)
        if before is None:
            return
        try:
            now = _seen(folder)
        except (OSError, DeploymentError):
            return
        merged = {
            name: now[name] if name in now and _kept(now[name]) == _kept(seen) else seen
            for name, seen in before.items()
        }
        with self._lock:
            if self._seen.get(digest) is before:
                self._seen[digest] = merged

    def forget(self, digest: str) -> None:
        with self._lock:
            self._seen.pop(digest, None)

    def files(self, digest: str) -> dict[str, tuple[bool, int]] | None:
        """The checked code of ``digest``: archive name -> (a folder, size in bytes)."""
        with self._lock:
            seen = self._seen.get(digest)
        if seen is None:
            return None
        return {name: (stat.S_ISDIR(mode), size) for name, (_, size, _, mode, _) in seen.items()}


def _kept(seen: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """What a stat shows of a file but its ctime (which a new hard link moves too)."""
    return None if seen is None else seen[:4]
