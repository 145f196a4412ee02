"""Classes from the main script are the same classes on both sides of an actor call.

Most checks run a script with ``subprocess`` (its classes must live in a real ``__main__``);
each script prints ``ok ...`` lines that the test compares, so a failure shows the script's
stderr. The cost checks look at the bytes a message takes at the wire level.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import sys
import textwrap

import pytest

import parl
from parl.wire.classes import ClassTable
from parl.wire.serialization import dumps, loads
from tests.runtime.actors import Sampler

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

GUARDED = 'if __name__ == "__main__":\n    parl.connect(linger=0)\n    main()\n'


def run(tmp_path, body: str, *args: str, guarded: bool = False):
    """Run ``body`` as a script in ``tmp_path`` (with ``guarded``, ending in a ``__main__``
    guard that calls ``main()``); returns its stdout, asserting exit status 0."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body) + (GUARDED if guarded else ""))
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


def test_exception_class_of_the_script_is_caught_by_except(tmp_path):
    out = run(
        tmp_path,
        """
        import parl

        class AppError(Exception):
            pass

        class QuotaError(AppError):
            def __init__(self, used):
                super().__init__(f"used {used}")
                self.used = used

        @parl.remote_class
        class Service:
            def spend(self, n):
                raise QuotaError(n)

            def check(self, exc):
                return isinstance(exc, QuotaError) and isinstance(exc, AppError)

        def main():
            with Service() as s:
                try:
                    s.spend(3)
                except QuotaError as exc:
                    assert type(exc) is QuotaError and exc.used == 3
                    print("ok caught by its own class")
                try:
                    s.spend(4)
                except AppError as exc:
                    print("ok caught by its base", exc.used)
                assert s.check(QuotaError(1))
                print("ok the actor knows it too")
        """,
        guarded=True,
    )
    assert out.split("\n")[:3] == [
        "ok caught by its own class",
        "ok caught by its base 4",
        "ok the actor knows it too",
    ]


def test_dataclass_instances_pass_isinstance_in_both_directions(tmp_path):
    out = run(
        tmp_path,
        """
        import dataclasses
        import parl

        @dataclasses.dataclass
        class Point:
            x: float
            y: float

        @parl.remote_class
        class Mover:
            def move(self, p):
                assert isinstance(p, Point), type(p)
                assert dataclasses.fields(p)[0].name == "x"  # dataclass metadata intact
                return Point(p.x + 1, p.y)

        def main():
            with Mover() as m:
                p = m.move(Point(1.0, 2.0))
                assert isinstance(p, Point) and type(p) is Point, type(p)
                assert p == Point(2.0, 2.0)
                print("ok", p)
        """,
        guarded=True,
    )
    assert out.strip() == "ok Point(x=2.0, y=2.0)"


def test_enum_members_are_identical_both_ways_and_at_creation(tmp_path):
    out = run(
        tmp_path,
        """
        import enum
        import parl

        class Color(enum.Enum):
            RED = 1
            GREEN = 2

        @parl.remote_class
        class Painter:
            def __init__(self, color=Color.RED):  # a script Enum in the constructor
                self.color = color

            def paint(self, color):
                return color is Color.GREEN, self.color is Color.GREEN, Color.RED

        def main():
            with Painter(Color.GREEN) as p:
                arrived, kept, back = p.paint(Color.GREEN)
                assert arrived and kept, (arrived, kept)
                assert back is Color.RED
                print("ok", back)
            with Painter() as p:  # the default value travels with the class
                assert p.paint(Color.RED)[1:] == (False, Color.RED)
                print("ok default")
        """,
        guarded=True,
    )
    assert out.split("\n")[:2] == ["ok Color.RED", "ok default"]


def test_the_actor_sees_the_same_class_object_in_every_message(tmp_path):
    out = run(
        tmp_path,
        """
        import parl

        class Token:
            pass

        @parl.remote_class
        class Keeper:
            def __init__(self, first):
                self.cls = type(first)  # the class as it came with the constructor

            def same(self, token):
                return type(token) is self.cls and self.cls is Token

        def main():
            with Keeper(Token()) as k:
                print("ok", k.same(Token()), k.same(Token()), k.same([Token()][0]))
        """,
        guarded=True,
    )
    assert out.strip() == "ok True True True"


