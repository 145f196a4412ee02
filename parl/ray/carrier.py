"""The Ray carrier: each actor is a Ray actor; ``parl.connect("ray")`` or ``"ray://head:10001"``.

``parl.connect`` builds one per process. It joins the Ray this process already initialised
(``ray.init`` called by the user: that Ray is left running at the end), or calls ``ray.init``
itself (starting or joining a local Ray, or a Ray Client connection for ``ray://``) and shuts
it down at ``parl.disconnect``. An actor asks Ray for ``num_cpus`` CPUs (default 1),
``num_gpus`` GPUs (default ``n_gpu``) and ``max_memory`` as Ray's ``memory`` resource; creation
waits up to ``slot_timeout`` seconds for Ray to place and start it.

A thin adapter rather than Ray for placement plus our TCP carrier for calls: Ray already gives
ordered calls per actor, futures (object refs), failure detection and a zero-copy object store
for large arrays on the same node, so each proxy call is one Ray actor-method call
(:mod:`parl.ray.connection`) and nothing of ours runs beside Ray's processes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import ray
from ray import exceptions as ray_errors

from parl.errors import ActorDiedError, ClusterError, DeploymentError
from parl.ray.code import CodeShipper
from parl.ray.connection import RayConnection
from parl.ray.host import ParlActor

DEFAULT_SLOT_TIMEOUT_S = 60.0
log = logging.getLogger("parl.ray")


class RayCarrier:
    """Creates actors as Ray actors. ``address``: ``"ray"`` (``ray.init()``: the local Ray, or
    the one ``RAY_ADDRESS`` names) or ``"ray://host:port"`` (Ray Client).
    ``forward_output``: Ray's ``log_to_driver`` when this carrier starts Ray.
    ``distributed_files``: globs of files to deploy besides the project folder's own."""

    def __init__(
        self,
        address: str = "ray",
        forward_output: bool = True,
        slot_timeout: float = DEFAULT_SLOT_TIMEOUT_S,
        distributed_files: Sequence[str] = (),
    ) -> None:
        self.address = address
        self.slot_timeout = slot_timeout
        self._owned = self._take_over(address)
        if not ray.is_initialized():
            target = None if address == "ray" else address
            try:
                ray.init(address=target, log_to_driver=forward_output)
            except Exception as exc:  # noqa: BLE001 - Ray raises several kinds
                raise ClusterError(f"cannot start or reach Ray at {address!r}: {exc}") from exc
            self._owned = True
        if self._owned:
            RayCarrier._owner = self
        self._node_id = ray.get_runtime_context().get_node_id()
        try:
            self._code = CodeShipper(distributed_files)
        except BaseException:
            self.close()
            raise
        self._actor_class: Any = ray.remote(ParlActor)
        self._lock = threading.Lock()
        self._live = 0
        self._closed = False

    _owner: RayCarrier | None = None  # the carrier whose ray.init is the live one

    def _take_over(self, address: str) -> bool:
        """Whether this carrier now owns (will shut down) the Ray of this process.

        ``parl.connect("ray")`` again replaces the previous carrier but must not lose its Ray:
        the new carrier takes the ownership over, so that retiring the old one (once its
        actors are gone) leaves Ray running. Another address needs a fresh ``ray.init``: the
        old Ray is shut down first, which is refused while actors of it are alive."""
        previous = RayCarrier._owner
        if previous is None or previous._closed or not ray.is_initialized():
            return False  # a Ray the user initialised is joined, never owned
        if previous.address == address:
            previous._owned = False
            return True
        if previous.live_actors:
            raise ClusterError(
                f"this process has {previous.live_actors} actors on the Ray at "
                f"{previous.address!r}; close them (parl.close_actor) or call "
                f"parl.disconnect() before connecting to {address!r}"
            )
        previous.close()
        return False

    def create(self, class_name: str, options: dict[str, Any]) -> RayConnection:
        """Start a Ray actor for ``class_name`` and wait until Ray has placed and started it;
        its connection (no INIT sent)."""
        if self._closed:
            raise ClusterError("the connection to Ray is closed (parl.disconnect)")
        resources = _resources(options)
        handle = self._actor_class.options(
            **resources,
            runtime_env=self._code.runtime_env(),
            max_restarts=0,
            max_task_retries=0,
        ).remote(class_name, options.get("num_threads"))
        where = handle.where.remote()
        done, _ = ray.wait([where], timeout=self.slot_timeout)
        if not done:
            ray.kill(handle, no_restart=True)
            raise ClusterError(self._not_placed(class_name, resources))
        try:
            pid, host, node = ray.get(where)
        except ray_errors.RuntimeEnvSetupError as exc:
            raise DeploymentError(f"Ray could not set up the code of {class_name}: {exc}") from None
        except ray_errors.RayError as exc:
            raise ActorDiedError(f"actor {class_name} did not start on Ray: {exc}") from None
        label = f"{class_name} pid={pid}" + ("" if node == self._node_id else f" on {host}")
        with self._lock:
            self._live += 1
        return RayConnection(handle, label, self._actor_gone)

    def _not_placed(self, class_name: str, resources: dict[str, Any]) -> str:
        asked = ", ".join(f"{k}={v:g}" for k, v in resources.items() if v) or "nothing"
        total, free = ray.cluster_resources(), ray.available_resources()
        have = ", ".join(
            f"{k} {free.get(k, 0):g} free of {total.get(k, 0):g}" for k in ("CPU", "GPU")
        )
        return (
            f"Ray did not start actor {class_name} within {self.slot_timeout:g} s: it asks for "
            f"{asked}, and the Ray cluster has {have}; close other actors, add nodes, lower "
            "num_cpus / num_gpus / max_memory in @parl.remote_class, or raise "
            "parl.connect(..., slot_timeout=...)"
        )

    def _actor_gone(self) -> None:
        with self._lock:
            self._live -= 1

    def close(self) -> None:
        """Shut Ray down if this carrier started it (its actors end with it). Idempotent."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        if RayCarrier._owner is self:
            RayCarrier._owner = None
        if self._owned and ray.is_initialized():
            ray.shutdown()

    @property
    def live_actors(self) -> int:
        return self._live

    @property
    def server_pid(self) -> int | None:
        return None  # Ray's processes are Ray's


def _resources(options: dict[str, Any]) -> dict[str, Any]:
    """Ray's actor options for the decorator's ``num_cpus``, ``num_gpus``/``n_gpu`` and
    ``max_memory`` (megabytes; Ray's ``memory`` is in bytes)."""
    num_cpus = options.get("num_cpus")
    num_gpus = options.get("num_gpus")
    resources: dict[str, Any] = {
        "num_cpus": 1 if num_cpus is None else num_cpus,
        "num_gpus": options.get("n_gpu") or 0 if num_gpus is None else num_gpus,
    }
    max_memory = options.get("max_memory")
    if max_memory:
        resources["memory"] = int(max_memory * 2**20)
    return resources
