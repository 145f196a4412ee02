"""Packing the caller's project (and parl itself) into a deterministic archive, and unpacking one
safely into a host's cache.

Pure: no network, no cluster state. The cluster carrier, the SSH launcher and the Ray carrier ship ``Pack.data``
to hosts that lack ``Pack.digest``; hosts unpack it into ``<cache>/<digest>/``.

Determinism: the same file content gives the same digest on every machine, whatever the
mtimes, owners or umask. The archive lists regular files and empty folders only, sorted by
name, with zeroed times and owners and mode 0644 or 0755 (only the executable bit is kept;
folders are 0755). The digest is the
sha256 of that (uncompressed) tar, so it does not depend on the zlib version either.
"""

from __future__ import annotations

import fnmatch
import glob
import gzip
import hashlib
import io
import logging
import os
import shutil
import site
import stat
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from parl.deploy import ignore as ignoring
from parl.errors import DeploymentError

log = logging.getLogger("parl.cluster")

DEFAULT_IGNORE: tuple[str, ...] = (
    ".git",
    "__pycache__",
    "*.pyc",
    ".venv",
    "venv",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
    ".tox",
    "*.egg-info",
    "train_log",
    ".ipynb_checkpoints",
)
"""Names (fnmatch patterns, matched against each file's and folder's own name) never packed.
A folder holding ``pyvenv.cfg`` (a virtual environment of any name) is skipped too, and so is
what the project's ``.gitignore`` files ignore and what looks like a credential
(:mod:`parl.deploy.ignore`)."""

DERIVED = "__pycache__"
"""Never packed, even inside a ``distributed_files`` folder: Python makes these folders where
code runs, and a code cache's check (:func:`folder_digest`) leaves them out."""

DEFAULT_MAX_FILE_BYTES = 32 << 20
MAX_PROJECT_FILES = 10_000  # a project folder with more is not one (a home folder, /tmp)
MAX_PROJECT_BYTES = 512 << 20
MAX_UNPACKED_BYTES = 2 << 30
"""Largest total size ``unpack`` accepts (a gzip bomb stops here)."""

_GZIP_LEVEL = 1


@dataclass(frozen=True)
class Pack:
    """A packed folder: ``data`` is a gzip (level 1) tar whose uncompressed bytes hash to
    ``digest`` (sha256 hex); ``files`` regular files, ``size`` bytes of file content."""

    digest: str
    data: bytes
    files: int
    size: int

    def __repr__(self) -> str:  # never print the bytes
        return (
            f"Pack(digest={self.digest[:12]}..., files={self.files}, size={self.size}, "
            f"compressed={len(self.data)})"
        )


