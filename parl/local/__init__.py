"""The local carrier: actors in worker processes on this machine (:mod:`parl.workers`), their
arrays through shared memory (:mod:`parl.shm`). ``parl.remote`` uses it when no cluster, hosts
file or Ray address was given to :func:`parl.connect`."""

from __future__ import annotations

from parl.local.carrier import DEFAULT_LINGER_S, DEFAULT_STOP_TIMEOUT_S, LocalCarrier

__all__ = ["DEFAULT_LINGER_S", "DEFAULT_STOP_TIMEOUT_S", "LocalCarrier"]
