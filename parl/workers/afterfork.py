"""What a worker forked from the fork server resets before any user code runs.

A fork copies the fork server's whole state; three parts of it must not be shared:

- random streams: ``random``, numpy's global generator and torch's would otherwise give every
  actor the same numbers (the same network initialisation, the same exploration);
- exit handlers: those the fork server registered belong to it (a handler that removes a file
  the server made would run in each worker); a worker runs only its own when it ends;
- thread counts: torch and numpy's OpenBLAS start one thread per core in every worker, so a
  few actors oversubscribe the machine; a worker gets ``num_threads`` (default 1).

Python's hash seed is per interpreter and therefore the same in every worker (as in any forked
child); it is left alone.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import random
import sys
import weakref
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
DEFAULT_NUM_THREADS = 1
_OPENBLAS_SETTERS = (  # as builds name it: plain, 64-bit integers, numpy's own wheels
    "openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "scipy_openblas_set_num_threads64_",
)


def fresh_random_streams() -> None:
    """Reseed the generators already imported from the operating system's entropy.

    Modules imported later in the worker seed themselves from fresh entropy (numpy's and
    torch's generators do so when they are first imported)."""
    random.seed()
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        np_random.seed()
    torch = sys.modules.get("torch")
    if torch is not None and callable(getattr(torch, "seed", None)):
        torch.seed()


def own_exit_handlers() -> None:
    """Drop the fork server's exit handlers, keeping the mechanisms every process has.

    ``atexit`` starts empty again; ``weakref.finalize`` objects the server made are not run at
    the worker's end, while those the worker makes are; ``logging`` and ``multiprocessing``,
    when the server imported them, get back the handler they register at import."""
    atexit._clear()
    finalize: Any = weakref.finalize
    for info in getattr(finalize, "_registry", {}).values():
        info.atexit = False
    finalize._registered_with_atexit = False  # the next finalize() registers its handler
    logging = sys.modules.get("logging")
    if logging is not None:
        atexit.register(logging.shutdown)
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None and hasattr(mp_util, "_exit_function"):
        atexit.register(mp_util._exit_function)


def limit_threads(requested: int | None) -> int:
    """Give this worker ``requested`` intra-op threads (torch, OpenMP, MKL, OpenBLAS).

    ``None`` (the default): the caller's ``OMP_NUM_THREADS`` when it sets one, else 1. An
    explicit count overrides the environment. Returns the count applied."""
    from_env = _positive_int(os.environ.get("OMP_NUM_THREADS")) if requested is None else None
    count = from_env or requested or DEFAULT_NUM_THREADS
    if from_env is None:
        for name in THREAD_VARIABLES:  # read by libraries that start their threads later
            os.environ[name] = str(count)
    if count != 1:  # the fork server's own OpenBLAS has one thread (see server_environment)
        _limit_openblas(count)
    torch = sys.modules.get("torch")
    if torch is not None:  # preloaded by the fork server: it sized its pool there
        torch.set_num_threads(count)
    else:  # torch would cap the environment's count at the number of cores
        after_import("torch", lambda module: module.set_num_threads(count))
    return count


def server_environment(env: dict[str, str]) -> dict[str, str]:
    """The fork server's environment: libraries it loads start with one thread, and so without
    a pool of threads to stop or copy in each worker (numpy's OpenBLAS, torch when preloaded);
    a worker that wants more raises its own count. Workers get the caller's environment."""
    return {**env, **{name: "1" for name in THREAD_VARIABLES}}


def _limit_openblas(count: int) -> None:
    """numpy's OpenBLAS sized its thread pool when the fork server imported numpy, before any
    environment variable of ours: tell the loaded library itself (well under a millisecond)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(maxsplit=5)[-1].strip() for line in maps if "openblas" in line}
    except OSError:
        return
    for path in paths:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _OPENBLAS_SETTERS:
            setter = getattr(library, name, None)
            if setter is not None:
                setter(count)
                break


def _positive_int(text: str | None) -> int | None:
    try:
        value = int(text) if text is not None else 0
    except ValueError:
        return None
    return value if value > 0 else None


def after_import(name: str, action: Callable[[ModuleType], object]) -> None:
    """Run ``action(module)`` right after the top-level module ``name`` is first imported.

    Before any code of the importer sees the module, so what user code does with it next (say
    its own ``torch.set_num_threads``) wins. Costs nothing until then but one name comparison
    per new import, and is gone afterwards."""
    sys.meta_path.insert(0, _AfterImport(name, action))


class _AfterImport:
    """A one-shot meta path finder: lets the other finders find ``name``, then wraps the
    loader's ``exec_module`` (on that loader only, restored after the import)."""

    def __init__(self, name: str, action: Callable[[ModuleType], object]) -> None:
        self.name = name
        self.action = action
        self._finding = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname != self.name or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return None
        loader: Any = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            try:
                original(module)
            finally:
                del loader.exec_module
                self._remove()
            try:
                self.action(module)
            except Exception:  # noqa: BLE001 - a setting, never a reason to fail the import
                pass

        try:
            loader.exec_module = exec_module
        except AttributeError:  # a loader that takes no attributes: the import goes on plain
            self._remove()
        return spec

    def _remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