def test_a_definition_travels_once_per_connection():
    """The cost promise: after the first message, an instance of a by-value class costs a
    reference to its class, not its definition (checked at the wire level, in one process)."""

    @dataclasses.dataclass
    class Transition:  # defined in a function: travels by value, like a script class
        obs: float
        action: int

    caller, actor = ClassTable("caller"), ClassTable("actor")

    def send(obj):
        with caller.sending:
            stream, buffers = dumps(obj)
        with actor.receiving:
            return loads(stream, buffers), len(stream)

    first, first_size = send(Transition(0.5, 1))
    second, second_size = send(Transition(1.5, 2))
    _, dict_size = send({"obs": 0.5, "action": 1})
    assert type(first) is Transition and type(second) is Transition
    assert first_size > 1000  # the definition
    assert second_size < dict_size + 150, (second_size, dict_size)  # an id, not a definition


def test_a_class_that_comes_back_is_the_original_untouched():
    class Local:
        def method(self):
            return 1

    method = Local.method
    stream, buffers = dumps(Local)  # a definition, as the first message of a connection
    assert loads(stream, buffers) is Local
    assert Local.method is method  # not replaced by a rebuilt copy


def test_a_caller_sends_again_what_it_only_received():
    """The caller may drop a reply unread (a dropped future), so a class that came from the
    actor does not count as held by it; a class the caller sent does."""

    class FromActor:
        pass

    class FromCaller:
        pass

    caller, actor = ClassTable("caller"), ClassTable("actor")
    with actor.sending:
        stream, buffers = dumps(FromActor)
    with caller.receiving:
        loads(stream, buffers)
    assert not caller.held
    with caller.sending:
        assert b"define_class" in dumps(FromActor)[0]  # the definition again
        dumps(FromCaller)
    with caller.sending:
        stream = dumps(FromCaller)[0]
        assert b"known_class" in stream and b"define_class" not in stream  # a reference


def test_classes_with_slots_travel_by_value():
    """A rebuilt class had no real slots: its instances came back with a __dict__ and failed
    to load where the class has real slots."""

    class Slotted:
        __slots__ = ("a", "b")

        def __init__(self, a, b):
            self.a, self.b = a, b

    @dataclasses.dataclass(slots=True)
    class Pair:
        x: int
        y: int = 0

    actor = Sampler()
    try:
        back = actor.echo(Slotted(1, 2))
        assert type(back) is Slotted and (back.a, back.b) == (1, 2)
        assert actor.echo(Pair(3, 4)) == Pair(3, 4)
        assert actor.apply(lambda p: hasattr(p, "__dict__"), Pair(1)) is False
    finally:
        parl.close_actor(actor)


def test_closures_lambdas_and_local_classes_still_travel_by_value(tmp_path):
    out = run(
        tmp_path,
        """
        import parl

        @parl.remote_class
        class Runner:
            def apply(self, fn, *args):
                return fn(*args)

        def make_class(k):
            class Local:  # a new class each call: by value, as before
                def __init__(self, v):
                    self.v = v * k
            return Local

        def main():
            k = 5
            with Runner() as r:
                assert r.apply(lambda x: x + k, 1) == 6
                def closure(x):
                    return x * k
                assert r.apply(closure, 3) == 15
                Local = make_class(2)
                back = r.apply(lambda o: o, Local(4))
                assert type(back) is Local and back.v == 8
                print("ok")
        """,
        guarded=True,
    )
    assert out.strip() == "ok"


