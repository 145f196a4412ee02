"""The Ray carrier: each actor is a Ray actor; ``parl.connect("ray")`` or ``"ray://head:10001"``.

``parl.connect`` builds one per process. It joins the Ray this process already initialised
(``ray.init`` called by the user: that Ray is left running at the end), or calls ``ray.init``
itself (starting or joining a local Ray, or a Ray Client connection for ``ray://``) and shuts
it down at ``parl.disconnect``. An actor asks Ray for ``num_cpus`` CPUs and ``num_gpus`` GPUs
(``n_gpu``) when the decorator gives them, else Ray's default for actors (a node with a CPU to
schedule it on, none held while it runs), and for ``max_memory`` as Ray's ``memory``
resource; creation waits up to ``slot_timeout`` seconds for Ray to place and start it.

A thin adapter rather than Ray for placement plus our TCP carrier for calls: Ray already gives
ordered calls per actor, futures (object refs), failure detection and a zero-copy object store
for large arrays on the same node, so each proxy call is one Ray actor-method call
(:mod:`parl.ray.connection`) and nothing of ours runs beside Ray's processes.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import psutil
import ray
from ray import exceptions as ray_errors
from ray.util.client import ray as ray_client

from parl.errors import ActorDiedError, ClusterError, DeploymentError
from parl.ray.code import CodeShipper
from parl.ray.connection import RayConnection
from parl.ray.host import ParlActor
from parl.wire.contract import RemoteOptions
from parl.workers import DEFAULT_STOP_TIMEOUT_S

DEFAULT_SLOT_TIMEOUT_S = 60.0
REAPER_JOIN_S = 10.0  # the most close() waits for a reaper thread's last pass
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
        stop_timeout: float = DEFAULT_STOP_TIMEOUT_S,
    ) -> None:
        self.address = address
        self.slot_timeout = slot_timeout
        self.stop_timeout = stop_timeout
        self._stopping: list[_Stopping] = []
        self._reaper: threading.Thread | None = None
        self._reapers: list[threading.Thread] = []  # every reaper thread started (see close)
        self._lock = threading.Lock()
        self._live = 0
        self._closed = False
        self._previous: RayCarrier | None = None  # the carrier whose Ray this one took over
        _check_not_forked()
        self._owned = self._take_over(address)
        if not self._owned and ray.is_initialized():
            _check_joinable(address)
        if not ray.is_initialized():
            _init(address, forward_output)
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
            self._previous = previous
            return True
        if previous.live_actors:
            raise ClusterError(
                f"this process has {previous.live_actors} actors on the Ray at "
                f"{previous.address!r}; close them (parl.close_actor) or call "
                f"parl.disconnect() before connecting to {address!r}"
            )
        previous.close()
        return False

    def create(self, class_name: str, options: RemoteOptions) -> RayConnection:
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
        ).remote(class_name, options.num_threads)
        where = handle.where.remote()
        done, _ = ray.wait([where], timeout=self.slot_timeout)
        if not done:
            message = self._not_placed(class_name, resources)  # before its resources are freed
            ray.kill(handle, no_restart=True)
            raise ClusterError(message)
        try:
            pid, host, node = ray.get(where)
        except ray_errors.RuntimeEnvSetupError as exc:
            raise DeploymentError(f"Ray could not set up the code of {class_name}: {exc}") from None
        except ray_errors.RayError as exc:
            raise ActorDiedError(f"actor {class_name} did not start on Ray: {exc}") from None
        label = f"{class_name} pid={pid}" + ("" if node == self._node_id else f" on {host}")
        with self._lock:
            self._live += 1
        local_pid = pid if node == self._node_id else None
        return RayConnection(handle, label, functools.partial(self._end, local_pid))

    def _not_placed(self, class_name: str, resources: dict[str, Any]) -> str:
        asked = ", ".join(f"{k}={v:g}" for k, v in resources.items() if v)
        if "num_cpus" not in resources:
            if "num_gpus" not in resources:
                default = (
                    "Ray's default CPU for actors (a node with a CPU to schedule it on, none "
                    "held while it runs)"
                )
            elif resources["num_gpus"]:
                default = "the CPU Ray holds for an actor that asks for GPUs only"
            else:  # a CPU actor that says num_gpus=0: Ray's rule holds a CPU for it all the same
                default = (
                    "the CPU Ray holds while it runs for an actor that gives num_gpus (0 too) "
                    "but not num_cpus: without num_gpus=0 (or with num_cpus=0 as well) it "
                    "holds none"
                )
            asked = f"{asked}, and {default}" if asked else default
        total, free = ray.cluster_resources(), ray.available_resources()
        have = ", ".join(
            f"{k} {free.get(k, 0):g} free of {total.get(k, 0):g}" for k in ("CPU", "GPU")
        )
        head = f"Ray did not start actor {class_name} within {self.slot_timeout:g} s: it asks for "
        if _placeable(resources, free, total):
            # placed, or placeable: the time went into starting its worker (a few seconds
            # with a new runtime_env), which slot_timeout counts too on Ray
            return (
                f"{head}{asked}, and the Ray cluster has {have}, so the actor was still "
                "starting (a new Ray worker process takes seconds to start); raise "
                "parl.connect(..., slot_timeout=...)"
            )
        return (
            f"{head}{asked}, and the Ray cluster has {have}; close other actors, add nodes, "
            "lower num_cpus / num_gpus / max_memory in @parl.remote_class, or raise "
            "parl.connect(..., slot_timeout=...)"
        )

    def _end(self, pid: int | None, handle: Any, graceful: bool) -> None:
        """End one actor: ``stop`` queued behind its calls (graceful), else ``ray.kill``.
        A stopping actor is killed once ``stop_timeout`` has passed (:meth:`_reap`)."""
        with self._lock:
            self._live -= 1
        if not ray.is_initialized():
            return
        if graceful:
            try:
                ref = handle.stop.remote()
            except Exception:  # noqa: BLE001 - Ray is shutting down: kill instead
                pass
            else:
                deadline = time.monotonic() + self.stop_timeout
                with self._lock:
                    self._stopping.append(_Stopping(ref, handle, pid, deadline))
                    if self._reaper is None:
                        self._reaper = threading.Thread(
                            target=self._reap_all, name="parl-ray-reaper", daemon=True
                        )
                        self._reaper.start()
                        self._reapers.append(self._reaper)
                return
        _kill(handle)

    def _reap_all(self) -> None:
        while self._reap(0.2):
            pass

    def _reap(self, timeout: float) -> bool:
        """Forget the stopping actors whose worker has ended, kill those past their
        deadline; whether some are still stopping (the reaper thread ends when none is)."""
        if not ray.is_initialized():
            # the user shut Ray down (ray.shutdown): its actors went with it, and a Ray call
            # now would start a new Ray only to fail on references of the old one
            with self._lock:
                self._stopping = []
                self._reaper = None
            return False
        with self._lock:
            stopping = list(self._stopping)
        if stopping and ray.is_initialized():
            refs = [item.ref for item in stopping]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
            if len(ready) < len(refs):
                ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=False)
            else:  # every stop ran: their workers are exiting (a poll, not a spin)
                time.sleep(min(timeout, 0.02))
        now = time.monotonic()
        ended = [item for item in stopping if item.done()]
        overdue = [item for item in stopping if item not in ended and now >= item.deadline]
        with self._lock:  # the reaper thread and close() both reap: each actor is claimed once
            overdue = [item for item in overdue if item in self._stopping]
            gone = ended + overdue
            self._stopping = [item for item in self._stopping if item not in gone]
            more = bool(self._stopping)
            if not more:
                self._reaper = None
        for item in overdue:
            log.warning("actor pid=%s did not end within stop_timeout: killed", item.pid)
            _kill(item.handle)
        return more

    def close(self) -> None:
        """Shut Ray down if this carrier started it (its actors end with it). Idempotent."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        while self._reap(0.2):  # the actors being stopped end first (bounded: stop_timeout)
            pass
        # a reaper thread may still be in its last pass (it took its list before this loop
        # emptied it): a Ray call of it after ray.shutdown below would start a new Ray (Ray's
        # auto-init), which a later parl.connect("ray") in this process then fails to init
        for thread in self._reapers:
            if thread is not threading.current_thread():
                thread.join(timeout=REAPER_JOIN_S)
        if RayCarrier._owner is self:
            RayCarrier._owner = None
        heir = self._heir() if self._owned else None
        if heir is not None:  # the actors of a carrier this one replaced keep their Ray
            heir._owned, self._owned = True, False
            RayCarrier._owner = heir
        if self._owned and ray.is_initialized():
            ray.shutdown()

    def _heir(self) -> RayCarrier | None:
        """The carrier this one took the Ray over from, if it still has live actors."""
        previous = self._previous
        while previous is not None and (previous._closed or not previous.live_actors):
            previous = previous._previous
        return previous

    @property
    def live_actors(self) -> int:
        return self._live

    @property
    def server_pid(self) -> int | None:
        return None  # Ray's processes are Ray's


