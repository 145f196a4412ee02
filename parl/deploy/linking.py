"""Making a caller's working folder from cached code without a full copy of it per caller.

Each file of the checked code folder reaches the working folder in the cheapest safe way:

- a *reflink* (``FICLONE``: btrfs, XFS, bcachefs, ZFS 2.2+) where the file system has them: a
  copy that shares the disk blocks until one side writes, so it is a private copy to the actor;
- else a *hard link* for a file of ``LINK_MIN_BYTES`` or more (data, weights: where the bytes
  of a large project are): one inode for the cache and every working folder;
- else a copy (sources, configs: small, and the files a program most often rewrites).

A hard link is shared with the cache: an actor that opens one for writing in place (``"w"``
truncates the inode; ``chmod`` too) changes it for the cache, and permissions cannot forbid it
(an agent running as root ignores them). So the cache never trusts a file it shared: before a
working folder is made, and when a caller leaves, :class:`parl.deploy.codecheck.Checked` looks
at each cached file's inode, size, mtime, mode and ctime, and a changed folder is removed and
sent again by the next caller (a full hash check decides when only a time moved). Later callers
thus always start from the code of their digest. Callers of one digest that run at the same
time on one host share the large files as a shared file system would: one that rewrites such
a file in place changes it for the others too. Files an actor writes anew, or replaces (write
then rename), are its own, as in a copy. A program that rewrites a shared file and then sets
its mtime back (``shutil.copy2``) is seen too: a write moves the ctime, which no program sets.

Why not read-only linked files: root (the agent in CI) writes them anyway, and other users
would get a PermissionError where a copy let them write. Why copy small files: they cost little
(for a 287 MB project of 2,000 small files and 20 large ones, each caller's folder takes 24 MB
instead of 275 MB) and are the files a program rewrites in place (a config, a log), which
then stays fully private to the caller.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from pathlib import Path

LINK_MIN_BYTES = 64 << 10
"""Smaller files are copied (where reflinks are not available)."""

FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
_NO_CLONE = {errno.EOPNOTSUPP, errno.EXDEV, errno.EINVAL, errno.ENOTTY, errno.EBADF, errno.EPERM}


class Sharer:
    """Places files into working folders; remembers that a file system has no reflinks."""

    def __init__(self) -> None:
        self.clones = True  # until a clone fails for want of support
        self.linked = 0  # files hard-linked, reflinked and copied (for the logs and tests)
        self.cloned = 0
        self.copied = 0

    def fill(self, code: Path, dest: Path, names: dict[str, tuple[bool, int]]) -> None:
        """Fill the new folder ``dest`` with ``names`` (name -> (a folder, size)) of ``code``."""
        for name, (folder, size) in sorted(names.items()):
            target = dest / name
            if folder:
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            self.place(code / name, target, size)

    def place(self, source: Path, target: Path, size: int) -> None:
        if self.clones and self._clone(source, target):
            self.cloned += 1
            return
        if size >= LINK_MIN_BYTES:
            try:
                os.link(source, target, follow_symlinks=False)
                self.linked += 1
                return
            except OSError:  # another file system, too many links, a hardened kernel: copy
                pass
        shutil.copy2(source, target, follow_symlinks=False)
        self.copied += 1

    def _clone(self, source: Path, target: Path) -> bool:
        with open(source, "rb") as src:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                fcntl.ioctl(fd, FICLONE, src.fileno())
            except OSError as exc:
                os.close(fd)
                os.unlink(target)
                if exc.errno in _NO_CLONE:
                    self.clones = False
                    return False
                raise
        os.close(fd)
        shutil.copystat(source, target)  # mode and times, as a copy
        return True
