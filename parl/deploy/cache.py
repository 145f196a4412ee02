"""A host's cache of callers' code, and the per-caller job folders made from it.

Callers' code arrives as archives (:mod:`parl.deploy.packer`), named by their digest: a
cluster's caller uploads one to each host agent (:mod:`parl.cluster.upload`), the SSH launcher
unpacks it on the host before the agent starts (:mod:`parl.ssh.remote`). :class:`CodeCache`
keeps each under ``<cache>/<digest>/``, checks a folder before using it, makes each caller a
working folder of its own from it (``<cache>/jobs/<caller>``), and evicts what is no longer
used. Workers of that caller's actors then start in that folder, with it first on ``sys.path``.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from parl.deploy.cachedir import private_cache
from parl.deploy.codecheck import Checked
from parl.deploy.linking import Sharer
from parl.deploy.packer import digest_of, unpack
from parl.errors import DeploymentError

log = logging.getLogger("parl.cluster")  # its lines are the host agent's

MAX_UPLOAD_BYTES = 1 << 30  # the largest (compressed) archive a host agent accepts
_DIGEST = re.compile(r"[0-9a-f]{64}")
_JOB_NAME = re.compile(r"[0-9A-Za-z_-]{1,64}")
JOBS = "jobs"  # the callers' working folders, under the cache folder
_DONE = ".done"  # beside a job folder whose caller left
KEEP_JOBS = 8  # finished job folders kept (what their actors wrote stays a while)
JOB_MAX_AGE_S = 7 * 86400.0  # an unfinished job folder untouched this long is an orphan
KEEP_CODES = 16  # digest folders always kept (the ones used last)
CODE_MIN_AGE_S = 7 * 86400.0  # older folders beyond those go once unused this long
TEMP_MAX_AGE_S = 86400.0  # a temporary folder or upload older than this was abandoned


def default_cache_dir() -> Path:
    return Path.home() / ".parl" / "cache"


def valid_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


class CodeCache:
    """A host agent's unpacked archives, one folder per digest under ``root``, and the working
    folders of its callers' actors under ``root/jobs``; counts the uploads it received
    (``uploads``), which tests and ``xparl status`` read.

    ``root`` must be private (:func:`parl.deploy.cachedir.private_cache`: made with mode
    0700 when missing; DeploymentError naming the folder and the fix when others can write it
    or it is another user's). A digest folder is used only once proved to be the code of that
    digest (:mod:`parl.deploy.codecheck`: hashed once per process, then compared by stat
    before each use); one that is not (planted, changed, incomplete) is removed and reported
    missing, so the caller sends its code again.

    The cached code is never a working folder: each caller's actors on this host run in their
    own folder made from it (when the caller connects, or at its first actor here after it
    sent the code; :mod:`parl.deploy.linking`: small files copied, large ones hard-linked or
    reflinked), so that what they write there (checkpoints, logs, a changed config) does not
    change the code that later callers start from. A caller's folder stays when it leaves; the
    oldest beyond ``KEEP_JOBS`` left ones go. Digest folders beyond the ``KEEP_CODES`` used
    last go when they were not used for ``CODE_MIN_AGE_S`` (other host agents of this user
    may share the folder) and no caller of this agent uses them."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(private_cache(str(root if root is not None else default_cache_dir())))
        self.uploads = 0
        self.sharer = Sharer()
        self._checked = Checked()
        self._lock = threading.Lock()
        self._in_use: dict[str, str] = {}  # job name -> digest, while its caller is here
        self._held: dict[str, int] = {}  # job name -> fd of its folder, flocked (shared)
        # the code this process runs from, when it is in this cache (an SSH-launched agent)
        root = self.root.expanduser().resolve()
        self._own = {p.name for p in (Path.cwd(), _parl_folder()) if p.resolve().parent == root}
        # held while this process lives: other agents sharing this cache leave them too
        self._own_held = [_hold(root / name) for name in self._own]

    def folder(self, digest: str) -> Path | None:
        """The folder of ``digest``, or None when it is not here (or not a digest, or not the
        code of that digest: then it is removed, and a warning says why)."""
        return self._folder(digest)[0]

    def _folder(self, digest: str) -> tuple[Path | None, str]:
        """(the checked folder of ``digest`` or None, why not)."""
        if not valid_digest(digest):
            return None, f"{digest!r} is not a code digest"
        path = self.root / digest
        if not path.is_dir():
            return None, f"the caller's code {digest!r} is not on this host"
        problem = self._checked.problem(path, digest)
        if problem is not None:
            self._drop(path, digest, problem)
            return None, (
                f"the cached code {path} was not the caller's code ({problem}), so it was "
                "removed: connect again to send it"
            )
        _touch(path)  # "used now": eviction goes by the time of last use
        return path, ""

    def _drop(self, path: Path, digest: str, problem: str) -> None:
        """Remove the digest folder ``path`` that is not the code of ``digest``: renamed away
        first (so it is never used again even where it cannot be deleted)."""
        log.warning(
            "not using the cached code %s: %s; it is removed, and the next caller of that "
            "code sends it again",
            path,
            problem,
        )
        self._checked.forget(digest)
        away = path.with_name(f".{digest}.stale-{secrets.token_hex(4)}")
        try:
            os.rename(path, away)
        except OSError:
            return  # gone already (another agent of this cache dropped it)
        _remove_unless_held(away)

    def job_folder(self, client: str, digest: str) -> Path:
        """The working folder of caller ``client``'s actors: a copy of the code of ``digest``
        (raises ValueError when that code is not here and the copy was not made yet). The
        folder is held (a shared ``flock``) until :meth:`job_done`: no agent sharing this
        cache prunes it meanwhile, however long its caller runs."""
        name = _job_name(client)
        path = self.root / JOBS / name
        done = path.parent / f"{name}{_DONE}"
        for _ in range(2):
            done.unlink(missing_ok=True)  # in use (again: a caller that reconnected)
            if not path.is_dir():
                self._make_job(path, digest)  # not under the lock: it delays no other caller
            with self._lock:
                self._in_use[name] = digest
                if name not in self._held:
                    fd = _hold(path)
                    if fd is not None:
                        self._held[name] = fd
                if name in self._held and path.is_dir():
                    return path
                _release(self._held.pop(name, None))  # pruned in between: copy again
        raise ValueError(f"the working folder {path} cannot be made")

    def prepare(self, client: str, digest: str) -> bool:
        """Whether caller ``client`` can start actors here from the code of ``digest``: its
        working folder is made now, when the caller connects (so that code dropped later, when
        another caller's actor rewrites a shared file, cannot fail its first actor's start);
        False when the code is not here (the caller sends it, then its first actor makes it)."""
        if self.folder(digest) is None:
            return False
        try:
            self.job_folder(client, digest)
        except ValueError:  # dropped meanwhile (a warning said why): the caller sends it again
            return False
        return True

    def _make_job(self, path: Path, digest: str) -> None:
        """Make the working folder ``path`` from the checked code of ``digest``, under a
        temporary name renamed into place; checked again after (an actor of another caller
        may rewrite a shared file meanwhile: then the folder is not used)."""
        code, why = self._folder(digest)
        names = self._checked.files(digest) if code is not None else None
        if code is None or names is None:
            raise ValueError(why or f"the caller's code {digest!r} is not on this host")
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            self.sharer.fill(code, temp, names)
            self._checked.relinked(code, digest)  # the links moved the files' ctimes
            code, why = self._folder(digest)
            if code is None:
                raise ValueError(why)
            try:
                os.rename(temp, path)
            except OSError:
                if not path.is_dir():  # not "another thread made it meanwhile"
                    raise
        finally:
            if temp.exists():
                _remove(temp)

    def job_done(self, client: str) -> None:
        """Caller ``client`` left (its actors were stopped): its folder is marked finished and
        the oldest finished ones beyond ``KEEP_JOBS`` are removed."""
        name = _job_name(client)
        jobs = self.root / JOBS
        with self._lock:
            _release(self._held.pop(name, None))
            digest = self._in_use.pop(name, None)
            if digest is None:
                return  # it started no actor here
            if (jobs / name).is_dir():
                (jobs / f"{name}{_DONE}").touch()
            _prune_jobs(jobs)
        # its actors may have rewritten a file it shares with the cache: if so, the cache
        # drops that code now (with a warning naming the file), not at the next caller
        self.folder(digest)

    def close(self) -> None:
        """Let go of the folders this cache holds (they may be pruned and evicted now)."""
        with self._lock:
            for fd in [*self._held.values(), *self._own_held]:
                _release(fd)
            self._held.clear()
            self._own_held.clear()

    def evict(self) -> None:
        """Remove the digest folders beyond the ``KEEP_CODES`` used last that nobody here
        uses and that were not used for ``CODE_MIN_AGE_S``."""
        if not self.root.is_dir():
            return
        with self._lock:
            keep = self._own | set(self._in_use.values())
        now = time.time()
        codes = sorted(
            (p for p in self.root.iterdir() if valid_digest(p.name) and p.is_dir()),
            key=_mtime,
            reverse=True,
        )
        for path in codes[KEEP_CODES:]:
            if path.name not in keep and now - _mtime(path) > CODE_MIN_AGE_S:
                _remove_unless_held(path)
        # what an unpack or a copy left under a temporary name when its process was killed
        # (``.<name>.<random>`` folders, ``.upload-*`` archives of SSH launches)
        for folder in (self.root, self.root / JOBS):
            for path in folder.glob(".*") if folder.is_dir() else ():
                if now - _mtime(path) > TEMP_MAX_AGE_S:
                    if path.is_dir() and not path.is_symlink():
                        _remove_unless_held(path)
                    else:
                        path.unlink(missing_ok=True)

    def store(self, data: bytes, digest: str) -> None:
        """Keep the archive ``data`` as the code folder of ``digest`` (an upload, say): it must
        be the archive of that digest. Counted in ``uploads``; evicts what is no longer used."""
        if digest_of(data) != digest:
            raise DeploymentError(
                "the uploaded code archive does not match its digest; connect again"
            )
        path = self.root / digest
        if unpack(data, path):
            self._checked.trust(path, digest)  # just unpacked from the archive checked above
        elif self.folder(digest) is None:  # another agent of this cache unpacked it meanwhile
            raise DeploymentError(f"the code folder {path} cannot be made; connect again")
        with self._lock:
            self.uploads += 1
        self.evict()


def _job_name(client: str) -> str:
    """A folder name for caller id ``client`` (ids are hex; anything else is hashed)."""
    if _JOB_NAME.fullmatch(client):
        return client
    return hashlib.sha256(client.encode()).hexdigest()[:16]


def _prune_jobs(jobs: Path) -> None:
    """Remove finished job folders beyond the newest ``KEEP_JOBS``, and folders no agent
    finished (it was killed) once untouched for ``JOB_MAX_AGE_S``; never one an agent holds
    (its caller is still there, maybe for weeks)."""
    done = sorted(jobs.glob(f"*{_DONE}"), key=_mtime, reverse=True)
    for marker in done[KEEP_JOBS:]:
        folder = jobs / marker.name[: -len(_DONE)]
        if not folder.is_dir() or _remove_unless_held(folder):
            marker.unlink(missing_ok=True)
    now = time.time()
    for path in jobs.iterdir():
        if path.is_dir() and now - _mtime(path) > JOB_MAX_AGE_S:
            if not (jobs / f"{path.name}{_DONE}").exists():
                _remove_unless_held(path)


def _hold(path: Path) -> int | None:
    """An fd of the folder ``path`` with a shared flock: in use while it is open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        return None
    return fd


def _release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _remove_unless_held(path: Path) -> bool:
    """Remove the folder ``path`` unless an agent holds it (:func:`_hold`); whether it went."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except PermissionError:  # an actor made its own folder unreadable: nobody holds it then
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return False  # a link: never followed
            os.chmod(path, 0o700)
            fd = os.open(path, flags)
        except OSError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # in use
    try:
        _remove(path)
    finally:
        os.close(fd)
    return not path.exists()


def _remove(path: Path) -> None:
    """``rmtree``, also of what actors wrote without permissions for themselves (mode 000
    folders); links are removed, never followed."""

    def unlock(func: Callable, name: str, _exc: object) -> None:
        for folder in (os.path.dirname(name), name):
            try:
                if stat.S_ISDIR(os.lstat(folder).st_mode):
                    os.chmod(folder, 0o700)
            except OSError:
                pass
        try:
            if func in (os.unlink, os.remove):
                os.unlink(name)
            elif func is os.rmdir:
                os.rmdir(name)
            elif stat.S_ISDIR(os.lstat(name).st_mode):
                shutil.rmtree(name, ignore_errors=True)  # a folder that could not be read
        except OSError:
            pass

    shutil.rmtree(path, onerror=unlock)


def _parl_folder() -> Path:
    """The folder holding the ``parl`` package this module belongs to (parl/deploy/cache.py)."""
    return Path(__file__).resolve().parent.parent.parent


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass  # a read-only cache still serves