class _Stopping(NamedTuple):
    """An actor asked to stop: ``ref`` of its ``stop`` call, its worker's pid on this node."""

    ref: Any
    handle: Any
    pid: int | None
    deadline: float

    def done(self) -> bool:
        ready, _ = ray.wait([self.ref], timeout=0, fetch_local=False)
        if not ready:
            return False
        return self.pid is None or not _running(self.pid)


_forked_from: int | None = None  # the parent's pid when this process was forked off a Ray driver


def _note_fork() -> None:
    """In a child forked off a Ray driver: Ray's own atexit ``ray.shutdown`` must not run
    there (it hangs the child's exit, its parent waiting for it)."""
    global _forked_from
    if ray.is_initialized():
        _forked_from = os.getppid()
        atexit.unregister(ray.shutdown)


os.register_at_fork(after_in_child=_note_fork)


def _check_not_forked() -> None:
    """Ray's driver state does not survive a fork: actors created in the child would hang,
    and shutting that Ray down from the child would end its parent's."""
    if _forked_from is not None and ray.is_initialized():
        raise ClusterError(
            f"this process (pid {os.getpid()}) is a fork of process {_forked_from}, which is "
            "connected to Ray, and Ray cannot be used from a forked child: create the actors "
            "in the parent, or start the child with multiprocessing's 'spawn' start method"
        )


