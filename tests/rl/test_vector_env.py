"""parl.env vector envs: RemoteVectorEnv against gymnasium's SyncVectorEnv, PARL's VectorEnv."""

from __future__ import annotations

import functools
import glob
import os
import tempfile
import time
from collections.abc import Callable

import gymnasium
import numpy as np
import psutil
import pytest

import parl
from parl.env import CompatWrapper, RemoteVectorEnv, VectorEnv
from parl.env.fast_envs import fast_builder
from tests.runtime.conftest import lasting_new_shm_entries, wait_until

CARTPOLE = functools.partial(gymnasium.make, "CartPole-v1")


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _assert_same_step(ours: tuple, theirs: tuple, t: int) -> None:
    for a, b in zip(ours[:4], theirs[:4], strict=True):
        np.testing.assert_array_equal(a, b, err_msg=f"step {t}")
    assert set(ours[4]) == set(theirs[4]), f"step {t}"
    if "final_obs" in theirs[4]:
        for i in np.nonzero(theirs[4]["_final_obs"])[0]:
            np.testing.assert_array_equal(ours[4]["final_obs"][i], theirs[4]["final_obs"][i])


@pytest.mark.parametrize(
    ("mode", "transport"),
    [("NextStep", "shm"), ("SameStep", "shm"), ("SameStep", "values")],
)
def test_remote_vector_env_gives_the_trajectories_of_a_serial_one(
    mode: str, transport: str
) -> None:
    """5 envs over 2 actors (3 + 2): identical observations, rewards, dones and infos."""
    fns = [CARTPOLE] * 5
    serial = gymnasium.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    with RemoteVectorEnv(fns, num_workers=2, autoreset_mode=mode, transport=transport) as remote:
        assert remote.num_envs == 5 and remote.action_space == serial.action_space
        ours, theirs = remote.reset(seed=11), serial.reset(seed=11)
        np.testing.assert_array_equal(ours[0], theirs[0])
        rng = np.random.default_rng(0)
        dones = 0
        for t in range(150):
            actions = rng.integers(0, 2, 5)
            ours, theirs = remote.step(actions), serial.step(actions)
            _assert_same_step(ours, theirs, t)
            dones += int(np.sum(theirs[2] | theirs[3]))
        assert dones >= 5  # auto-reset was exercised
    serial.close()


def test_remote_vector_env_seeds_seed_plus_i_and_calls_env_methods() -> None:
    with RemoteVectorEnv([CARTPOLE] * 3, num_workers=3) as remote:
        obs, _ = remote.reset(seed=4)
        for i in range(3):
            np.testing.assert_array_equal(obs[i], CARTPOLE().reset(seed=4 + i)[0])
        assert remote.call("spec") is not None
        assert remote.get_attr("_max_episode_steps") == (500, 500, 500)
        remote.set_attr("_max_episode_steps", 2)
        remote.step(np.zeros(3, np.int64))
        _, _, terminated, truncated, _ = remote.step(np.zeros(3, np.int64))
        assert truncated.all() and not terminated.any()


def test_closing_leaves_no_process_behind() -> None:
    before = _children()
    remote = RemoteVectorEnv([CARTPOLE] * 4, num_workers=2)
    remote.reset(seed=0)
    assert len(_children() - before) >= 2
    remote.close()
    remote.close()  # idempotent
    deadline = time.monotonic() + 15
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (_children() - before)


