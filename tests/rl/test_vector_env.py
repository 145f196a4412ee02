"""parl.env vector envs: RemoteVectorEnv against gymnasium's SyncVectorEnv, PARL's VectorEnv."""

from __future__ import annotations

import functools
import time

import gymnasium
import numpy as np
import psutil
import pytest

from parl.env import CompatWrapper, RemoteVectorEnv, VectorEnv

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


def test_remote_vector_env_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match="functions"):
        RemoteVectorEnv([])
    with pytest.raises(ValueError, match="num_workers"):
        RemoteVectorEnv([CARTPOLE], num_workers=0)
    with pytest.raises(ValueError, match="transport"):
        RemoteVectorEnv([CARTPOLE], transport="pipe")


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