def _check_joinable(address: str) -> None:
    """``parl.connect("ray://...")`` while this process is already connected to a local
    Ray (a ``ray.init`` of the user's) would silently put the actors there."""
    if address != "ray" and not ray_client.is_connected():
        raise ClusterError(
            f"this process already initialised a local Ray (ray.init), so "
            f"parl.connect({address!r}) cannot reach another one: parl.connect('ray') puts "
            "the actors on the Ray you initialised, or call ray.shutdown() first"
        )


LOOPBACK = "127.0.0.1"  # where a Ray that parl.connect("ray") starts puts its node
CLIENT_ATTEMPTS = 3  # Ray Client sessions whose server side failed to start, tried again


def _init(address: str, forward_output: bool) -> None:
    """``ray.init`` for ``address``. A Ray Client head sometimes fails to start the server
    process of a new session ("Initialization failure from server": the process it spawned
    died at once); that is the head's transient failure, so it is tried again."""
    if address == "ray" and _starts_a_new_ray():
        _start_on_loopback(forward_output)
        return
    target = None if address == "ray" else address
    attempts = CLIENT_ATTEMPTS if address.startswith("ray://") else 1
    for attempt in range(1, attempts + 1):
        try:
            ray.init(address=target, log_to_driver=forward_output)
            return
        except Exception as exc:  # Ray raises several kinds
            if attempt < attempts and "Initialization failure from server" in str(exc):
                log.warning(
                    "Ray Client at %s failed to start a session (attempt %d of %d): %s",
                    address, attempt, attempts, str(exc).strip().splitlines()[-1],
                )  # fmt: skip
                if ray.is_initialized():
                    ray.shutdown()
                time.sleep(1.0)
                continue
            raise ClusterError(f"cannot start or reach Ray at {address!r}: {exc}") from exc


