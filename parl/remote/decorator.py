"""``@parl.remote_class``: the decorator that makes a class's instances live in worker processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parl.remote.proxy import RemoteProxy, build_proxy_class
from parl.wire.contract import RemoteOptions

_VALID_KEYWORDS = ("max_memory", "num_threads", "wait", "n_gpu", "num_cpus", "num_gpus")


def remote_class(cls: Any = None, /, **kwargs: Any) -> Any:
    """Decorate a class so that each instance is an actor in its own worker process.

    Use it bare (``@parl.remote_class``) or with keywords (``@parl.remote_class(wait=False)``).
    Where the worker runs is chosen by :func:`parl.connect`.

    Args:
        cls: The class (given by the bare form).
        wait: True (default): methods return their result. False: they return a
            :class:`parl.Future` at once (``get(block=True, timeout=None)``, ``get_nowait()``,
            ``empty()``), so that calls on several actors run in parallel.
        max_memory: Megabytes of private memory after which the worker is stopped; later
            calls raise :class:`parl.ActorMemoryError`. Default: no limit. On Ray it is also
            reserved as Ray's ``memory`` resource.
        num_threads: Intra-op threads of torch, OpenMP, MKL and OpenBLAS in each worker
            (default 1), so that actors do not oversubscribe the cores. Without it, an
            ``OMP_NUM_THREADS`` set in the caller's environment gives the count.
        n_gpu: (Cluster.) The actor goes to a host with this many free GPUs (``xparl start
            --gpu_cluster --gpu 0,1``, ``xparl connect --gpu 0``) and sees only them in
            ``CUDA_VISIBLE_DEVICES``; without it the actor takes a CPU slot and sees no GPU.
            Local workers ignore it. Default 0.
        num_cpus: (Ray.) CPUs Ray reserves for the actor, fractions allowed (default 1).
        num_gpus: (Ray.) GPUs Ray reserves for the actor (default ``n_gpu``). Local workers
            and cluster slots ignore ``num_cpus`` and ``num_gpus``, so one class runs
            unchanged on every carrier.

    Returns:
        The proxy class (``._original`` is the undecorated class), or, called with keywords
        only, a decorator that makes it. A subclass of a remote class is a remote class too,
        with its base's options or those given here.

    Raises:
        TypeError: An unknown keyword, a keyword's value of the wrong type, something other
            than a class, or a class that is already remote.
        ValueError: A keyword's value out of its range (e.g. ``max_memory=0``).
    """
    unknown = sorted(set(kwargs) - set(_VALID_KEYWORDS))
    if unknown:
        raise TypeError(
            f"remote_class() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
            f"valid keywords are: {', '.join(_VALID_KEYWORDS)}"
        )
    options = RemoteOptions(**kwargs)
    if cls is None:
        return _decorator(options)
    return _decorate(cls, options)


def _decorator(options: RemoteOptions) -> Callable[[Any], type]:
    def decorate(cls: Any) -> type:
        return _decorate(cls, options)

    return decorate


def _decorate(cls: Any, options: RemoteOptions) -> type:
    if not isinstance(cls, type):
        raise TypeError(
            f"@parl.remote_class decorates a class, got {type(cls).__name__} {cls!r}; "
            "put it on a class definition (or use @parl.remote_class(wait=..., max_memory=...))"
        )
    if issubclass(cls, RemoteProxy):
        if cls.__dict__.get("_parl_decorated"):
            raise TypeError(f"{cls.__qualname__} is already a remote class")
        # a subclass of a remote class (already remote with its base's options): new options
        return build_proxy_class(cls._original, options, base=cls)
    return build_proxy_class(cls, options)
