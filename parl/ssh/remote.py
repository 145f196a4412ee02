"""What runs on a host, as pure functions: the remote command lines and what their answers mean.

The launcher runs three things over SSH, each with the host's own Python: a *probe* (its
version, the packages parl needs, which code archives its cache holds), an *unpack* of the
archives just uploaded, and the host agent (:mod:`parl.cluster.daemon`), whose secret comes on
stdin. The probe and the first unpack use the standard library only: the host may not have
parl yet. Nothing here touches the network, so it is tested without SSH.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from dataclasses import dataclass
from importlib import metadata

from parl.deploy import cachedir, codecheck
from parl.errors import RemoteEnvironmentError, VersionMismatchError
from parl.ssh.client import quote

log = logging.getLogger("parl.ssh")

REQUIRED = ("numpy", "cloudpickle", "psutil")
"""Packages a host agent and its workers import (parl itself is shipped, not required)."""
MATCHED = ("numpy", "cloudpickle", "torch")
"""Packages whose version must be the caller's: their objects cross in pickles."""

# PROBE runs after the source of parl.deploy.cachedir's and parl.deploy.codecheck's checks
# (see probe_command): the host agent judges its cache folder and cached code with the same code.

PROBE = """\
import json, os, sys
from importlib import metadata
base = make_private(sys.argv[1])  # each missing level 0700 (a umask of 002 makes none group's)
unsafe = unsafe_folder(base)
packages = {}
for name in sys.argv[3:]:
    try:
        packages[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        packages[name] = None
have, dropped = [], []
for digest in [d for d in sys.argv[2].split(",") if d and not unsafe]:
    folder = os.path.join(base, digest)
    if not os.path.isdir(folder):
        continue
    try:  # a folder named by a digest proves nothing: its files must give that digest
        proved = not os.path.islink(folder) and folder_digest(folder) == digest
    except Exception:
        proved = False
    if proved:
        have.append(digest)
        continue
    try:  # away, never used; the host agent's cache removes it later
        os.rename(folder, os.path.join(base, ".%s.stale-%d" % (digest, os.getpid())))
        dropped.append(folder)
    except OSError as exc:
        unsafe = ("holds %s, which is not the code it is named after and cannot be moved "
                  "away (%s)" % (folder, exc.strerror))
print(json.dumps({"python": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable,
                  "base": base, "packages": packages, "have": have, "cpus": os.cpu_count(),
                  "unsafe": unsafe, "dropped": dropped}))
"""

UNPACK = """\
import os, shutil, sys, tarfile, tempfile
base, parl_digest, jobs = sys.argv[1], sys.argv[2], sys.argv[3:]
def bootstrap(archive, dest):
    work = tempfile.mkdtemp(prefix="." + os.path.basename(dest) + ".", dir=base)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(work, filter="data")
            else:
                tar.extractall(work)
        try:
            os.rename(work, dest)
        except OSError:
            if not os.path.isdir(dest):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
for archive, digest in zip(jobs[::2], jobs[1::2]):
    dest = os.path.join(base, digest)
    if digest == parl_digest:
        bootstrap(archive, dest)
    else:
        sys.path.insert(0, os.path.join(base, parl_digest))
        from parl.deploy.packer import unpack
        with open(archive, "rb") as file:
            unpack(file.read(), dest)
    os.unlink(archive)
"""


@dataclass(frozen=True)
class Probe:
    """A host's answer to :data:`PROBE`."""

    python: str
    executable: str
    base: str
    packages: dict[str, str | None]
    have: tuple[str, ...]
    cpus: int


def shell_word(word: str) -> str:
    """``word`` quoted for the remote shell, except a leading ``~/``, which the shell expands
    (``python=~/venv/bin/python3`` in a hosts file means the remote user's home)."""
    if word.startswith("~/"):
        return "~/" + quote([word[2:]])
    return quote([word])


_SOURCE_LOCK = threading.Lock()


@functools.cache
def _probe_script() -> str:
    return f"import os\n{cachedir.source()}\n{codecheck.source()}\n{PROBE}"


def probe_script() -> str:
    """The probe's Python source, made once. The launcher prepares hosts in threads, and
    CPython 3.11's ``ast.parse`` (behind ``inspect.getsource``) is not safe to run in two
    threads at once: it can fail with "AST constructor recursion depth mismatch"."""
    with _SOURCE_LOCK:
        return _probe_script()


def probe_command(python: str, base: str, digests: list[str]) -> str:
    script = probe_script()
    args = [script, base, ",".join(digests), *sorted(set(REQUIRED + MATCHED))]
    return f"{shell_word(python)} -c {quote(args)}"