def _compare_with_sync(
    remote: RemoteVectorEnv,
    serial: gymnasium.vector.VectorEnv,
    steps: int,
    seed: int,
    infos: bool = True,
) -> int:
    """Step both with the same random actions; returns how many episodes ended."""
    ours, theirs = remote.reset(seed=seed), serial.reset(seed=seed)
    np.testing.assert_array_equal(ours[0], theirs[0])
    assert set(ours[1]) == set(theirs[1])
    serial.action_space.seed(seed)
    dones = 0
    for t in range(steps):
        actions = serial.action_space.sample()
        if t % 2:  # half the steps through step_async/step_wait
            remote.step_async(actions)
            ours = remote.step_wait()
        else:
            ours = remote.step(actions)
        theirs = serial.step(actions)
        if not infos:  # only what auto-reset needs
            theirs = (*theirs[:4], {k: theirs[4][k] for k in theirs[4] if "final_" in k})
        _assert_same_step(ours, theirs, t)
        for key in theirs[4]:
            if not key.startswith("_") and key not in ("final_obs", "final_info"):
                np.testing.assert_array_equal(ours[4][key], theirs[4][key], err_msg=key)
        dones += int(np.sum(theirs[2] | theirs[3]))
    return dones


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_make_cartpole_numpy_batch_matches_gymnasium_per_env_seeding(mode: str) -> None:
    """The vectorized CartPole of make(): same trajectories as SyncVectorEnv of gymnasium's
    CartPoleEnv seeded seed + i (terminations, truncations at max_episode_steps, auto-reset)."""
    assert fast_builder("CartPole-v1", 5, {"max_episode_steps": 40}) is not None
    serial = gymnasium.vector.SyncVectorEnv(
        [functools.partial(gymnasium.make, "CartPole-v1", max_episode_steps=40)] * 10,
        autoreset_mode=mode,
    )
    with RemoteVectorEnv.make(
        "CartPole-v1", 10, num_workers=2, autoreset_mode=mode, max_episode_steps=40
    ) as remote:
        with pytest.raises(TypeError, match="vectorize=False"):
            remote.get_attr("spec")  # a numpy batch: no env objects in the actors
        assert remote.single_observation_space == serial.single_observation_space
        dones = _compare_with_sync(remote, serial, 300, seed=3)
        assert dones >= 40
        # a second reset with new seeds (and reset bounds) restarts every env the same way
        seeds = list(range(7, 17))
        ours = remote.reset(seed=seeds, options={"low": -0.2, "high": 0.2})
        theirs = serial.reset(seed=seeds, options={"low": -0.2, "high": 0.2})
        np.testing.assert_array_equal(ours[0], theirs[0])
    serial.close()


def test_make_cartpole_sutton_barto_reward_and_unknown_kwargs() -> None:
    """Keyword arguments the numpy batch knows are honoured; others fall back to gymnasium."""
    assert fast_builder("CartPole-v1", 4, {"render_mode": "rgb_array"}) is None
    assert fast_builder("CartPole-v1", 3, {}) is None  # too few envs per actor to pay
    assert fast_builder("Pendulum-v1", 4, {}) is None
    serial = gymnasium.vector.SyncVectorEnv(
        [functools.partial(gymnasium.make, "CartPole-v1", sutton_barto_reward=True)] * 4
    )
    with RemoteVectorEnv.make("CartPole-v1", 4, num_workers=1, sutton_barto_reward=True) as ours:
        assert _compare_with_sync(ours, serial, 80, seed=0) >= 4
    serial.close()


@pytest.mark.parametrize(
    ("mode", "infos"), [("NextStep", True), ("SameStep", True), ("NextStep", False)]
)
def test_make_halfcheetah_lean_step_matches_gymnasium(mode: str, infos: bool) -> None:
    """HalfCheetah-v5 through make()'s lean MuJoCo step (3 + 2 envs): bit-identical
    observations, rewards, infos and time-limit resets to SyncVectorEnv of gymnasium.make."""
    from parl.env.fast_mujoco import HalfCheetahBatch

    builder = fast_builder("HalfCheetah-v5", 2, {"max_episode_steps": 25})
    assert isinstance(builder, functools.partial) and builder.func is HalfCheetahBatch
    make = functools.partial(gymnasium.make, "HalfCheetah-v5", max_episode_steps=25)
    local = builder(gymnasium.vector.AutoresetMode(mode), infos)
    assert local.lean  # the wrapper-free step is the one under test
    local.close()
    serial = gymnasium.vector.SyncVectorEnv([make] * 5, autoreset_mode=mode)
    with RemoteVectorEnv.make(
        "HalfCheetah-v5", 5, num_workers=2, autoreset_mode=mode, infos=infos, max_episode_steps=25
    ) as remote:
        assert _compare_with_sync(remote, serial, 60, seed=5, infos=infos) == 10
        assert remote.get_attr("frame_skip") == (5,) * 5  # real gymnasium envs in the actors
    serial.close()


def test_step_async_and_errors_of_the_doorbell_path() -> None:
    with RemoteVectorEnv.make("CartPole-v1", 4, num_workers=2, vectorize=False) as remote:
        remote.reset(seed=0)
        remote.step_async(np.zeros(4, np.int64))
        with pytest.raises(gymnasium.error.AlreadyPendingCallError):
            remote.step_async(np.zeros(4, np.int64))
        with pytest.raises(gymnasium.error.AlreadyPendingCallError):
            remote.reset()
        remote.step_wait()
        with pytest.raises(gymnasium.error.NoAsyncCallError):
            remote.step_wait()
        assert remote.get_attr("_max_episode_steps") == (500,) * 4  # stops the doorbell loop
        remote.step(np.ones(4, np.int64))  # and the next step starts it again
        # as gymnasium's envs: no float actions in a Discrete space, one action per env
        with pytest.raises(TypeError, match=r"dtype float64.*int64.*astype"):
            remote.step(np.full(4, 0.7))
        with pytest.raises(ValueError, match=r"shape \(4,\), got shape \(\)"):
            remote.step(1)
        with pytest.raises(ValueError, match=r"got shape \(3,\)"):
            remote.step([0, 1, 0])
        remote.step([1, 0, 1, 0])  # a list of ints is fine, and nothing was left pending
        remote.step_async(np.ones(4, np.int64))  # close() collects a pending step


