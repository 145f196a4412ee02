"""The protocol below every carrier: framing, serialization, messages and the actor loop.

Nothing here knows where a peer runs. A carrier (``parl.local`` for local workers,
``parl.cluster`` over TCP) supplies a connected stream socket and a :class:`~parl.wire.protocol.Link` that decides
whether a large buffer travels inline or as a reference to shared memory.
"""
