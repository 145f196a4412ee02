"""SSH connections to the hosts of a hosts file, made with paramiko the way OpenSSH makes them.

``~/.ssh/config`` (``HostName``, ``User``, ``Port``, ``IdentityFile``, ``ProxyJump`` hops)
resolves a host (``HostKeyAlias``, ``ServerAliveInterval`` and ``ServerAliveCountMax`` too); its
key must be in known_hosts (read-only; :mod:`parl.ssh.knownhosts`)
unless the caller opts in with ``accept_unknown_host_keys``; the agent's keys are offered
first, then the identity files. Every failure is an :class:`parl.errors.SSHError` subclass
whose message names the host and what to do.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import shlex
import socket
import threading
import time
from dataclasses import dataclass, field

import paramiko

from parl.errors import HostUnreachableError, SSHAuthenticationError, SSHError
from parl.ssh import keepalive, knownhosts
from parl.ssh.hosts import HostSpec

_MAX_HOPS = 8
_DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")


@dataclass(frozen=True)
class SSHOptions:
    """How hosts are reached. ``config``: an OpenSSH client config file (None: none).
    ``known_hosts``: files of trusted host keys, read only. ``accept_unknown_host_keys``:
    trust a host whose key is in no known_hosts file, for this run only (never written; a
    *changed* key is refused all the same). ``allow_agent``: offer the ssh-agent's keys."""

    config: str | None = "~/.ssh/config"
    known_hosts: tuple[str, ...] = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")
    accept_unknown_host_keys: bool = False
    allow_agent: bool = True
    timeout: float = 10.0


@dataclass(frozen=True)
class Target:
    """Where a host spec leads once the ssh config is applied."""

    hostname: str
    port: int
    user: str
    identities: tuple[str, ...]
    jump: str | None = None
    identities_only: bool = False  # IdentitiesOnly: the agent's keys are not offered
    keepalive: tuple[float, int] = (keepalive.DEFAULT_INTERVAL_S, keepalive.DEFAULT_COUNT)
    host_key_alias: str | None = None  # HostKeyAlias: the name known_hosts lists the key under

    @property
    def key_name(self) -> str:
        """The name of the host's key in known_hosts: its HostKeyAlias as written (no port,
        as OpenSSH), else ``host`` or ``[host]:port``."""
        return self.host_key_alias or knownhosts.host_key_name(self.hostname, self.port)


@dataclass
class Result:
    status: int
    stdout: bytes
    stderr: bytes = field(repr=False)


def resolve(spec: HostSpec, options: SSHOptions) -> Target:
    """Apply the ssh config to ``spec``; what the hosts file says wins over the config."""
    entry: dict = {}
    if options.config is not None:
        path = os.path.expanduser(options.config)
        if os.path.exists(path):
            try:
                entry = dict(paramiko.SSHConfig.from_path(path).lookup(spec.host))
            except Exception as exc:  # noqa: BLE001 - paramiko raises several types here
                raise SSHError(f"cannot read the ssh config {path}: {exc}") from None
    port = spec.port if spec.port is not None else int(entry.get("port", 22))
    if spec.identity is not None:
        identities: tuple[str, ...] = (spec.identity,)
    else:
        identities = tuple(entry.get("identityfile", ())) or _DEFAULT_IDENTITIES
    jump = entry.get("proxyjump")
    if jump is not None and jump.lower() == "none":
        jump = None
    return Target(
        hostname=entry.get("hostname", spec.host),
        port=port,
        user=spec.user or entry.get("user") or getpass.getuser(),
        identities=tuple(os.path.expanduser(p) for p in identities),
        jump=jump,
        identities_only=str(entry.get("identitiesonly", "no")).lower() == "yes",
        keepalive=keepalive.settings(entry, spec.name),
        host_key_alias=entry.get("hostkeyalias"),
    )