def project_root() -> Path:
    """The caller's project folder: the folder of the entry script (``__main__.__file__``), or
    the current directory under ``python -m pkg.mod`` (where imports start), ``python -c``, a
    REPL or a notebook, and when the entry is an installed tool (pytest, ipykernel)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if getattr(main, "__spec__", None) is None and isinstance(path, str) and path:
        folder = Path(path).resolve().parent
        if os.path.isfile(path) and not _installed(folder):
            return folder
    return Path.cwd().resolve()


def _installed(folder: Path) -> bool:
    """Whether ``folder`` belongs to the Python installation (site-packages, the venv's bin)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    return any(folder.is_relative_to(Path(p).resolve()) for p in prefixes if p)


def pack_project(
    root: str | Path,
    distributed_files: Sequence[str] = (),
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ignore: Sequence[str] = DEFAULT_IGNORE,
) -> Pack:
    """Pack ``root`` recursively (minus ``ignore``, what its ``.gitignore`` files ignore,
    credentials and files above ``max_file_bytes``) plus every file matching a
    ``distributed_files`` glob (relative to ``root``; ``**`` recurses), whatever the rules
    say: a file named there is shipped on purpose (in a folder named there, all but
    credentials). Left-out credentials are named in a warning. A glob matching nothing
    raises ValueError naming it."""
    base = Path(root).resolve()
    if not base.is_dir():
        raise ValueError(f"the project folder to pack, {str(root)!r}, is not a folder")
    if isinstance(distributed_files, str):
        raise TypeError(
            f"distributed_files is a list of globs, got the string {distributed_files!r}: "
            f"write [{distributed_files!r}]"
        )
    files: dict[str, Path] = {}
    too_large: list[str] = []
    total = 0
    rules = _Rules(base, gitignore=True)
    for name, path in _walk(base, ignore, rules):
        try:
            size = 0 if path.is_dir() else path.stat().st_size
        except OSError:  # gone meanwhile
            continue
        if size > max_file_bytes:
            too_large.append(name)
            continue
        files[name] = path
        total += size
        if len(files) > MAX_PROJECT_FILES or total > MAX_PROJECT_BYTES:
            raise DeploymentError(
                f"the project folder {base} holds more than {MAX_PROJECT_FILES} files or "
                f"{MAX_PROJECT_BYTES >> 20} MiB to deploy: it is the folder of the entry script "
                "(or the current folder under `python -c` or a notebook), so keep the script in "
                "a folder of its own with the code it needs, and pass data files with "
                "distributed_files"
            )
    explicit = _Rules(base, gitignore=False)
    files.update(_globbed(base, distributed_files, explicit))
    secrets = sorted(set(rules.credentials + explicit.credentials) - set(files))
    if secrets:
        log.warning(
            "not deploying %d file(s) or folder(s) of %s that look like credentials: %s; to "
            "ship one on purpose, name it in parl.connect(..., distributed_files=[...])",
            len(secrets),
            base,
            ", ".join(secrets),
        )
    links = sorted(set(rules.links_out + explicit.links_out))
    if links:
        log.warning(
            "not deploying %d link(s) out of %s (the hosts may not have what they point to): "
            "%s; copy what the actors need into the project folder, or give it the same path "
            "on every host",
            len(links),
            base,
            ", ".join(links),
        )
    skipped = sorted(set(too_large) - set(files))
    if skipped:
        log.warning(
            "not deploying %d file(s) larger than %d MiB from %s: %s; to ship them, list them "
            "(or a glob) in parl.connect(..., distributed_files=[...])",
            len(skipped),
            max_file_bytes >> 20,
            base,
            ", ".join(skipped),
        )
    return _pack(files)


def pack_parl() -> Pack:
    """This ``parl`` package (as ``parl/...``), for hosts that lack it; same rules as a project."""
    package = Path(__file__).resolve().parent.parent
    files = {f"parl/{name}": path for name, path in _walk(package, DEFAULT_IGNORE)}
    return _pack(files)


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


def unpack(data: bytes, dest: str | Path, *, max_bytes: int = MAX_UNPACKED_BYTES) -> bool:
    """Extract the archive ``data`` into the folder ``dest``, atomically: it is filled under a
    temporary name beside ``dest`` and renamed into place, so a half-written folder is never
    seen. When ``dest`` exists already (the same digest was unpacked before) this does nothing.
    Absolute names, ``..``, links, devices and archives above ``max_bytes`` raise
    DeploymentError before anything is written. Whether this call made the folder."""
    target = Path(dest)
    if target.is_dir():
        return False
    members, archive = _checked_members(data, max_bytes)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        with archive:
            if hasattr(tarfile, "data_filter"):
                archive.extractall(temp, members=members, filter="data")
            else:  # pragma: no cover - Python < 3.11.4; the members were checked above
                archive.extractall(temp, members=members)
        try:
            os.rename(temp, target)
        except OSError:
            if not target.is_dir():  # not "another process won the race"
                raise
            return False
    finally:
        if temp.exists():
            shutil.rmtree(temp, ignore_errors=True)
    return True


def digest_of(data: bytes) -> str:
    """The digest of a ``Pack.data`` (the sha256 of its uncompressed tar), for a receiver that
    checks what it was sent."""
    raw = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    return hashlib.sha256(raw).hexdigest()


def _ignored(name: str, ignore: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in ignore)


class _Rules:
    """What a walk of the project ``root`` leaves out besides names: what git (or, without it,
    the ``.gitignore`` files) ignores when ``gitignore``, and credentials, which it lists in
    ``credentials``."""

    def __init__(self, root: Path, gitignore: bool) -> None:
        self.gitignore = gitignore
        self.git = ignoring.git_ignored(root) if gitignore else None
        # folders (``"a/b/"``) whose .gitignore files are read here: all of them without git,
        # else those of a repository inside the project that git could not list
        self.read: list[str] = [""] if gitignore and self.git is None else []
        self.secrets = ignoring.credential_rules()
        self.credentials: list[str] = []
        self.links_out: list[str] = []  # "name -> target" of links that leave the project

    def enter(self, folder: Path, rel: str, above: list[ignoring.Rule]) -> list[ignoring.Rule]:
        """The rules below ``folder`` (``rel`` from the root): ``above`` and its .gitignore's."""
        base = f"{rel}/" if rel else ""
        if self.git is not None and rel and os.path.lexists(folder / ".git"):
            # a repository of its own (a submodule, a clone inside the project): the project's
            # git does not look into it, so it is asked about its own ignored files
            nested = ignoring.git_ignored(folder)
            if nested is None:
                self.read.append(base)
            else:
                self.git.update(base + name for name in nested)
        if not any(base.startswith(top) for top in self.read):
            return above
        try:
            text = (folder / ".gitignore").read_text(errors="replace")
        except OSError:  # none (or unreadable): nothing more
            return above
        return above + ignoring.parse(text, base)

    def skip(self, name: str, is_dir: bool, rules: list[ignoring.Rule]) -> bool:
        if self.git is not None and (name in self.git or f"{name}/" in self.git):
            return True
        if ignoring.ignored(rules, name, is_dir):
            return True
        if ignoring.ignored(self.secrets, name, is_dir):
            self.credentials.append(f"{name}/" if is_dir else name)
            return True
        return False


def _walk(
    base: Path, ignore: Sequence[str], rules: _Rules | None = None, prefix: str = ""
) -> Iterator[tuple[str, Path]]:
    """(archive name, path) of every regular file under ``base``, and of every empty folder
    (nothing in it but ignored names) below it, minus ignored names and what ``rules`` leave
    out (names relative to the project, ``prefix`` + the path below ``base``): a program may
    expect a folder it writes into to be there. Links are followed only where they stay
    inside ``base``; a link to a folder that holds it (a loop) is not."""
    top = rules.enter(base, prefix.rstrip("/"), []) if rules is not None else []
    stack: list[tuple[Path, frozenset[str], list[ignoring.Rule]]] = [(base, frozenset(), top)]
    while stack:
        folder, above, inherited = stack.pop()
        real = os.path.realpath(folder)
        if real in above or (folder != base and os.path.isfile(os.path.join(folder, "pyvenv.cfg"))):
            continue
        above = above | {real}
        empty = True  # nothing in it but ignored names (not: all left out by the rules, as git)
        for entry in sorted(os.scandir(folder), key=lambda e: e.name, reverse=True):
            if entry.name == DERIVED or _ignored(entry.name, ignore):
                continue
            empty = False
            path = Path(entry.path)
            name = prefix + path.relative_to(base).as_posix()
            is_dir = entry.is_dir()
            if rules is not None and rules.skip(name, is_dir, inherited):
                continue
            if entry.is_symlink() and not _inside(path, base):
                if rules is not None:
                    rules.links_out.append(f"{name} -> {os.path.realpath(path)}")
                continue
            if is_dir:
                below = rules.enter(path, name, inherited) if rules is not None else inherited
                stack.append((path, above, below))
            elif entry.is_file():
                yield name, path
        if empty and folder != base:
            yield prefix + folder.relative_to(base).as_posix(), folder


def _inside(path: Path, base: Path) -> bool:
    return os.path.commonpath([os.path.realpath(path), str(base)]) == str(base)


def _globbed(base: Path, patterns: Sequence[str], rules: _Rules) -> dict[str, Path]:
    """What the ``distributed_files`` globs name: a file matched by a glob is shipped whatever
    the rules say; in a matched folder, all but credentials (left in ``rules.credentials``)."""
    files: dict[str, Path] = {}
    for pattern in patterns:
        if os.path.isabs(pattern) or ".." in Path(pattern).parts:
            raise ValueError(
                f"distributed_files entry {pattern!r} must be relative to the project folder "
                f"{base} and stay inside it"
            )
        matched = 0
        for hit in sorted(glob.glob(pattern, root_dir=base, recursive=True)):
            path = base / hit
            name = Path(hit).as_posix()
            if DERIVED in Path(hit).parts:
                found = {}
            elif path.is_dir():
                found = dict(_walk(path, (), rules, f"{name}/"))
                if not found and _inside(path, base):  # an empty folder: itself
                    found = {name: path}
            elif path.is_file() and _inside(path, base):
                found = {name: path}
            else:
                found = {}
            files.update(found)
            matched += len(found)
        if not matched:
            raise ValueError(
                f"distributed_files entry {pattern!r} matches no file under the project folder "
                f"{base}; globs are relative to that folder (the entry script's), e.g. "
                "'data/*.csv' or 'assets/**/*.npz'"
            )
    return files


def _pack(files: dict[str, Path]) -> Pack:
    raw = io.BytesIO()
    size = count = 0
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name in sorted(files):
            if files[name].is_dir():  # an empty folder
                archive.addfile(member_header(name, None, False))
                continue
            try:  # read whole: a file that changes meanwhile cannot break the archive
                with open(files[name], "rb") as file:
                    executable = bool(os.fstat(file.fileno()).st_mode & stat.S_IXUSR)
                    content = file.read()
            except OSError as exc:  # removed meanwhile, or not readable
                log.warning("not deploying %s: %s", files[name], exc.strerror or exc)
                continue
            archive.addfile(member_header(name, len(content), executable), io.BytesIO(content))
            size += len(content)
            count += 1
    tar = raw.getvalue()
    data = gzip.compress(tar, compresslevel=_GZIP_LEVEL, mtime=0)
    return Pack(hashlib.sha256(tar).hexdigest(), data, count, size)


def member_header(name: str, size: int | None, executable: bool) -> tarfile.TarInfo:
    """The header of a file of ``size`` bytes, or of an empty folder (``size`` None): all but
    the name, the size and the executable bit are fixed, so that the archive (and its digest)
    depend on the content alone."""
    info = tarfile.TarInfo(name)
    if size is None:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.size = size
        info.mode = 0o755 if executable else 0o644
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _checked_members(data: bytes, max_bytes: int) -> tuple[list[tarfile.TarInfo], tarfile.TarFile]:
    """The archive's members, each checked as it is read (so a bomb stops at ``max_bytes``)."""
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DeploymentError(f"a code archive is not a readable tar: {exc}") from None
    members: list[tarfile.TarInfo] = []
    total = 0
    try:
        for member in archive:
            _check_member(member)
            total += member.size
            if total > max_bytes:
                raise DeploymentError(
                    f"a code archive unpacks to more than {max_bytes} bytes; refused"
                )
            members.append(member)
    except (tarfile.TarError, OSError, EOFError) as exc:
        archive.close()
        raise DeploymentError(f"a code archive is not a readable tar: {exc}") from None
    except BaseException:
        archive.close()
        raise
    return members, archive


def _check_member(member: tarfile.TarInfo) -> None:
    name = member.name
    parts = Path(name).parts
    if not parts or os.path.isabs(name) or name.startswith("\\") or ".." in parts:
        raise DeploymentError(f"a code archive holds the unsafe name {name!r}; refused")
    if not (member.isreg() or member.isdir()):
        raise DeploymentError(
            f"a code archive holds {name!r}, which is not a plain file or folder (a link or "
            "device); refused"
        )
