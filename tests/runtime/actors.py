"""Remote classes used by the runtime tests (an importable module: found by name)."""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time

import numpy as np

import parl


class CustomError(Exception):
    pass


class UnpicklableError(Exception):
    def __init__(self, a, b):  # cannot be pickled: it holds a lock
        super().__init__(f"{a}-{b}")
        self.lock = threading.Lock()


@parl.remote_class
class Sampler:
    """The example of docs/guides/actors.md."""

    def __init__(self, n: int = 4):
        self.buf = np.zeros(n, np.float32)
        self.log: list[int] = []

    def rollout(self):
        self.buf += 1
        return self.buf

    def add(self, a, b):
        return a + b

    def pid(self):
        return os.getpid()

    def address(self, a):
        return a.__array_interface__["data"][0]

    def append(self, i):
        self.log.append(i)
        return len(self.log)

    def apply(self, fn, *args):
        return fn(*args)

    def info(self, a):
        import parl.shm

        return {
            "shared": parl.shm.is_shared(a),
            "kind": parl.shm.memory_kind(a),
            "owndata": bool(a.flags.owndata),
            "writeable": bool(a.flags.writeable),
            "sum": float(a.sum()),
            "dtype": str(a.dtype),
            "shape": a.shape,
        }

    def fill(self, a, value):
        a[...] = value

    def keep(self, a):
        self.kept = a

    def kept_is_shared(self):
        import parl.shm

        return parl.shm.is_shared(self.kept)

    def get_kept(self):
        return self.kept

    def raise_custom(self, message):
        raise CustomError(message)

    def raise_unpicklable(self):
        raise UnpicklableError(1, 2)

    def return_unpicklable(self):
        return (i for i in range(3))

    def speak(self, text, err=False):
        print(text, file=sys.stderr if err else sys.stdout)
        return True

    def exit(self, code):
        sys.exit(code)

    def crash(self):
        os.kill(os.getpid(), 9)

    def allocate(self, megabytes):
        self.blob = np.ones(int(megabytes * 2**20), np.uint8)
        while True:  # the memory watcher stops the worker
            time.sleep(0.01)

    def tensor_info(self, t):
        return {
            "type": type(t).__name__,
            "dtype": str(t.dtype),
            "sum": float(t.float().sum()),
            "requires_grad": bool(t.requires_grad),
        }

    def echo(self, x):
        return x

    def interrupt_caller_then_block(self, caller_pid, fifo):
        import signal

        # Ctrl-C while the caller waits: let it get from sending the call to waiting for the
        # reply first (a Ctrl-C that lands as the call is handed to the socket, before the
        # caller knows it went out whole, gives the connection up: another promise)
        time.sleep(0.5)
        os.kill(caller_pid, signal.SIGINT)
        with open(fifo) as f:
            return f.read()

    def getenv(self, name):
        return os.environ.get(name)

    def getcwd(self):
        return os.getcwd()

    @property
    def size(self):
        return self.buf.size


@parl.remote_class(wait=False)
class AsyncSampler:
    def __init__(self):
        self.n = 0

    def add(self, a, b):
        return a + b

    def step(self):
        self.n += 1
        return self.n

    def fail(self):
        raise ValueError("async failure")

    def block(self, fifo):
        with open(fifo) as f:
            return f.read()

    def pid(self):
        return os.getpid()

    def big(self, n):
        return np.full(n, 1.0, np.float32)


@parl.remote_class
class Sink:
    """Takes, fills and makes arrays: the actor of the shared-handle and block-reuse tests."""

    def take(self, x):
        return float(x[0])

    def fill(self, x, value):
        x[...] = value

    def pid(self):
        return os.getpid()

    def make(self, n, value):
        return np.full(n, value)


@parl.remote_class(wait=False)
class Talker:
    """Prints lines of any length: the monitor's output tests."""

    def pid(self):
        return os.getpid()

    def value(self):
        return 42

    def shout(self, lines, chars):
        for i in range(lines):
            print(f"{i}:" + "y" * chars, flush=True)
        return os.getpid()


@parl.remote_class(max_memory=100)
class Capped:
    def allocate(self, megabytes):
        self.blob = np.ones(int(megabytes * 2**20), np.uint8)
        while True:
            time.sleep(0.01)

    def ok(self):
        return "ok"


@parl.remote_class
class FailsInInit:
    def __init__(self, message):
        raise CustomError(message)


@parl.remote_class
class Leaf:
    def work(self, x):
        return np.full(1 << 18, x, np.float32)


