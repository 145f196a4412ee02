"""State files of the cluster processes this user started: ``~/.parl/clusters/*.json``.

Each master (``xparl start``) and host agent (``xparl connect``) writes one with its pid, the
process's start time and the cluster it belongs to; ``xparl status`` and ``xparl stop`` find
processes through them, never by process name, and check the start time before signalling a
pid (a reused pid is someone else's process).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

import psutil


@dataclass
class ProcessState:
    role: str  # "master" or "agent"
    pid: int
    started: float  # psutil's create_time of the process
    address: str  # where it listens
    cluster: str  # the master's address
    cluster_port: int
    log: str
    master_slots: bool = False  # the host agent of the master's machine (``xparl start``)

    @property
    def path(self) -> str:
        return os.path.join(state_dir(), f"{self.role}-{self.pid}.json")

    def alive(self) -> bool:
        try:
            process = psutil.Process(self.pid)
            # a zombie is dead (killed, not yet reaped by a parent that may never do so)
            return same_process(process, self.started) and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


SAME_START_S = 2.0


def same_process(process: psutil.Process, started: float) -> bool:
    """Whether ``process`` is the daemon a state file recorded, not another process that got
    its pid: it started when the file says and runs a daemon module of parl
    (``parl.cluster.daemon``, or the master that launches hosts over SSH). psutil derives
    the start from the boot time, which moves when the clock is stepped (NTP on a VM): allow
    ``SAME_START_S`` (a pid is not reused that fast)."""
    try:
        if abs(process.create_time() - started) >= SAME_START_S:
            return False
        return any(_daemon_module(part) for part in process.cmdline())
    except psutil.Error:
        return False


def _daemon_module(word: str) -> bool:
    """``parl.<package>.daemon``: the module a daemon of parl runs as (``python -m``)."""
    parts = word.split(".")
    return len(parts) == 3 and parts[0] == "parl" and parts[2] == "daemon"


def parl_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".parl")


def state_dir() -> str:
    return os.path.join(parl_dir(), "clusters")


def write(state: ProcessState) -> None:
    os.makedirs(state_dir(), mode=0o700, exist_ok=True)
    tmp = state.path + ".tmp"
    with open(tmp, "w") as file:
        json.dump(asdict(state), file)
    os.replace(tmp, state.path)


def remove(state: ProcessState) -> None:
    try:
        os.unlink(state.path)
    except FileNotFoundError:
        pass


def own(pid: int | None = None) -> ProcessState:
    """A state for this process (``pid``) with its start time filled in; other fields empty."""
    pid = pid or os.getpid()
    return ProcessState("", pid, psutil.Process(pid).create_time(), "", "", 0, "")


def read_all() -> list[ProcessState]:
    """Every state file of a live process; files of processes that are gone are removed."""
    found = []
    try:
        names = sorted(os.listdir(state_dir()))
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(state_dir(), name)
        try:
            with open(path) as file:
                state = ProcessState(**json.load(file))
        except (OSError, ValueError, TypeError):
            continue
        if state.alive():
            found.append(state)
        else:
            remove(state)
    return found
