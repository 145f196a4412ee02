"""The exception tree of parl, rooted at :class:`ParlError`.

Every class here pickles (``super().__init__`` receives all arguments), so an error raised in an
actor process can travel back to the caller unchanged.
"""

from __future__ import annotations


class ParlError(Exception):
    """Base class of every error raised by parl itself."""


class RemoteError(ParlError):
    """An actor call failed in a way that cannot be shown as the original exception.

    ``type_name`` is the qualified name of the remote exception type (empty when the failure is
    not an exception raised by user code), ``remote_traceback`` the formatted remote traceback.
    """

    def __init__(self, message: str, type_name: str = "", remote_traceback: str = "") -> None:
        super().__init__(message, type_name, remote_traceback)
        self.message = message
        self.type_name = type_name
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        return self.message


class ActorDiedError(RemoteError):
    """The actor is gone: its worker process ended (the message gives the exit status or
    signal), or the connection to its host was lost (the message names the host); every
    pending and later call on the actor raises this."""


class ActorMemoryError(ActorDiedError):
    """The actor's worker was stopped because it exceeded its ``max_memory`` limit."""


class DeserializationError(RemoteError):
    """The reply of an actor call arrived but could not be unpickled here (a class that this
    process cannot import, a value that fails to load)."""


class ActorClosedError(RemoteError):
    """A call was made on an actor that was closed by the caller."""


class SerializationError(ParlError, TypeError):
    """A value could not be pickled (also a ``TypeError``, as the call site expects)."""


SHARED_HANDLE_HINT = (
    "parl.shm arrays are shared only between a process and its local worker processes; this "
    "one would cross to a process that cannot map its memory (an actor on a cluster, on SSH "
    "hosts or on Ray, or the caller of such an actor), arrive there as a copy, and what either "
    "side writes into it would be lost. To hand the data over once, send a copy (np.array(a)): "
    "the other side gets an ordinary array of its own; to get results back, return them from "
    "the method instead of writing them into a shared array"
)


class SharedHandleError(SerializationError):
    """A ``parl.shm`` array (a shared handle, or a view of one) was about to cross to a process
    that cannot share memory with this one: an actor on a cluster, on SSH hosts or on Ray
    (as an argument, an attribute value or a constructor argument), or back from such an actor
    (a return value). It would arrive as a copy, silently cutting the two sides apart, so it
    is refused before anything is sent; the actor stays usable. Also a ``TypeError``."""

    def __init__(self, message: str = SHARED_HANDLE_HINT) -> None:
        super().__init__(message)


class ActorForkedError(ParlError):
    """An actor was used in a forked child of the process that created it.

    An actor belongs to the process that created it; a child made by ``os.fork`` (or a
    ``multiprocessing`` fork) must create its own actors.
    """


class WeightsMismatchError(ParlError, ValueError, RuntimeError):
    """Weights given to ``set_weights`` (or found in a checkpoint) do not fit the model: a name
    is missing or unexpected, or a shape differs.

    Also a ``ValueError`` (bad argument) and a ``RuntimeError``, which is what PARL 2.x's torch
    ``set_weights`` raised (``load_state_dict``), so ``except RuntimeError`` in PARL code works.
    """


class ClusterError(ParlError):
    """A cluster (``xparl start``, ``parl.connect("host:port")``) cannot do what was asked: no
    master at the address, no free slot in time, a host agent that went away."""


class ResourceError(ClusterError):
    """The cluster had no free slot (or host with the GPUs asked for) for a new actor within
    ``parl.connect(..., slot_timeout=...)`` seconds."""


class AuthenticationError(ClusterError):
    """A cluster peer did not prove that it holds the cluster secret (or this side has none)."""


class DeploymentError(ClusterError):
    """The caller's code could not be packed, sent or unpacked on a host (an unsafe archive, a
    project above the size cap)."""


class VersionMismatchError(ClusterError):
    """The caller and a host run different versions of Python or of a package that must match
    (parl, numpy, torch, cloudpickle); the message shows both sides."""


class HostsFileError(ParlError, ValueError):
    """A hosts file (``parl.connect(hosts=...)``) has a bad line: the message names the file,
    the line number and what is wrong."""


class SSHError(ClusterError):
    """The SSH launcher could not start a host agent on a listed host; the message names the
    host and what to do."""


class HostUnreachableError(SSHError):
    """No SSH server answered at the host's address (name unknown, refused, timed out)."""


class SSHAuthenticationError(SSHError):
    """The SSH server refused every key (agent and identity files) offered for the user."""


class HostKeyError(SSHError):
    """The host's key is not in known_hosts (unknown) or differs from the one there (changed)."""


class RemoteEnvironmentError(SSHError):
    """The host's Python is missing, or lacks (or has other versions of) a needed package."""


class ActorClosing(BaseException):
    """Raised in a worker's main thread when its actor is closed while the worker serves it
    (SIGTERM), so that a busy method is interrupted with its ``finally`` blocks run. Not a
    :class:`ParlError`: like :class:`KeyboardInterrupt`, a bare ``except Exception`` in the
    method does not swallow it."""