def parse_probe(host: str, python: str, status: int, stdout: bytes, stderr: bytes) -> Probe:
    """The probe's answer, or :class:`RemoteEnvironmentError` naming the host: no such python
    (the shell's 127/126), or a python that failed or printed something else."""
    said = stderr.decode(errors="replace").strip()[-500:]
    if status in (126, 127):
        raise RemoteEnvironmentError(
            f"host {host}: no such python {python!r} (the remote shell said: {said}); set "
            f"python=/path/to/python3 on its line of the hosts file"
        )
    try:
        answer = json.loads(stdout.decode().strip().splitlines()[-1])
        probe = Probe(
            python=str(answer["python"]),
            executable=str(answer["executable"]),
            base=str(answer["base"]),
            packages=dict(answer["packages"]),
            have=tuple(answer["have"]),
            cpus=int(answer["cpus"] or 1),
        )
        unsafe = answer.get("unsafe")
        dropped = [str(folder) for folder in answer.get("dropped") or ()]
    except (ValueError, KeyError, IndexError, TypeError):
        raise RemoteEnvironmentError(
            f"host {host}: {python!r} could not run parl's check (exit status {status}): "
            f"{said or stdout.decode(errors='replace')[-500:]}; parl needs Python 3.10 or newer"
        ) from None
    if dropped:
        log.warning(
            "host %s: not using the cached code %s: its files are not those of the code it is "
            "named after (a file was added, changed or removed); it is sent again",
            host,
            ", ".join(dropped),
        )
    if unsafe:  # anyone who can write there could plant code that would run as this user
        raise RemoteEnvironmentError(
            f"host {host}: the cache folder {probe.base} {unsafe}: code found there would run "
            "as you, whoever put it there. Set workdir=... on its hosts-file line to a folder "
            "of your own that only you can write (e.g. the default ~/.parl/cache, or "
            f"`chmod go-w {probe.base}` if it is yours)"
        )
    return probe


def local_versions() -> dict[str, str | None]:
    """This side's versions of the packages a host must match (read from their metadata:
    nothing is imported)."""
    found: dict[str, str | None] = {}
    for name in sorted(set(REQUIRED + MATCHED)):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def same_python(probe: Probe) -> bool:
    """Whether the host's Python is this one's major.minor (an environment cannot change it)."""
    import platform

    return probe.python.split(".")[:2] == platform.python_version().split(".")[:2]


def check_versions(host: str, probe: Probe, mine: dict[str, str | None], python: str) -> None:
    """Raise naming ``host`` and every missing or mismatched piece: the Python version
    (major.minor), a required package that is missing, a matched one of another version."""
    import platform

    here = platform.python_version()
    missing = [n for n in REQUIRED if probe.packages.get(n) is None]
    missing += [n for n in MATCHED if mine.get(n) and probe.packages.get(n) is None]
    missing = sorted(set(missing))
    where = f"{probe.executable} on host {host}"
    if missing:
        install = " ".join(f"{n}=={mine[n]}" if mine.get(n) else n for n in missing)
        raise RemoteEnvironmentError(
            f"{where} lacks {', '.join(missing)}: install them there (`{python} -m pip install "
            f"{install}`), or set python=... on its hosts-file line to an environment that has "
            "them"
        )
    problems = []
    if probe.python.split(".")[:2] != here.split(".")[:2]:
        problems.append(f"Python {here} here, {probe.python} there")
    for name in MATCHED:
        theirs = probe.packages.get(name)
        if mine.get(name) and theirs != mine[name]:
            problems.append(f"{name} {mine[name]} here, {theirs} there")
    if problems:
        raise VersionMismatchError(
            f"{where} does not match this machine: {'; '.join(problems)}. Install the same "
            "versions there, or set python=... on its hosts-file line to an environment that has "
            "them"
        )


def unpack_command(python: str, base: str, parl_digest: str, jobs: list[tuple[str, str]]) -> str:
    """Unpack each uploaded (archive path, digest) into ``base/digest``; parl's own archive
    first, with the standard library, then the others with parl's safe unpack."""
    args = [a for job in jobs for a in job]
    return f"{shell_word(python)} -c {quote([UNPACK, base, parl_digest, *args])}"


def agent_command(
    python: str,
    base: str,
    parl_digest: str,
    project_digest: str | None,
    bind: str,
    master: str,
    cpus: int,
    advertise: str | None = None,
    label: str | None = None,
) -> str:
    """Start a host agent in the project's folder, parl and the project first on its path
    (``project_digest`` None: no project yet, in ``base``, with parl alone on its path; the
    callers of an ``xparl start --hosts`` cluster ship theirs per caller). Its ready line goes
    to the channel's stdout (fd 3), its log to the channel's stderr; it reads the secret from
    stdin and ends when stdin closes. ``advertise``: the address the agent registers (a
    tunnel's end on the caller's side) instead of its own; ``label``: how the master shows
    it (the host's name in the hosts file)."""
    folder = f"{base}/{project_digest}" if project_digest else base
    path = f"{folder}:{base}/{parl_digest}" if project_digest else f"{base}/{parl_digest}"
    daemon = ["-m", "parl.cluster.daemon", "agent", bind, master, str(cpus), "3"]
    daemon += ["--secret-stdin", f"--cache_dir={base}"]  # the cluster's uploads find ours
    daemon += [f"--advertise={advertise}"] if advertise else []
    daemon += [f"--label={label}"] if label else []
    return (
        f"cd {quote([folder])} && PYTHONPATH={quote([path])} exec {shell_word(python)} "
        f"{quote(daemon)} 3>&1 1>&2"
    )
