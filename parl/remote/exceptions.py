"""PARL 2.x's ``parl.remote.exceptions`` import path, mapped onto this package's exceptions.

Code written for PARL imports these names; each is the exception of :mod:`parl.errors` (or the
built-in exception) raised here in the same situation:

``RemoteError``: :class:`parl.RemoteError`, a call that failed without an exception of user
code to show: the actor died (:class:`parl.ActorDiedError`), was closed
(:class:`parl.ActorClosedError`), or its reply could not be loaded. An exception raised by
the actor's own code is re-raised at the call site as itself (a ``ZeroDivisionError`` stays
one, with the remote traceback attached), not as ``RemoteError``, and the actor stays usable.

``RemoteSerializeError``: :class:`parl.errors.SerializationError`, an argument or attribute
value that cannot be pickled (also a ``TypeError``).

``RemoteDeserializeError``: :class:`parl.errors.DeserializationError`, a reply that cannot
be unpickled in the caller.

``RemoteAttributeError``: ``AttributeError``, which the actor's missing attribute raises
at the call site as itself.

``ResourceError``: :class:`parl.errors.ResourceError`, no free cluster slot in time.

``FutureObjectEmpty``: :class:`parl.remote.future.FutureEmpty`, raised by
``future.get_nowait()``, ``future.get(block=False)`` and ``future.get(timeout=s)`` while the
result is not in.

``FutureFunctionError``: :class:`parl.RemoteError`. A ``wait=False`` call whose method
raised re-raises that exception from ``get()``, as a ``wait=True`` call would; a dead actor
raises :class:`parl.ActorDiedError`, a ``RemoteError``.

``FutureGetRepeatedlyError``: defined for ``except`` clauses only, never raised: ``get()``
may be called again on a future and returns the same result.
"""

from __future__ import annotations

from parl.errors import (
    DeserializationError,
    ParlError,
    RemoteError,
    ResourceError,
    SerializationError,
)
from parl.remote.future import FutureEmpty

RemoteSerializeError = SerializationError
RemoteDeserializeError = DeserializationError
RemoteAttributeError = AttributeError
FutureObjectEmpty = FutureEmpty
FutureFunctionError = RemoteError


class FutureGetRepeatedlyError(ParlError):
    """Never raised: a future's ``get()`` may be called again (see the module docstring)."""


__all__ = [
    "FutureFunctionError",
    "FutureGetRepeatedlyError",
    "FutureObjectEmpty",
    "RemoteAttributeError",
    "RemoteDeserializeError",
    "RemoteError",
    "RemoteSerializeError",
    "ResourceError",
]
