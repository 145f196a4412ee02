"""``hosts.txt``: the machines the SSH launcher starts host agents on, one per line.

::

    # comments and blank lines are ignored
    gpu-box-1 cpus=16
    alice@10.0.0.7:2222 cpus=8 python=/opt/venv/bin/python3 workdir=/scratch/parl
    [fe80::1]:22 identity=~/.ssh/id_ed25519 tunnel=yes

A line is ``[user@]host[:port]`` (an IPv6 address in brackets) followed by ``key=value``
settings: ``cpus`` (slots; default: the host's CPU count), ``python`` (the interpreter;
default ``python3``), ``workdir`` (where code is cached and agents run; default
``~/.parl/cache``; it must be the user's and writable by no one else), ``identity`` (a private key file), ``tunnel`` (calls through the SSH
connection) and ``install`` (``venv``: install the packages the host's Python lacks or has in
another version into a virtual environment there; ``no``: never, whatever ``parl.connect``
says). A ``#`` at the start of a line or after a space starts a comment (one inside a value,
``workdir=/scratch/run#1``, is part of it). :func:`parse_hosts` is a pure function;
:func:`format_host` writes a line back.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parl.errors import HostsFileError

SETTINGS = ("cpus", "python", "workdir", "identity", "tunnel", "install")
INSTALL = ("venv", "no")
_TRUE = ("1", "yes", "true", "on")
_FALSE = ("0", "no", "false", "off")
_HOST = re.compile(
    r"^(?:(?P<user>[^@\s\[\]:]+)@)?"  # user@
    r"(?:\[(?P<v6>[0-9A-Fa-f:.%\w]+)\]|(?P<name>[^@\s\[\]:]+))"  # [v6] or name
    r"(?::(?P<port>[^:\s]*))?$"  # :port
)
_COMMENT = re.compile(r"(?:^|(?<=\s))#")  # a comment: "#" at the start of a line or a word
Fail = Callable[[str], HostsFileError]


@dataclass(frozen=True)
class HostSpec:
    """One host of a hosts file. ``None`` fields take their defaults (``~/.ssh/config``'s,
    then OpenSSH's) when the host is reached."""

    host: str
    user: str | None = None
    port: int | None = None
    cpus: int | None = None
    python: str = "python3"
    workdir: str | None = None
    identity: str | None = None
    tunnel: bool = False
    install: str | None = None  # "venv", "no", or None: as parl.connect(install=...) says

    @property
    def name(self) -> str:
        """How the host is shown in progress lines and errors: ``user@host:port`` as written."""
        return format_address(self)


def format_address(spec: HostSpec) -> str:
    host = f"[{spec.host}]" if ":" in spec.host else spec.host
    user = f"{spec.user}@" if spec.user else ""
    port = f":{spec.port}" if spec.port is not None else ""
    return f"{user}{host}{port}"


def format_host(spec: HostSpec) -> str:
    """``spec`` as a hosts-file line; ``parse_hosts(format_host(s))`` gives ``[s]`` back."""
    parts = [format_address(spec)]
    if spec.cpus is not None:
        parts.append(f"cpus={spec.cpus}")
    if spec.python != "python3":
        parts.append(f"python={spec.python}")
    if spec.workdir is not None:
        parts.append(f"workdir={spec.workdir}")
    if spec.identity is not None:
        parts.append(f"identity={spec.identity}")
    if spec.tunnel:
        parts.append("tunnel=yes")
    if spec.install is not None:
        parts.append(f"install={spec.install}")
    return " ".join(parts)


def parse_hosts(text: str, filename: str = "hosts.txt") -> list[HostSpec]:
    """The hosts of a hosts file's ``text``. Raises :class:`parl.errors.HostsFileError` naming
    ``filename``, the line number and what is wrong with the first bad line."""
    specs: list[HostSpec] = []
    seen: dict[tuple[str | None, str, int | None], int] = {}
    # lines end at "\n" only (str.splitlines would also end them at form feeds, "\x1c" or
    # U+2028, and the numbers in errors would not be the ones an editor shows)
    for number, raw in enumerate(text.split("\n"), start=1):
        fail = _failure(filename, number, raw)
        line = _COMMENT.split(raw.rstrip("\r"), 1)[0].strip()
        if not line:
            continue
        bad = next((c for c in line if not c.isprintable() and not c.isspace()), None)
        if bad is not None:
            raise fail(f"control character {bad!r}: a hosts file is plain text")

        spec = _parse_line(line, fail)
        key = (spec.user, spec.host.lower(), spec.port)
        if key in seen:
            raise fail(f"host {spec.name} is already listed on line {seen[key]}")
        seen[key] = number
        specs.append(spec)
    return specs


def _failure(filename: str, number: int, raw: str) -> Fail:
    def fail(what: str) -> HostsFileError:
        return HostsFileError(f"{filename}, line {number}: {what} (in {raw.strip()!r})")

    return fail


def parse_host(text: str) -> HostSpec:
    """One host given as a string (``"alice@box:2222 cpus=4"``) rather than in a file."""
    specs = parse_hosts(text, filename="<host string>")
    if len(specs) != 1:
        raise HostsFileError(f"expected one host, got {len(specs)} in {text!r}")
    return specs[0]


def read_hosts(path: str) -> list[HostSpec]:
    """The hosts of the file at ``path`` (an empty file is an error: nothing to launch)."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise HostsFileError(f"cannot read the hosts file {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8-sig")  # (an editor's byte order mark is no part of a host)
    except UnicodeDecodeError as exc:
        number = data.count(b"\n", 0, exc.start) + 1
        raise HostsFileError(
            f"{path}, line {number}: byte {data[exc.start]:#x} is not UTF-8: save the file as "
            "UTF-8 text"
        ) from None
    specs = parse_hosts(text, filename=path)
    if not specs:
        raise HostsFileError(f"{path} lists no host: write one per line, e.g. 'user@box cpus=4'")
    return specs


def _parse_line(line: str, fail: Fail) -> HostSpec:
    first, *settings = line.split()
    match = _HOST.match(first)
    if match is None:
        raise fail(f"{first!r} is not a host: write [user@]host[:port], IPv6 in brackets")
    port: int | None = None
    if match["port"] is not None:
        if not _number(match["port"]) or not 0 < int(match["port"]) < 65536:
            raise fail(f"bad port {match['port']!r}: a number from 1 to 65535")
        port = int(match["port"])
    values: dict[str, Any] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep:
            raise fail(f"{setting!r} is not a setting: write key=value ({', '.join(SETTINGS)})")
        if key not in SETTINGS:
            raise fail(f"unknown setting {key!r}: the settings are {', '.join(SETTINGS)}")
        if key in values:
            raise fail(f"setting {key!r} is given twice")
        if not value:
            raise fail(f"setting {key!r} has no value")
        values[key] = _setting(key, value, fail)
    spec = HostSpec(host=match["v6"] or match["name"], user=match["user"], port=port)
    return dataclasses.replace(spec, **values)  # types checked by _setting


def _number(text: str) -> bool:
    """Whether ``text`` is a whole number in ASCII digits (str.isdigit() also says yes to
    '²', which int() refuses, and to other scripts' digits)."""
    return text.isascii() and text.isdigit()


def _setting(key: str, value: str, fail: Fail) -> object:
    if key == "cpus":
        if not _number(value) or int(value) < 1:
            raise fail(f"cpus must be a positive integer, got {value!r}")
        return int(value)
    if key == "tunnel":
        if value.lower() not in _TRUE + _FALSE:
            raise fail(f"tunnel must be yes or no, got {value!r}")
        return value.lower() in _TRUE
    if key == "install" and value not in INSTALL:
        raise fail(f"install must be venv or no, got {value!r}")
    return value
