"""parl.shm.doorbell: one byte each way per round between a caller and a local actor."""

from __future__ import annotations

import glob
import os
import tempfile

import numpy as np
import pytest

import parl
from parl.shm.doorbell import DONE, FAILED, INFOS, ActorBell, CallerBell, answers


class Doubler:
    """Doubles a shared array in place at each ring; returns a note every third round."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.rounds = 0
        self.bell: ActorBell | None = None

    def open(self, paths: tuple[str, str]) -> None:
        self.bell = ActorBell(paths)

    def serve(self) -> int:
        assert self.bell is not None
        self.bell.serve(self._round)
        return self.rounds

    def _round(self) -> list:
        self.rounds += 1
        if self.rounds == 5:
            raise ValueError("round 5 refused")
        self.data *= 2
        return [("round", self.rounds)] if self.rounds % 3 == 0 else []


RemoteDoubler = parl.remote_class(wait=False)(Doubler)


def _connect(actor: object) -> CallerBell:
    bell = CallerBell()
    actor.open(bell.paths).get()  # type: ignore[attr-defined]
    bell.connect()
    return bell


def test_rounds_answers_and_stop() -> None:
    data = parl.shm.full(3, 1.0, np.float64)
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "parl-bell-*")))
    with RemoteDoubler(data) as actor:
        bell = _connect(actor)
        assert set(glob.glob(os.path.join(tempfile.gettempdir(), "parl-bell-*"))) == before
        serving = actor.serve()
        got = []
        for _ in range(3):
            bell.ring()
            got.append(answers([bell])[0])
        assert got == [(DONE, None), (DONE, None), (INFOS, [("round", 3)])]
        np.testing.assert_array_equal(data, [8.0, 8.0, 8.0])  # written by the actor, in place
        bell.stop()
        assert serving.get(timeout=10) == 3  # serve() returned: ordinary calls work again
        assert answers([None]) == [(b"", None)]  # a bell that was not rung
        bell.close()


def test_a_failing_round_answers_failed_and_the_call_raises() -> None:
    with RemoteDoubler(parl.shm.zeros(1, np.float64)) as actor:
        bell = _connect(actor)
        serving = actor.serve()
        for _ in range(4):
            bell.ring()
            assert bell.answer()[0] in (DONE, INFOS)
        bell.ring()
        assert bell.answer() == (FAILED, None)
        with pytest.raises(ValueError, match="round 5 refused"):
            serving.get(timeout=10)
        bell.close()


def test_a_closed_actor_ends_the_stream() -> None:
    actor = RemoteDoubler(parl.shm.zeros(1, np.float64))
    bell = _connect(actor)
    actor.serve()
    parl.close_actor(actor)  # the worker exits: its pipe ends close
    assert bell.answer() == (b"", None)
    bell.close()


def test_a_forked_child_does_not_keep_the_actor_serving() -> None:
    """A process the caller forks gets no copy of the caller's ends: when the caller closes
    its bell, the actor sees the end of the stream although the child is still alive."""
    with RemoteDoubler(parl.shm.zeros(1, np.float64)) as actor:
        bell = _connect(actor)
        serving = actor.serve()
        hold, release = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: wait until the parent is done, then leave at once
            os.close(release)
            os.read(hold, 1)
            os._exit(0)
        os.close(hold)
        try:
            bell.close()
            assert serving.get(timeout=10) == 0  # serve() returned: it saw the end
        finally:
            os.close(release)
            os.waitpid(pid, 0)