@parl.remote_class
class Boss:
    """An actor that has actors of its own (a learner with its samplers, say)."""

    def __init__(self, n):
        self.leaves = [Leaf() for _ in range(n)]

    def run(self):
        outs = [leaf.work(i) for i, leaf in enumerate(self.leaves)]
        return float(sum(o.sum() for o in outs))

    def pids(self):
        return [leaf._parl_conn.label.split("pid=")[1] for leaf in self.leaves]


@parl.remote_class
class Keeper:
    """Holds arrays by key: the value-semantics tests' actor."""

    def __init__(self):
        self.store = {}

    def put(self, key, a):
        self.store[key] = a

    def make(self, key, n, value):
        self.store[key] = np.full(n, value, np.float64)

    def get(self, key):
        return self.store[key]

    def add(self, key, x):
        self.store[key] += x  # in place

    def normalize(self, obs):
        obs -= obs.mean()
        return obs

    def drop(self, key):
        del self.store[key]

    def digest(self):
        """For each key: (min, max) of the array, to compare with the expected constant."""
        return {k: (float(v.min()), float(v.max())) for k, v in self.store.items()}


# -- proxy edge cases (test_proxy_edges.py) ----------------------------------------------------


class _TableBase:
    """A dict-like actor: ``__getitem__`` raises KeyError, never IndexError."""

    def __init__(self, **items):
        self.items = dict(items)

    def __getitem__(self, key):
        return self.items[key]

    def __setitem__(self, key, value):
        self.items[key] = value

    def __delitem__(self, key):
        del self.items[key]

    def __len__(self):
        return len(self.items)

    def __contains__(self, key):
        return key in self.items

    def __iter__(self):
        return iter(self.items)

    def __call__(self, key):
        return self.items.get(key, "missing")


Table = parl.remote_class(_TableBase)
AsyncTable = parl.remote_class(wait=False)(_TableBase)


@parl.remote_class
class Indexed:
    """``__getitem__`` without ``__iter__`` or ``__contains__``."""

    def __getitem__(self, i):
        return i * 10


@parl.remote_class(wait=False)
class AsyncIndexed:
    def __getitem__(self, i):
        return i * 10


class _CountdownBase:
    """Its own iterator: ``__iter__`` returns self, ``__next__`` counts down."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n == 0:
            raise StopIteration
        self.n -= 1
        return self.n + 1


Countdown = parl.remote_class(_CountdownBase)
AsyncCountdown = parl.remote_class(wait=False)(_CountdownBase)


@parl.remote_class(wait=False)
class Falsy:
    def __bool__(self):
        return False


@parl.remote_class
class GeneratorIter:
    def __iter__(self):
        yield 1

    def ok(self):
        return "ok"


@parl.remote_class
class WithStatic:
    LIMIT = 7

    def __init__(self, x=0):
        self.x = x

    @staticmethod
    def where(tag):
        return tag, os.getpid()

    @classmethod
    def make(cls, x):
        return cls(x)

    @classmethod
    def limit(cls):
        return cls.LIMIT, os.getpid()

    def get_x(self):
        return self.x


class _HidingBase:
    """Instance attributes named like methods of the class: ``total`` from the start, others
    set later by the caller or by a method."""

    def __init__(self, total):
        self.total = total  # hides the method total() in the instance

    def total(self, a, b):
        return a + b

    def count(self):
        return 100

    def set_count(self, value):
        self.count = value  # hides count() from now on

    def drop_count(self):
        del self.count  # count() is a method again

    @staticmethod
    def label():
        return "static"


@parl.remote_class
class Hiding(_HidingBase):
    pass


@parl.remote_class(wait=False)
class AsyncHiding(_HidingBase):
    pass


@parl.remote_class
class OwnDestroy:
    """A remote class with a method named like the proxy's ``destroy``."""

    def destroy(self):
        return "the class's own"


class SubSampler(Sampler):
    """A subclass of a remote class: remote too, with Sampler's options."""

    def __init__(self, n=4, bonus=100):
        super().__init__(n)
        self.bonus = bonus

    def add(self, a, b):
        return super().add(a, b) + self.bonus

    def where(self):
        return os.getpid(), type(self).__name__, __class__.__name__


class SubAsync(AsyncSampler):
    """Inherits wait=False."""

    def twice(self, x):
        return 2 * x


@parl.remote_class(wait=False)
class AsyncSubSampler(Sampler):
    """A subclass decorated with options of its own."""

    def triple(self, x):
        return 3 * x


def _touch(path):
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")


class _Token:
    pass


