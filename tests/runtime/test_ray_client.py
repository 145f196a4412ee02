"""Ray Client: ``parl.connect("ray://host:port")`` against a real Ray head (the run's
``ray start --head`` on loopback, tests/runtime/rays.py), driven from a fresh interpreter as a
user's script would be."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # on the run's Ray head (tests/runtime/rays.py)

CLIENT_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import parl

    @parl.remote_class(wait=False)
    class Worker:
        def double(self, a):
            return a * 2

        def fail(self):
            raise KeyError("missing key")

        def shout(self, text):
            print(text, flush=True)
            return True

    parl.connect(sys.argv[1])
    worker = Worker()
    big = np.arange(4_000_000, dtype=np.float32)  # 16 MB: through the object store
    futures = [worker.double(big), worker.double(np.ones(3))]
    out = parl.get(futures)
    assert np.array_equal(out[0], big * 2) and out[1].tolist() == [2.0, 2.0, 2.0]
    try:
        worker.fail().get()
    except KeyError as exc:
        print("KEYERROR", exc)
    assert worker.shout("hello through ray client").get()
    parl.close_actor(worker)
    parl.disconnect()
    print("CLIENT DONE")
    """
)


def test_actors_through_ray_client(ray_head, tmp_path):
    address, env = ray_head.client, ray_head.env
    (tmp_path / "client.py").write_text(CLIENT_SCRIPT)
    done = subprocess.run(
        [sys.executable, "client.py", address], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=240,
    )  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "KEYERROR 'missing key'" in done.stdout
    assert "CLIENT DONE" in done.stdout
    assert "hello through ray client" in log  # the actor's print came back


class _FlakyInit:
    """Stands in for ``ray.init``: raises ``errors`` in turn, then succeeds."""

    def __init__(self, *errors: Exception) -> None:
        self.errors, self.calls = list(errors), 0

    def __call__(self, address=None, log_to_driver=True, **options) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


SERVER_FAILED = ConnectionError(
    "ray client connection failed\nInitialization failure from server:\nTraceback ..."
)


def test_a_client_session_whose_server_failed_to_start_is_tried_again(monkeypatch, caplog):
    """The Ray Client head's transient failure (its spawned server process died at once) is
    tried again, up to CLIENT_ATTEMPTS times, with a warning each time; any other failure,
    and a local Ray, fail at once with a ClusterError naming the address."""
    from parl.errors import ClusterError
    from parl.ray import carrier

    monkeypatch.setattr(carrier.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(carrier.ray, "is_initialized", lambda: False)

    flaky = _FlakyInit(SERVER_FAILED, SERVER_FAILED)
    monkeypatch.setattr(carrier.ray, "init", flaky)
    with caplog.at_level("WARNING", logger="parl.ray"):
        carrier._init("ray://127.0.0.1:1", forward_output=True)
    assert flaky.calls == 3
    assert sum("failed to start a session" in r.message for r in caplog.records) == 2

    always = _FlakyInit(*[SERVER_FAILED] * carrier.CLIENT_ATTEMPTS)
    monkeypatch.setattr(carrier.ray, "init", always)
    try:
        carrier._init("ray://127.0.0.1:1", forward_output=True)
    except ClusterError as exc:
        assert "ray://127.0.0.1:1" in str(exc) and "Initialization failure" in str(exc)
    else:
        raise AssertionError("the last failure must raise")
    assert always.calls == carrier.CLIENT_ATTEMPTS

    for address, error in (
        ("ray://127.0.0.1:1", ConnectionError("connection refused")),
        ("ray", SERVER_FAILED),  # only Ray Client sessions are tried again
    ):
        once = _FlakyInit(error, error)
        monkeypatch.setattr(carrier.ray, "init", once)
        try:
            carrier._init(address, forward_output=False)
        except ClusterError as exc:
            assert repr(address) in str(exc)
        else:
            raise AssertionError(f"{address}: {error} must raise")
        assert once.calls == 1