def test_an_interrupted_step_wait_falls_back_to_calls_in_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while reading the actors' answers: the doorbells are dropped (an unread answer
    would answer the next step) and later steps, by ordinary calls, stay in step with
    gymnasium."""
    from parl.shm import doorbell

    serial = gymnasium.vector.SyncVectorEnv([CARTPOLE] * 4)
    with RemoteVectorEnv([CARTPOLE] * 4, num_workers=2) as remote:
        remote.reset(seed=2), serial.reset(seed=2)
        actions = np.array([0, 1, 1, 0])
        with monkeypatch.context() as patch:
            patch.setattr(doorbell.CallerBell, "answer", _interrupt)
            with pytest.raises(KeyboardInterrupt):
                remote.step(actions)
        serial.step(actions)  # the actors did step
        assert not remote._bells
        rng = np.random.default_rng(1)
        for t in range(40):
            actions = rng.integers(0, 2, 4)
            _assert_same_step(remote.step(actions), serial.step(actions), t)
    serial.close()


def _interrupt(*args: object) -> None:
    raise KeyboardInterrupt


class _FailsOnThirdStep(gymnasium.Wrapper):
    def __init__(self) -> None:
        super().__init__(gymnasium.make("CartPole-v1"))
        self.steps = 0

    def step(self, action: object) -> tuple:
        self.steps += 1
        if self.steps == 3:
            raise RuntimeError("env broke on step 3")
        return self.env.step(action)


def test_an_env_error_in_a_step_reaches_the_caller_and_the_env_stays_usable() -> None:
    with RemoteVectorEnv([CARTPOLE, _FailsOnThirdStep], num_workers=2) as remote:
        remote.reset(seed=0)
        remote.step(np.zeros(2, np.int64))
        remote.step(np.zeros(2, np.int64))
        with pytest.raises(RuntimeError, match="env broke on step 3"):
            remote.step(np.zeros(2, np.int64))
        obs, _ = remote.reset(seed=1)  # the other actor's loop is stopped cleanly
        assert remote.step(np.zeros(2, np.int64))[0].shape == obs.shape


def test_a_step_that_failed_in_every_actor_leaves_the_env_steppable_and_closable() -> None:
    """Both actors' envs raise on the same step: the error reaches the caller once; the next
    step runs (it used to wait forever for the second actor, whose failed loop was kept as if
    it still served) and ``close()`` does not raise that error again."""
    before = _children()
    remote = RemoteVectorEnv([_FailsOnThirdStep] * 2, num_workers=2)
    remote.reset(seed=0)
    remote.step(np.zeros(2, np.int64))
    remote.step(np.zeros(2, np.int64))
    with pytest.raises(RuntimeError, match="env broke on step 3"):
        remote.step(np.zeros(2, np.int64))
    obs, rewards, *_ = remote.step(np.zeros(2, np.int64))
    assert obs.shape == (2, 4) and rewards.tolist() == [1.0] * 2
    remote.close()
    with RemoteVectorEnv([_FailsOnThirdStep] * 2, num_workers=2) as remote:  # closed at once
        remote.reset(seed=0)
        remote.step(np.zeros(2, np.int64))
        remote.step(np.zeros(2, np.int64))
        with pytest.raises(RuntimeError, match="env broke on step 3"):
            remote.step(np.zeros(2, np.int64))
    assert wait_until(lambda: not (_children() - before), timeout=15.0, interval=0.05)


@pytest.mark.parametrize("num_workers", [1, 2])
def test_envs_with_different_spaces_are_refused_by_name(num_workers: int) -> None:
    """Env 2 differs from env 0: in the same actor (1 worker) or in another one (2), a
    ``ValueError`` names the env and both spaces, as gymnasium's vector envs refuse it (it used
    to surface as numpy's "could not broadcast" at ``reset``), and no actor is left behind."""
    before = _children()
    mountain_car = functools.partial(gymnasium.make, "MountainCar-v0")
    with pytest.raises(ValueError, match=r"env 2 has the observation space Box\(\[-1\.2"):
        RemoteVectorEnv([CARTPOLE] * 2 + [mountain_car] * 2, num_workers=num_workers)
    assert wait_until(lambda: not (_children() - before), timeout=15.0, interval=0.05)