def test_an_instance_of_a_main_class_travels_as_an_argument(tmp_path):
    """docs/guides/actors.md: classes defined in __main__ travel by value, also when only an *instance* is
    passed: plain pickle saves the instance by reference without failing, so the by-value path
    must be taken without waiting for an error (the worker cannot find __main__.Point)."""
    script = tmp_path / "main_class.py"
    script.write_text(
        textwrap.dedent(
            """
            import parl

            class Point:
                def __init__(self, x):
                    self.x = x

            @parl.remote_class
            class Doubler:
                def double(self, p):
                    return p.x * 2

            if __name__ == "__main__":
                parl.connect(linger=0)
                with Doubler() as d:
                    print("result", d.double(Point(21)))
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    assert "result 42" in proc.stdout, proc.stderr[-2000:]


def test_a_script_without_main_guard_works(tmp_path):
    out = run(
        tmp_path,
        """
        import dataclasses
        import parl

        @dataclasses.dataclass
        class Config:
            lr: float

        @parl.remote_class
        class Learner:
            def __init__(self, config):
                self.config = config

            def step(self):
                return Config(self.config.lr / 2)

        parl.connect(linger=0)
        learner = Learner(Config(0.5))
        result = learner.step()
        assert type(result) is Config, type(result)
        print("ok", result.lr)
        parl.close_actor(learner)
        """,
    )
    assert out.strip() == "ok 0.25"


def test_interactive_main_without_a_file_works():
    code = textwrap.dedent(
        """
        import enum, parl

        class Mode(enum.Enum):
            TRAIN = 1

        @parl.remote_class
        class Echo:
            def echo(self, x):
                return x

        parl.connect(linger=0)
        with Echo() as e:
            print("ok", e.echo(Mode.TRAIN) is Mode.TRAIN)
        """
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == "ok True"


def test_actors_of_nested_owners_keep_class_identity(tmp_path):
    """A script actor that owns a script actor: classes keep their identity over two hops,
    and even the proxy class comes back as itself."""
    out = run(
        tmp_path,
        """
        import enum
        import parl

        class Color(enum.Enum):
            RED = 1
            BLUE = 2

        class PaintError(Exception):
            pass

        @parl.remote_class
        class Leaf:
            def paint(self, color):
                if color is not Color.BLUE:
                    raise PaintError(color)
                return color

        @parl.remote_class
        class Owner:
            def __init__(self):
                self.leaf = Leaf()

            def paint(self, color):
                return self.leaf.paint(color)

            def classes(self):
                return Leaf, Color

        def main():
            with Owner() as owner:
                assert owner.paint(Color.BLUE) is Color.BLUE
                try:
                    owner.paint(Color.RED)
                except PaintError as exc:
                    assert exc.args[0] is Color.RED
                    print("ok caught")
                leaf, color = owner.classes()
                print("ok", leaf is Leaf, color is Color)
        """,
        guarded=True,
    )
    assert out.split("\n")[:2] == ["ok caught", "ok True True"]


MP_SCRIPT = """
import multiprocessing
import sys

import parl

class Point:
    def __init__(self, x):
        self.x = x

@parl.remote_class
class Adder:
    def __init__(self, base):
        self.base = base

    def add(self, p):
        return isinstance(p, Point) and type(p) is type(self.base), Point(self.base.x + p.x)

def child(queue):
    parl.connect(linger=0)
    with Adder(Point(1)) as adder:
        ok, p = adder.add(Point(2))
        queue.put((ok, isinstance(p, Point), p.x))

if __name__ == "__main__":
    context = multiprocessing.get_context(sys.argv[1])
    queue = context.Queue()
    proc = context.Process(target=child, args=(queue,))
    proc.start()
    print("ok", queue.get(timeout=60))
    proc.join()
    sys.exit(proc.exitcode)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_multiprocessing_children_create_and_use_script_actors(tmp_path, method):
    """There the script is ``__mp_main__``, which no worker can import."""
    out = run(tmp_path, MP_SCRIPT, method)
    assert out.strip() == "ok (True, True, 3)"


HELPERS = """
import struct

HEADER = struct.Struct("<II")

def pack(a, b):
    return HEADER.pack(a, b)
"""


@pytest.mark.parametrize(
    "uses, expected",
    [
        ("parl.__name__", "parl"),  # an editable install here, as docs/install.md makes
        ("helpers.pack(self.n, 2)", struct.pack("<II", 1, 2)),
    ],
)
def test_actor_methods_may_use_parl_and_a_helper_module_holding_a_struct(tmp_path, uses, expected):
    """Modules travel by name. Saved by value, parl and a local helper module holding a
    ``struct.Struct`` failed with "the arguments of Packer.__init__() cannot be pickled"."""
    (tmp_path / "helpers.py").write_text(HELPERS)
    out = run(
        tmp_path,
        f"""
        import parl
        import helpers

        @parl.remote_class
        class Packer:
            def __init__(self, n):
                self.n = n

            def run(self):
                return {uses}

        def main():
            with Packer(1) as p:
                print("ok", repr(p.run()))
        """,
        guarded=True,
    )
    assert out.strip() == f"ok {expected!r}"


HEADER = struct.Struct("<II")  # cannot be pickled: a class using it cannot travel by value


def test_an_unpicklable_global_of_a_class_is_named_in_the_error():
    @parl.remote_class
    class Packer:  # defined in a function: travels by value with the globals it uses
        def run(self):
            return HEADER.pack(1, 2)

    with pytest.raises(TypeError) as info:
        Packer()
    message = str(info.value)
    assert "<locals>.Packer is defined in a function" in message, message
    assert "Packer.run -> global HEADER (a _struct.Struct)" in message, message
    assert "arguments" not in message


RAISING_SCRIPT = """\
import sys

import parl


@parl.remote_class
class Boom:
    def explode(self, x):
        y = x + 1
        raise ValueError(f"boom {y}")  # the line the traceback must show


def main():
    if len(sys.argv) > 1:
        parl.connect(sys.argv[1], linger=0)
    try:
        Boom().explode(1)
    except ValueError as exc:
        print("REMOTE" + exc.remote_traceback.replace("\\n", "|"))
"""


@pytest.mark.parametrize("where", ["local", "cluster"])
def test_a_remote_traceback_names_the_scripts_file_and_line(tmp_path, request, where):
    """A class of the script travels by value; the traceback of its remote failure still
    names the script's path, the line number and the line itself (not ``<dynamic-code>``)."""
    args = [request.getfixturevalue("cluster").address] if where == "cluster" else []
    out = run(tmp_path, RAISING_SCRIPT, *args, guarded=True)
    remote = next(line for line in out.splitlines() if line.startswith("REMOTE"))
    line = RAISING_SCRIPT.splitlines().index(
        '        raise ValueError(f"boom {y}")  # the line the traceback must show'
    )
    script = tmp_path / "script.py"
    assert f'File "{script}", line {line + 1}, in explode' in remote, remote
    assert 'raise ValueError(f"boom {y}")' in remote, remote
    assert "<dynamic-code>" not in remote


LOAD_AND_RAISE = """\
import sys, traceback
from parl.wire.serialization import loads

cls = loads(open(sys.argv[1], "rb").read())
try:
    cls().explode()
except ValueError:
    print(traceback.format_exc())
"""


def test_a_traceback_shows_the_lines_of_a_file_only_the_sender_has(tmp_path):
    """On a cluster's host the script's file does not exist: its text travels with the class
    and the receiver's tracebacks show its lines under the sender's path."""
    import linecache

    source = (
        "def make():\n"
        "    class Local:\n"
        "        def explode(self):\n"
        "            raise ValueError('only the sender has this file')\n"
        "    return Local\n"
    )
    filename = str(tmp_path / "elsewhere" / "user_script.py")  # no such file, here either
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    try:
        namespace: dict = {"__name__": "sender_only_module"}
        exec(compile(source, filename, "exec"), namespace)
        data, buffers = dumps(namespace["make"]())
    finally:
        del linecache.cache[filename]
    assert buffers == []
    (tmp_path / "class.pickle").write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RAISE, str(tmp_path / "class.pickle")],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f'File "{filename}", line 4, in explode' in proc.stdout, proc.stdout
    assert "raise ValueError('only the sender has this file')" in proc.stdout, proc.stdout