class SSHConnection:
    """An authenticated SSH connection to one host; ``close()`` is idempotent.

    ``jump`` (internal): the hops before this host when it is itself a hop of a ``ProxyJump
    a,b`` list (instead of its own ProxyJump); ``chain``: the hosts that lead here, to name a
    loop of ProxyJump settings."""

    def __init__(
        self,
        spec: HostSpec,
        options: SSHOptions,
        *,
        jump: str | None = None,
        chain: tuple[str, ...] = (),
    ) -> None:
        self.spec = spec
        self.options = options
        self.target = resolve(spec, options)
        if jump is not None:
            self.target = dataclasses.replace(self.target, jump=jump)
        self.shown = spec.name
        self._chain = (*chain, spec.name)
        self._jump: SSHConnection | None = None
        self._lock = threading.Lock()
        self.global_lock = threading.Lock()  # one global request at a time (see keepalive)
        self._closed = False
        sock = self._socket()
        try:
            self.transport = self._handshake(sock)
        except BaseException:
            sock.close()
            if self._jump is not None:
                self._jump.close()
            raise
        self.keepalive = keepalive.KeepAlive(
            self.transport, self.shown, *self.target.keepalive, self.global_lock
        )
        direct = isinstance(sock, socket.socket)
        # this machine's address toward the host (None through a jump host), and the host's
        self.local_address: str | None = sock.getsockname()[0] if direct else None
        self.peer_address: str = sock.getpeername()[0] if direct else self.target.hostname

    # -- connecting ---------------------------------------------------------------------------

    def _socket(self) -> socket.socket | paramiko.Channel:
        t = self.target
        if t.jump is None:
            try:
                return socket.create_connection((t.hostname, t.port), timeout=self.options.timeout)
            except OSError as exc:
                raise HostUnreachableError(
                    f"host {self.shown} is unreachable: connecting to {t.hostname} port {t.port} "
                    f"failed ({exc.strerror or exc}); check the name and port in the hosts file "
                    "(and in ~/.ssh/config), and that sshd runs there"
                ) from None
        self._jump = self._hop(t.jump)
        try:
            return self._jump.transport.open_channel(
                "direct-tcpip",
                (t.hostname, t.port),
                ("127.0.0.1", 0),
                timeout=self.options.timeout,
            )
        except (paramiko.SSHException, OSError) as exc:
            raise HostUnreachableError(
                f"host {self.shown} is unreachable through the jump host {t.jump}: "
                f"{t.hostname} port {t.port} ({exc})"
            ) from None

    def _hop(self, jump: str) -> SSHConnection:
        """The connection to the last hop of ``jump`` (``a,b``: b, itself reached through a;
        a single hop through its own ProxyJump, as OpenSSH does), each hop's host key checked
        as this host's is."""
        from parl.ssh.hosts import parse_host

        hops = [h.strip() for h in jump.split(",")]
        if not all(hops):
            raise SSHError(f"host {self.shown}: ProxyJump {jump!r} has an empty hop")
        if len(self._chain) > _MAX_HOPS:
            raise SSHError(
                f"host {self.shown}: more than {_MAX_HOPS} ProxyJump hops "
                f"({' -> '.join(reversed(self._chain))}); is there a loop in the ssh config?"
            )
        try:
            spec = parse_host(hops[-1])
        except ValueError as exc:
            raise SSHError(f"host {self.shown}: bad ProxyJump hop {hops[-1]!r}: {exc}") from None
        if spec.name in self._chain:
            raise SSHError(
                f"host {self.shown}: the ProxyJump settings make a loop: "
                f"{' -> '.join(reversed((*self._chain, spec.name)))}; fix ~/.ssh/config"
            )
        before = ",".join(hops[:-1]) or None
        return SSHConnection(spec, self.options, jump=before, chain=self._chain)

    def _handshake(self, sock: socket.socket | paramiko.Channel) -> paramiko.Transport:
        t = self.target
        name = t.key_name
        files = [os.path.expanduser(p) for p in self.options.known_hosts]
        transport = paramiko.Transport(sock)
        known = {k.key.get_name() for k in knownhosts.known_keys(files, name)}
        if known:  # offer the key types known_hosts has first, as OpenSSH does
            security = transport.get_security_options()
            types = list(security.key_types)
            security.key_types = [k for k in types if k in known] + [
                k for k in types if k not in known
            ]
        try:
            transport.start_client(timeout=self.options.timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            transport.close()
            raise HostUnreachableError(
                f"host {self.shown} ({t.hostname} port {t.port}) does not speak SSH: {exc}"
            ) from None
        try:
            knownhosts.check(
                name,
                transport.get_remote_server_key(),
                files,
                self.options.accept_unknown_host_keys,
                self.shown,
                (t.hostname, t.port),
            )
            self._authenticate(transport)
        except BaseException:
            transport.close()
            raise
        return transport

    def _authenticate(self, transport: paramiko.Transport) -> None:
        """The agent's keys first, then each identity file, as OpenSSH offers them."""
        user = self.target.user
        tried: list[str] = []
        if self.options.allow_agent and not self.target.identities_only:
            agent = paramiko.Agent()
            try:
                for key in agent.get_keys():
                    tried.append(f"agent key {key.get_name()}")
                    if self._try(transport, user, key):
                        return
            finally:
                agent.close()
        defaults = {os.path.expanduser(p) for p in _DEFAULT_IDENTITIES}
        for path in self.target.identities:
            if not os.path.exists(path):
                if path not in defaults:  # named by the hosts file or the ssh config: a typo?
                    tried.append(f"{path} (no such file)")
                continue
            try:
                key = paramiko.PKey.from_path(path)
            except paramiko.PasswordRequiredException:
                tried.append(f"{path} (skipped: it needs a passphrase; add it to ssh-agent)")
                continue
            except (paramiko.SSHException, OSError, ValueError) as exc:
                tried.append(f"{path} (unreadable: {exc})")
                continue
            tried.append(path)
            if self._try(transport, user, key):
                return
        t = self.target
        port = f"-p {t.port} " if t.port != 22 else ""
        raise SSHAuthenticationError(
            f"host {self.shown}: authentication refused for user {user!r} at {t.hostname} "
            f"port {t.port}; tried: {', '.join(tried) or 'no key (no agent, no identity file)'}. "
            f"Install your public key there (`ssh-copy-id {port}{user}@{t.hostname}`), or name "
            "the right key with identity=... in the hosts file (or IdentityFile in ~/.ssh/config)"
        )

    def _try(self, transport: paramiko.Transport, user: str, key: paramiko.PKey) -> bool:
        try:
            transport.auth_publickey(user, key)
        except paramiko.AuthenticationException:
            return False
        except (paramiko.SSHException, OSError) as exc:
            raise HostUnreachableError(
                f"host {self.shown}: the connection ended during authentication ({exc})"
            ) from None
        return transport.is_authenticated()

    # -- using it -----------------------------------------------------------------------------

    def open(self, command: str) -> paramiko.Channel:
        """A session channel running ``command`` (no pty, so no SIGHUP: the command must end
        by itself when its stdin closes)."""
        try:
            channel = self.transport.open_session(timeout=self.options.timeout)
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise SSHError(f"host {self.shown}: cannot run a command over SSH: {exc}") from None
        return channel

    def run(self, command: str, stdin: bytes = b"", timeout: float | None = None) -> Result:
        """Run ``command``, feed it ``stdin``, wait for its end; its status and output."""
        channel = self.open(command)
        deadline = time.monotonic() + (timeout or self.options.timeout * 6)
        try:
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            out, err = bytearray(), bytearray()
            while True:  # stdout until its end; stderr drained on the way (a full window
                remaining = deadline - time.monotonic()  # would stall the command)
                if remaining <= 0:
                    raise SSHError(f"host {self.shown}: `{command[:80]}` did not end in time")
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(1 << 16)
                channel.settimeout(min(remaining, 0.2))
                try:
                    chunk = channel.recv(1 << 16)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                out += chunk
            if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
                raise SSHError(f"host {self.shown}: `{command[:80]}` did not end in time")
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(1 << 16)
            return Result(channel.recv_exit_status(), bytes(out), bytes(err))
        finally:
            channel.close()

    def sftp(self) -> paramiko.SFTPClient:
        try:
            client = paramiko.SFTPClient.from_transport(self.transport)
        except (paramiko.SSHException, OSError) as exc:
            raise SSHError(f"host {self.shown}: SFTP is not available: {exc}") from None
        assert client is not None
        return client

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.keepalive.close()
        self.transport.close()
        if self._jump is not None:
            self._jump.close()

    def drop_in_child(self) -> None:
        """In a forked child: close this process's copy of the connection's socket (sending
        nothing), so that the parent's end is the connection's end."""
        self._closed = True
        self.keepalive.close()
        if isinstance(self.transport.sock, socket.socket):
            self.transport.sock.close()
        if self._jump is not None:
            self._jump.drop_in_child()

    def __enter__(self) -> SSHConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def quote(argv: list[str]) -> str:
    """A POSIX shell command line running ``argv`` (the remote login shell parses it)."""
    return " ".join(shlex.quote(a) for a in argv)