def _starts_a_new_ray() -> bool:
    """Whether a plain ``ray.init()`` would start a Ray rather than join one (``RAY_ADDRESS``,
    or the Ray that ``ray start`` left running on this machine), by Ray's own rule."""
    from ray._private import services

    try:
        # Ray annotates the address as str; None is what ray.init() itself passes for "none given"
        return services.canonicalize_bootstrap_address(None) is None  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - Ray's ray.init will report what is wrong
        return False


def _start_on_loopback(forward_output: bool) -> None:
    """A plain ``ray.init()`` starting a new Ray, with its node on loopback: left to itself,
    Ray on Linux takes the machine's outward address for a one-machine Ray, listens on every
    interface and sends its traffic there."""
    # Ray replaces a loopback node address by the outward one unless its "cluster" switch is off
    # (its default on macOS and Windows); the switch is read in this process and, through the
    # environment, in the processes Ray starts. It is put back afterwards, so that a later
    # ray.init of a node of a real cluster is not pinned to loopback.
    from ray._private import ray_constants

    saved = (
        ray_constants.ENABLE_RAY_CLUSTER,
        os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR),
    )
    ray_constants.ENABLE_RAY_CLUSTER = False
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    try:
        ray.init(address="local", _node_ip_address=LOOPBACK, log_to_driver=forward_output)
    except Exception as exc:  # Ray raises several kinds
        raise ClusterError(f"cannot start or reach Ray at 'ray': {exc}") from exc
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved[0]
        if saved[1] is None:
            os.environ.pop(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, None)
        else:
            os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = saved[1]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill(handle: Any) -> None:
    try:
        if ray.is_initialized():
            ray.kill(handle, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone, or Ray shut down meanwhile
        pass


def _resources(options: RemoteOptions) -> dict[str, Any]:
    """Ray's actor options for the decorator's ``num_cpus``, ``num_gpus``/``n_gpu`` and
    ``max_memory`` (megabytes; Ray's ``memory`` is in bytes).

    Only what the decorator asks for is passed: an actor that asks for nothing gets Ray's
    default for actors (a node with a CPU to schedule it on, none held while it runs), as a
    plain ``@ray.remote`` actor does, so that a script runs as many actors on Ray as on local
    workers (``num_cpus=1`` holds a CPU for the actor's whole life: a third actor on 2 CPUs
    would wait for a free one). Any CPU or GPU count given, ``num_gpus=0`` included, makes Ray
    hold what is asked for (and one CPU unless ``num_cpus`` says otherwise) while the actor
    lives; ``memory`` does not."""
    resources: dict[str, Any] = {}
    num_cpus = options.num_cpus
    if num_cpus is not None:
        resources["num_cpus"] = num_cpus
    num_gpus = options.num_gpus
    if num_gpus is None:
        num_gpus = options.n_gpu or None
    if num_gpus is not None:
        resources["num_gpus"] = num_gpus
    max_memory = options.max_memory
    if max_memory:
        resources["memory"] = int(max_memory * 2**20)
    return resources


def _placeable(resources: dict[str, Any], free: dict[str, float], total: dict[str, float]) -> bool:
    """Whether Ray could place an actor with ``resources`` now, by the cluster's totals.

    What the actor holds while it runs must be free: what it asks for, and one CPU when it
    asks for GPUs but no CPUs (Ray holds one then). One that asks for neither holds nothing,
    and Ray only needs a node with a CPU at all to schedule it on (measured on Ray 2.60: such
    an actor starts while every CPU is held; on a cluster of zero-CPU nodes it never does)."""
    cpus = resources.get("num_cpus", 1 if "num_gpus" in resources else 0)
    held = {"CPU": cpus, "GPU": resources.get("num_gpus", 0), "memory": resources.get("memory", 0)}
    if not all(free.get(name, 0) >= need for name, need in held.items() if need):
        return False
    if "num_cpus" not in resources and "num_gpus" not in resources:
        return total.get("CPU", 0) >= 1
    return True
