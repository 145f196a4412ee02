"""``@parl.remote_class``: the decorator that makes a class's instances live in worker processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parl.remote.proxy import RemoteOptions, RemoteProxy, build_proxy_class

_VALID_KEYWORDS = ("max_memory", "num_threads", "wait", "n_gpu", "num_cpus", "num_gpus")


def remote_class(cls: Any = None, /, **kwargs: Any) -> Any:
    """Decorate a class so that each instance is an actor in its own worker process.

    Use bare (``@parl.remote_class``) or with keywords:

    ``wait`` (default True): methods return their result; with ``wait=False`` they return a
    :class:`parl.Future` at once (``get(block=True, timeout=None)``, ``get_nowait()``,
    ``empty()``), so calls on several actors run in parallel.

    ``max_memory`` (megabytes, default unlimited): the worker is stopped when its private
    memory exceeds this; calls then raise :class:`parl.ActorMemoryError`.

    ``num_threads`` (default 1): intra-op threads of torch, OpenMP, MKL and OpenBLAS in each
    worker, so that actors do not oversubscribe the cores. Without it, a caller environment
    that sets ``OMP_NUM_THREADS`` gives that count instead.

    ``n_gpu`` (default 0): on a cluster, the actor goes to a host with this many free GPUs
    (``xparl start --gpu_cluster --gpu 0,1``, ``xparl connect --gpu 0``) and sees only them in
    ``CUDA_VISIBLE_DEVICES``; an actor without it takes a CPU slot and sees no GPU. Local
    workers ignore it.

    ``num_cpus`` (default 1) and ``num_gpus`` (default ``n_gpu``): on Ray
    (``parl.connect("ray")``), the resources Ray reserves for the actor (fractions allowed);
    ``max_memory`` is reserved there as Ray's ``memory`` resource. Local workers and cluster
    slots ignore ``num_cpus`` and ``num_gpus`` (a cluster actor takes one slot; GPUs there are
    ``n_gpu``'s), so one class runs unchanged on every carrier.

    The decorated name is a proxy class; ``._original`` is the undecorated class. A subclass
    of a remote class is a remote class too (with its base's options, or those given here).
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
