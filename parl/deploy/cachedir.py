"""The folder where a host keeps callers' code must be private to the user who runs it.

Code found in the cache runs as that user (a host agent imports it in its workers), so anyone
who can put files there, or replace the folder itself, could run code as them. A cache folder
is accepted only when it belongs to this user and nobody else can write it, and when none of
the folders above it can be written by others (unless sticky, as ``/tmp`` is) or belongs to
another user than this one or root: those could rename the cache away and put their own in its
place. Missing folders are made with mode 0700, each level (``~/.parl`` too).

The two functions below use the standard library only and read no module globals: the SSH
launcher runs their source on a host before parl is there (:mod:`parl.ssh.remote`), so a
cache folder is judged the same way by the host agent and the SSH launcher.
"""

from __future__ import annotations

import inspect
import os

from parl.errors import DeploymentError


def make_private(path: str) -> str:
    """The absolute form of ``path`` (``~`` expanded), made when missing: every missing level
    with mode 0700 (``os.makedirs`` would give the levels above the last one the umask's mode)."""
    path = os.path.abspath(os.path.expanduser(path))
    missing = []
    folder = path
    while not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass  # made meanwhile (another agent): judged like any other folder
    return path


def unsafe_folder(path: str) -> str | None:
    """What makes the folder ``path`` unsafe to keep code in, in words, or None when it is
    safe: the folder (a link's target) must be this user's and writable by nobody else; the
    folders above it must not be writable by others unless sticky, and belong to this user or
    root."""
    import stat

    uid = os.getuid()
    path = os.path.realpath(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != uid:
        return f"belongs to another user (uid {info.st_uid}, you are uid {uid})"
    if info.st_mode & 0o022:
        return f"can be written by other users (mode {info.st_mode & 0o7777:o})"
    folder = os.path.dirname(path)
    while True:
        try:
            above = os.stat(folder)
        except OSError as exc:
            return f"lies in {folder}, which cannot be read ({exc.strerror or exc})"
        if above.st_uid not in (uid, 0):
            return f"lies in {folder}, which belongs to another user (uid {above.st_uid})"
        if above.st_mode & 0o022 and not above.st_mode & stat.S_ISVTX:
            mode = above.st_mode & 0o7777
            return f"lies in {folder}, which other users can write (mode {mode:o})"
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def source() -> str:
    """The source of :func:`make_private` and :func:`unsafe_folder`, for a script run where
    parl is not installed (it must ``import os`` first)."""
    return "\n".join(inspect.getsource(f) for f in (make_private, unsafe_folder))


def private_cache(path: str) -> str:
    """``path`` made (mode 0700) when missing and checked; raises DeploymentError naming the
    folder, what is wrong with it and the fix."""
    path = make_private(path)
    problem = unsafe_folder(path)
    if problem is not None:
        raise DeploymentError(
            f"the code cache folder {path} {problem}: code found there would run as you, "
            "whoever put it there. Use a folder of your own that only you can write "
            f"(`chmod 700 {path}` if it is yours and the folders above it are safe, or "
            "choose another folder with --cache_dir, e.g. the default ~/.parl/cache)"
        )
    return path