class _Writer:
    """Writes lines into a buffered file it never flushes; leaves marker files when its
    ``__del__``, its atexit handler and the ``finally`` of a busy method run."""

    def __init__(self, folder):
        import atexit

        self.folder = folder
        self.file = open(os.path.join(folder, "lines.txt"), "w", buffering=1 << 20)
        atexit.register(_touch, os.path.join(folder, "atexit"))

    def write(self, n):
        for i in range(n):
            self.file.write(f"line {i}\n")

    def pid(self):
        return os.getpid()

    def busy(self):
        try:  # "busy" is written inside: a close seen as soon as the file exists meets the finally
            _touch(os.path.join(self.folder, "busy"))
            while True:
                time.sleep(0.01)
        finally:
            _touch(os.path.join(self.folder, "finally"))

    def busy_in_finalizers(self):
        """Spends most of its time in weakref callbacks, where Python drops exceptions."""
        import weakref

        try:
            for i in itertools.count():
                weakref.finalize(_Token(), time.sleep, 0.009)  # runs as the token dies
                time.sleep(0.001)
                if i == 10:
                    _touch(os.path.join(self.folder, "busy"))
        finally:
            _touch(os.path.join(self.folder, "finally"))

    def __del__(self):
        _touch(os.path.join(self.folder, "del"))


Writer = parl.remote_class(_Writer)
AsyncWriter = parl.remote_class(wait=False)(_Writer)


@parl.remote_class
class Stubborn:
    """Its ``__del__`` never returns."""

    def pid(self):
        return os.getpid()

    def __del__(self):
        while True:
            time.sleep(0.01)


@parl.remote_class
class Scalars:
    def write(self, folder, n):
        from parl.utils import summary

        summary.set_dir(folder)
        for step in range(n):
            summary.add_scalar("train/value", float(step), step)

    def pid(self):
        return os.getpid()


class _Draws:
    def draws(self):
        import random

        import torch

        return random.random(), float(np.random.rand()), float(torch.rand(1))

    def threads(self):
        import torch

        return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")

    def threads_with_numpy(self):
        """Python's threads, and all threads before and after matrix products (numpy's BLAS
        pool is the difference)."""
        import threading

        before = len(os.listdir("/proc/self/task"))
        a = np.ones((1000, 1000))
        for _ in range(3):
            a @ a
        return threading.active_count(), before, len(os.listdir("/proc/self/task"))

    def pid(self):
        return os.getpid()

    def apply(self, fn, *args):
        return fn(*args)


Draws = parl.remote_class(_Draws)
ThreeThreads = parl.remote_class(num_threads=3)(_Draws)


@parl.remote_class(n_gpu=1)
class OneGpu:
    def visible(self):
        return os.environ.get("CUDA_VISIBLE_DEVICES")


@parl.remote_class(n_gpu=2)
class TwoGpus:
    def visible(self):
        return os.environ.get("CUDA_VISIBLE_DEVICES")


@parl.remote_class
class Roller:
    """The rollout-buffer pattern of docs/guides/shared-memory.md: fills an array it is given in place, or one it was
    constructed with; makes parl.shm arrays of its own."""

    def __init__(self, buf=None):
        self.buf = buf

    def rollout_into(self, buf):
        buf[...] = np.arange(buf.size, dtype=buf.dtype).reshape(buf.shape)
        return buf.size

    def fill_own(self, value):
        self.buf[...] = value

    def fill_all(self, data, value):
        """Fill every array in ``data``'s values (lists of them, objects with ``obs``)."""
        parts = list(data.values())
        while parts:
            part = parts.pop()
            if isinstance(part, list):
                parts.extend(part)
            else:
                getattr(part, "obs", part)[...] = value

    def total(self, data):
        return float(sum(np.sum(part) for part in data.values()))

    def make_shared(self, n):
        import parl.shm

        self.made = parl.shm.full(n, 7.0)
        return self.made

    def make_nested(self, n):
        import parl.shm

        return {"steps": n, "obs": [parl.shm.zeros(n)]}


@parl.remote_class(wait=False)
class Mover:
    """Moves large arrays: takes one (its size back), makes one, or blocks on a FIFO (a busy
    actor that reads no request meanwhile)."""

    def nbytes(self, a):
        return int(a.nbytes)

    def make(self, nbytes):
        return np.ones(nbytes, np.uint8)

    def block(self, fifo):
        with open(fifo) as f:
            return f.read()

    def pid(self):
        return os.getpid()


@parl.remote_class
class SlowEnd:
    """Keeps its argument; ends slowly (its __del__ takes a while)."""

    def keep(self, x):
        self.x = x

    def pid(self):
        return os.getpid()

    def __del__(self):
        time.sleep(0.3)


@parl.remote_class
class Saver:
    """Keeps its argument; its __del__ (run when the worker ends) records what it holds."""

    def __init__(self, path):
        self.path = path
        self.x = None

    def keep(self, x):
        self.x = x

    def __del__(self):
        time.sleep(0.5)  # a slow flush / checkpoint at the end
        with open(self.path, "w") as f:
            f.write(f"{self.x.min()} {self.x.max()}")
