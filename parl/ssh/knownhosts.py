"""Checking a host's key against known_hosts, read-only, with the line that holds each key.

paramiko's ``HostKeys`` forgets where an entry came from; to say "line 7 of
~/.ssh/known_hosts holds another key" this reads the file itself (plain and hashed ``|1|``
names, ``[host]:port`` for ports other than 22, ``*``/``?`` patterns) and never writes it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from paramiko import HostKeys, PKey
from paramiko.hostkeys import HostKeyEntry

from parl.errors import HostKeyError


@dataclass(frozen=True)
class KnownKey:
    path: str
    line: int
    key: PKey
    revoked: bool = False  # a ``@revoked`` line: this key must be refused


def host_key_name(hostname: str, port: int) -> str:
    """The name known_hosts uses: ``host`` on port 22, ``[host]:port`` elsewhere."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


def known_keys(paths: list[str], name: str) -> list[KnownKey]:
    """Every key listed for ``name`` in the files ``paths`` (missing files hold none)."""
    found: list[KnownKey] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as file:
                lines = file.read().splitlines()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise HostKeyError(f"cannot read the known_hosts file {path}: {exc.strerror}") from None
        for number, line in enumerate(lines, start=1):
            line = line.strip()
            revoked = line.startswith("@revoked ")
            if revoked:
                line = line[len("@revoked ") :].strip()
            if not line or line.startswith(("#", "@")):  # (@cert-authority: not supported)
                continue
            try:
                entry = HostKeyEntry.from_line(line, number)
            except Exception:  # noqa: BLE001 - a key type paramiko cannot read: not ours
                continue
            if entry is not None and _matches(entry.hostnames, name):
                found.append(KnownKey(path, number, entry.key, revoked))
    return found


def _matches(patterns: list[str], name: str) -> bool:
    """Whether ``name`` matches a known_hosts line's host patterns. OpenSSH lower-cases a
    host's name (and a HostKeyAlias) before it looks it up or hashes it: so does this."""
    name = name.lower()
    matched = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if pattern.startswith("|1|"):
            hit = HostKeys.hash_host(name, pattern) == pattern
        else:
            hit = _wildcard(pattern).fullmatch(name) is not None
        if hit and negated:
            return False
        matched = matched or hit
    return matched


def _wildcard(pattern: str) -> re.Pattern[str]:
    """An OpenSSH host pattern: ``*`` and ``?`` are wildcards, brackets are literal."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower())
    return re.compile("".join(parts))


def check(
    name: str,
    server_key: PKey,
    paths: list[str],
    accept_unknown: bool,
    shown: str,
    address: tuple[str, int] | None = None,
) -> None:
    """Raise :class:`HostKeyError` unless ``server_key`` is listed for ``name`` in ``paths``
    (``address``: where the host is, when ``name`` is a HostKeyAlias rather than its address).

    A listed key of the same type that differs is a *changed* key: always an error, naming
    the file and line to fix. No key of that type: *unknown*, an error unless
    ``accept_unknown`` (then the key is trusted for this connection only, never written).
    """
    known = known_keys(paths, name)
    fingerprint = f"{server_key.get_name()} {server_key.fingerprint}"
    same = [k for k in known if k.key.get_name() == server_key.get_name() and k.key == server_key]
    for k in same:
        if k.revoked:
            raise HostKeyError(
                f"the host key of {shown} ({name}, {fingerprint}) is REVOKED: {k.path} line "
                f"{k.line} marks it @revoked; the host must get a new key"
            )
    if same:
        return
    known = [k for k in known if not k.revoked]
    clashes = [k for k in known if k.key.get_name() == server_key.get_name()]
    if clashes:
        where = "; ".join(f"{k.path} line {k.line}" for k in clashes)
        raise HostKeyError(
            f"the host key of {shown} ({name}) CHANGED: it now offers {fingerprint}, but {where} "
            f"holds another {server_key.get_name()} key. Someone may be intercepting the "
            f"connection; if the host was reinstalled, check the new fingerprint, delete that "
            f"line (`ssh-keygen -R '{name}' -f {clashes[0].path}`) and add the new key"
        )
    if accept_unknown:
        return
    hostname, port = address or _split(name)
    port_flag = f"-p {port} " if port != 22 else ""
    target = paths[0] if paths else os.path.expanduser("~/.ssh/known_hosts")
    scan = f"ssh-keyscan {port_flag}{hostname}"
    if name != host_key_name(hostname, port):  # a HostKeyAlias: the line names the alias
        scan += f" | sed 's/^[^ ]*/{name}/'"
    raise HostKeyError(
        f"the host key of {shown} ({name}, {fingerprint}) is unknown: it is not in "
        f"{', '.join(paths) or 'any known_hosts file'}. Check the fingerprint, then add it with "
        f"`{scan} >> {target}` (or log in once with "
        f"`ssh {port_flag}{hostname}` and accept it), or let parl trust unknown keys for this "
        "run only with parl.connect(..., accept_unknown_host_keys=True)"
    )


def _split(name: str) -> tuple[str, int]:
    if name.startswith("["):
        host, _, port = name[1:].partition("]:")
        return host, int(port)
    return name, 22
