"""``install=venv``: what a host's Python lacks, installed into a virtual environment there.

When the host's Python misses a package parl needs there, or has another version of one whose
version must match (:data:`parl.ssh.remote.REQUIRED`, :data:`~parl.ssh.remote.MATCHED`), the
launcher makes a virtual environment under the host's cache folder, named by a digest of that
Python (executable and version) and of this side's pinned versions, and installs exactly
those versions into it: from a wheelhouse folder of this machine (uploaded by SFTP, then
``pip install --no-index --find-links``), else from the host's package index. The environment
sits on top of the host's Python (its site folders are added after the environment's own), so
only what is missing or different is installed. The next launch finds it complete and runs no
pip at all; a host that has everything never gets one.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath

import paramiko

from parl.errors import RemoteEnvironmentError
from parl.ssh import remote
from parl.ssh.client import SSHConnection, quote

PIP_TIMEOUT_S = 1800.0

VENV = """\
import glob, os, shutil, site, sys, venv
dest = sys.argv[1]
if not os.path.isdir(dest):
    work = "%s.tmp-%d" % (dest, os.getpid())
    venv.EnvBuilder(with_pip=True, symlinks=True).create(work)
    sites = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        sites.append(site.getusersitepackages())
    (lib,) = glob.glob(os.path.join(work, "lib", "python*", "site-packages"))
    with open(os.path.join(lib, "_parl_host_site.pth"), "w") as file:
        added = "; ".join("site.addsitedir(%r)" % p for p in sites if os.path.isdir(p))
        file.write("import site; " + added + "\\n")
    try:
        os.rename(work, dest)
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
        if not os.path.isdir(dest):
            raise
print(os.path.join(dest, "bin", "python"))
"""


def needs(probe: remote.Probe, mine: dict[str, str | None]) -> list[str]:
    """Pinned requirements (``name==version``, this side's) of what ``probe``'s Python lacks,
    or has in another version where versions must match."""
    pins = []
    for name in sorted(set(remote.REQUIRED + remote.MATCHED)):
        theirs, ours = probe.packages.get(name), mine.get(name)
        missing = theirs is None and (name in remote.REQUIRED or ours)
        if missing or (name in remote.MATCHED and ours and theirs != ours):
            pins.append(f"{name}=={ours}" if ours else name)
    return pins


def venv_folder(probe: remote.Probe, mine: dict[str, str | None]) -> str:
    """Where the environment for ``probe``'s Python and this side's versions lives."""
    pins = sorted(f"{n}=={v}" for n, v in mine.items() if v)
    key = json.dumps([probe.executable, probe.python, pins])
    return f"{probe.base}/venv-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def pip_command(python: str, pins: list[str], wheelhouse: str | None) -> str:
    argv = ["-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    if wheelhouse is not None:
        argv += ["--no-index", "--find-links", wheelhouse]
    return f"{remote.shell_word(python)} {quote([*argv, *pins])} 2>&1"


def ensure_venv(
    conn: SSHConnection,
    python: str,
    probe: remote.Probe,
    mine: dict[str, str | None],
    digests: list[str],
    wheels: str | None,
) -> tuple[str, remote.Probe, list[str]]:
    """The environment's python, its probe, and what pip installed (nothing when it was
    complete). Raises :class:`RemoteEnvironmentError` naming the host, the packages and what
    pip said last."""
    host = conn.shown
    dest = venv_folder(probe, mine)
    made = conn.run(f"{remote.shell_word(python)} -c {quote([VENV, dest])}", timeout=300.0)
    if made.status != 0:
        raise RemoteEnvironmentError(
            f"host {host}: creating a virtual environment in {dest} with {python} failed "
            f"(install=venv needs Python's venv and ensurepip there, e.g. Debian's python3-venv):"
            f"\n{_last_lines(made.stderr + made.stdout)}"
        )
    venv_python = made.stdout.decode(errors="replace").strip().splitlines()[-1]
    venv_probe = _probe(conn, venv_python, probe.base, digests)
    pins = needs(venv_probe, mine)
    if not pins:
        return venv_python, venv_probe, []
    wheelhouse = _upload_wheels(conn, wheels, probe.base) if wheels is not None else None
    done = conn.run(pip_command(venv_python, pins, wheelhouse), timeout=PIP_TIMEOUT_S)
    if done.status != 0:
        source = f"the wheelhouse {wheels}" if wheels is not None else "the host's package index"
        raise RemoteEnvironmentError(
            f"host {host}: pip could not install {', '.join(pins)} from {source} into "
            f"{dest} (exit status {done.status}); pip said:\n{_last_lines(done.stdout)}"
        )
    return venv_python, _probe(conn, venv_python, probe.base, digests), pins


def _probe(conn: SSHConnection, python: str, base: str, digests: list[str]) -> remote.Probe:
    done = conn.run(remote.probe_command(python, base, digests))
    return remote.parse_probe(conn.shown, python, done.status, done.stdout, done.stderr)


def _upload_wheels(conn: SSHConnection, wheels: str, base: str) -> str:
    """The files of the local folder ``wheels``, in ``<base>/wheels`` on the host (one that is
    there with the same size is not sent again); that folder."""
    folder = posixpath.join(base, "wheels")
    names = sorted(n for n in os.listdir(wheels) if os.path.isfile(os.path.join(wheels, n)))
    sftp = conn.sftp()
    try:
        try:
            sftp.mkdir(folder)
        except OSError:
            pass  # already there
        there = {a.filename: a.st_size for a in sftp.listdir_attr(folder)}
        for name in names:
            local = os.path.join(wheels, name)
            if there.get(name) == os.stat(local).st_size:
                continue
            part = posixpath.join(folder, f".{name}.part")
            sftp.put(local, part)
            sftp.posix_rename(part, posixpath.join(folder, name))
    except (OSError, paramiko.SSHException) as exc:
        raise RemoteEnvironmentError(
            f"host {conn.shown}: uploading the wheelhouse {wheels} to {folder} failed: {exc}"
        ) from None
    finally:
        sftp.close()
    return folder


def _last_lines(output: bytes, count: int = 15) -> str:
    lines = output.decode(errors="replace").strip().splitlines()[-count:]
    return "\n".join(f"    {line}" for line in lines)


def wheelhouse(path: str | os.PathLike[str] | None) -> str | None:
    """``wheels`` of ``parl.connect``: an existing folder, made absolute; ValueError else."""
    if path is None:
        return None
    folder = os.path.abspath(os.fspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"wheels must be a folder of wheel files, got {os.fspath(path)!r}")
    return folder