def test_a_dead_actor_turns_the_step_into_an_error() -> None:
    before = _children()
    with RemoteVectorEnv.make("CartPole-v1", 2, num_workers=2) as remote:
        remote.reset(seed=0)
        remote.step(np.zeros(2, np.int64))
        victim = psutil.Process(max(_children() - before))
        victim.kill()
        victim.wait(10)
        with pytest.raises(parl.ParlError):
            remote.step(np.zeros(2, np.int64))


def _fds() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the descriptor listdir itself used
            pass
    return found


def _lasting(new: Callable[[], set[str]]) -> set[str]:
    """What ``new()`` still finds after a short grace: files of another test run on the
    machine, which may run at the same time, come and go within it."""
    wait_until(lambda: not new(), timeout=2.0, interval=0.05)
    return new()


def test_closing_leaves_no_shared_memory_pipe_or_descriptor_behind() -> None:
    bells = os.path.join(tempfile.gettempdir(), "parl-bell-*")
    bells_before = set(glob.glob(bells))
    shm_before = set(os.listdir("/dev/shm"))
    for _ in range(2):
        remote = RemoteVectorEnv.make("CartPole-v1", 6, num_workers=3)
        remote.reset(seed=0)
        remote.step(np.zeros(6, np.int64))
        assert sum("parl-bell-" in fd for fd in _fds()) == 6  # the FIFOs are open...
        assert not _lasting(lambda: set(glob.glob(bells)) - bells_before)  # ...already unlinked
        remote.close()
        del remote
        assert not any("parl-bell-" in fd for fd in _fds())  # our descriptors are closed
    assert not lasting_new_shm_entries(shm_before)


def test_remote_vector_env_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match="functions"):
        RemoteVectorEnv([])
    with pytest.raises(ValueError, match="num_workers"):
        RemoteVectorEnv([CARTPOLE], num_workers=0)
    with pytest.raises(ValueError, match="transport"):
        RemoteVectorEnv([CARTPOLE], transport="pipe")
    with pytest.raises(ValueError, match="num_envs"):
        RemoteVectorEnv.make("CartPole-v1", 0)
    with pytest.raises(TypeError, match="env_id"):
        RemoteVectorEnv.make(CARTPOLE, 2)  # type: ignore[arg-type]
    with pytest.raises(gymnasium.error.Error, match="NoSuchEnv"):
        RemoteVectorEnv.make("NoSuchEnv-v0", 2)


def test_parl_vector_env_resets_finished_envs() -> None:
    envs = [CompatWrapper(gymnasium.make("CartPole-v1", max_episode_steps=3)) for _ in range(2)]
    for i, env in enumerate(envs):
        env.seed(i)
    vector = VectorEnv(envs)
    first = vector.reset()
    assert len(first) == 2
    for _ in range(2):
        _, _, dones, _ = vector.step([0, 1])
        assert dones == [False, False]
    obs, rewards, dones, infos = vector.step([0, 1])
    assert dones == [True, True] and rewards == [1.0, 1.0]
    assert all(info["TimeLimit.truncated"] for info in infos)
    assert all(abs(o).max() <= 0.05 for o in obs)  # fresh starts are within +-0.05


def test_vector_reset_seeds_take_numpy_integers_and_name_a_bad_seed() -> None:
    from parl.env.batch_vector_env import BatchVectorEnv

    by_int, by_numpy = BatchVectorEnv("CartPole-v1", 3), BatchVectorEnv("CartPole-v1", 3)
    try:
        np.testing.assert_array_equal(by_int.reset(seed=4)[0], by_numpy.reset(seed=np.int64(4))[0])
        listed = [np.int32(4), np.int64(5), 6]
        np.testing.assert_array_equal(
            by_int.reset(seed=[4, 5, 6])[0], by_numpy.reset(seed=listed)[0]
        )
        with pytest.raises(ValueError, match=r"reset: seed must be an int >= 0, got -1"):
            by_int.reset(seed=-1)
        with pytest.raises(TypeError, match=r"reset: seed\[1\] must be an int >= 0"):
            by_int.reset(seed=[1, 2.0, 3])
        with pytest.raises(ValueError, match="reset needs 3 seeds, got 2"):
            by_int.reset(seed=[1, 2])
        with pytest.raises(TypeError, match="seed must be an int, None, or a list of 3 seeds"):
            by_int.reset(seed="7")
    finally:
        by_int.close()
        by_numpy.close()
