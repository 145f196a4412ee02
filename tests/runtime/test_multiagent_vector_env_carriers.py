"""``parl.env.MultiAgentVectorEnv`` on every carrier: on a cluster or Ray its actors return their
results, global states and masks by value, and the arrays are still those of a serial loop."""

from __future__ import annotations

import numpy as np
import pytest

from parl.env import MAenv, MultiAgentVectorEnv
from tests.rl.multiagent_support import SerialLoop, require_multiagent

pytestmark = pytest.mark.usefixtures("carrier")


def test_trajectories_match_a_serial_loop(carrier):
    require_multiagent()
    serial = SerialLoop([MAenv("simple_spread", max_cycles=6) for _ in range(4)], True)
    with MultiAgentVectorEnv.make("simple_spread", 4, num_workers=2, max_cycles=6) as venv:
        assert venv._values == (carrier != "local")
        obs, _ = venv.reset(seed=5)
        np.testing.assert_array_equal(obs, serial.reset(seed=5))
        rng = np.random.default_rng(0)
        for _ in range(8):  # past the episode ends
            actions = rng.integers(0, 5, size=(4, 3))
            got = venv.step(actions)[:4] + (venv.state(), venv.get_avail_actions())
            for a, b in zip(got, serial.step(actions)[:6], strict=True):
                np.testing.assert_array_equal(a, b)
    for env in serial.envs:
        env.close()
