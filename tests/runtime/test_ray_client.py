"""Ray Client: ``parl.connect("ray://host:port")`` against a real Ray head started by the test
(``ray start --head --block`` on loopback, its own temp folder), driven from a fresh
interpreter as a user's script would be. The head is ended through its process group, never
with ``ray stop`` (which would stop every Ray of this user on the machine)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.runtime.rays import ray_head  # noqa: F401 - the fixture

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


def test_actors_through_ray_client(ray_head, tmp_path):  # noqa: F811 - the fixture
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
