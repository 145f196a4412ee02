"""``parl.env.RemoteVectorEnv`` on every carrier: on local workers its envs write into shared
arrays; on a cluster or Ray a shared array crosses as a copy, so it must pick the by-value
transport by itself (otherwise the caller would read its own zeros while the envs run)."""

from __future__ import annotations

import functools

import gymnasium
import numpy as np
import pytest

from parl.env import RemoteVectorEnv
from parl.remote.context import actors_share_memory

pytestmark = pytest.mark.usefixtures("carrier")


def test_trajectories_match_a_serial_vector_env(carrier):
    fns = [functools.partial(gymnasium.make, "CartPole-v1")] * 4
    serial = gymnasium.vector.SyncVectorEnv(fns)
    assert actors_share_memory() == (carrier == "local")
    with RemoteVectorEnv(fns, num_workers=2) as remote:
        assert remote._values == (carrier != "local")
        obs_r, _ = remote.reset(seed=7)
        obs_s, _ = serial.reset(seed=7)
        np.testing.assert_array_equal(obs_r, obs_s)
        rng = np.random.default_rng(0)
        for _ in range(60):  # past some episode ends: auto-reset included
            actions = rng.integers(0, 2, size=4)
            got, want = remote.step(actions), serial.step(actions)
            for a, b in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(a, b)
    serial.close()


def test_the_by_value_transport_works_everywhere(carrier):
    fns = [functools.partial(gymnasium.make, "CartPole-v1")] * 2
    with RemoteVectorEnv(fns, num_workers=2, transport="values") as remote:
        obs, _ = remote.reset(seed=1)
        assert obs.shape == (2, 4) and np.any(obs != 0)
