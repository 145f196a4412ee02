"""``parl.env.MultiAgentVectorEnv``: multi-agent envs in actors give the arrays of the same envs
stepped one after another here (auto-reset, global states and masks included)."""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np
import pytest

from parl.env import MAenv, MultiAgentVectorEnv

from .conftest import REPO_ROOT, RunPython
from .multiagent_support import SerialLoop, require_multiagent

FORAGING = "Foraging-5x5-2p-1f-coop-v3"


@pytest.fixture(autouse=True)
def _multiagent_extra() -> None:
    require_multiagent()


def _actions(venv: MultiAgentVectorEnv, rng: np.random.Generator, continuous: bool) -> Any:
    if continuous:
        shape = venv.single_action_space.shape
        return rng.uniform(-1, 1, (venv.num_envs, *shape)).astype(np.float32)
    masks = venv.get_avail_actions()  # only available actions (foraging forbids some)
    return np.array(
        [[rng.choice(np.flatnonzero(m)) for m in env_masks] for env_masks in masks],
        dtype=np.int64,
    )


def _compare(
    name: str, mode: str, continuous: bool = False, transport: str | None = None, steps: int = 24
) -> None:
    num_envs, kwargs = 4, {"max_cycles": 7}
    serial = SerialLoop(
        [MAenv(name, continuous, **kwargs) for _ in range(num_envs)], mode == "SameStep"
    )
    with MultiAgentVectorEnv.make(
        name,
        num_envs,
        num_workers=2,
        continuous_actions=continuous,
        autoreset_mode=mode,
        transport=transport,
        **kwargs,
    ) as venv:
        obs, _ = venv.reset(seed=11)
        np.testing.assert_array_equal(obs, serial.reset(seed=11))
        rng, ended = np.random.default_rng(0), 0
        for _ in range(steps):  # past episode ends: auto-reset included
            actions = _actions(venv, rng, continuous)
            obs, rewards, terms, truncs, infos = venv.step(actions)
            want = serial.step(actions)
            for got, expected in zip(
                (obs, rewards, terms, truncs, venv.state(), venv.get_avail_actions()),
                want[:6],
                strict=True,
            ):
                np.testing.assert_array_equal(got, expected)
            for k, final in enumerate(want[6]):
                if final is None:
                    continue
                ended += 1
                if mode == "SameStep":
                    assert infos["_final_obs"][k]
                    np.testing.assert_array_equal(infos["final_obs"][k], final)
                    assert infos["final_info"]["episode"]["l"][k] >= 1
                else:
                    assert infos["_episode"][k]
        assert ended >= num_envs
    for env in serial.envs:
        env.close()


@pytest.mark.parametrize("mode", ["SameStep", "NextStep"])
def test_trajectories_equal_a_serial_loop(mode: str) -> None:
    # speaker and listener: observations of 3 and 11, actions of 3 and 5 (padding is tested)
    _compare("simple_speaker_listener", mode)


def test_continuous_actions_equal_a_serial_loop() -> None:
    _compare("simple_speaker_listener", "SameStep", continuous=True)


def test_foraging_masks_reach_the_caller() -> None:
    _compare(FORAGING, "SameStep", steps=30)


def test_the_by_value_transport_gives_the_same_arrays() -> None:
    _compare("simple_spread", "NextStep", transport="values", steps=10)


def test_shapes_and_episode_statistics() -> None:
    with MultiAgentVectorEnv.make("simple_spread", 3, num_workers=2, max_cycles=5) as venv:
        assert (venv.n_agents, venv.state_shape, venv.n_actions) == (3, 54, 5)
        assert venv.agents_name == ["agent_0", "agent_1", "agent_2"]
        obs, _ = venv.reset(seed=0)
        assert obs.shape == (3, 3, 18) and obs.dtype == np.float32
        assert venv.state().shape == (3, 54)
        assert venv.get_avail_actions().shape == (3, 3, 5) and venv.get_avail_actions().all()
        total = np.zeros((3, 3))
        for _ in range(5):
            obs, rewards, terms, truncs, infos = venv.step(np.zeros((3, 3), np.int64))
            total += rewards
        assert rewards.shape == terms.shape == truncs.shape == (3, 3)
        assert truncs.all() and not terms.any()
        episode = infos["final_info"]["episode"]
        np.testing.assert_allclose(episode["r"], total)
        assert episode["l"].tolist() == [5, 5, 5]
        assert infos["final_state"].shape == (3, 54)


def test_bad_input_gets_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown multi-agent env 'simple_sprad'"):
        MultiAgentVectorEnv.make("simple_sprad", 2)
    # refused here, before an actor starts to build an env that would refuse it
    with pytest.raises(ValueError, match="for MPE's particle scenarios"):
        MultiAgentVectorEnv.make("Foraging-8x8-2p-2f-coop-v3", 2, legacy_dynamics=True)
    with pytest.raises(ValueError, match="discrete actions only"):
        MultiAgentVectorEnv.make("Foraging-8x8-2p-2f-coop-v3", 2, continuous_actions=True)
    with pytest.raises(ValueError, match="unknown foraging id 'Foraging-8x8-2p-2f-coop-v2'"):
        MultiAgentVectorEnv.make("Foraging-8x8-2p-2f-coop-v2", 2)
    with pytest.raises(ValueError, match="num_envs"):
        MultiAgentVectorEnv.make("simple", 0)
    with pytest.raises(TypeError, match="must build MAenv"):
        MultiAgentVectorEnv([functools.partial(dict)], num_workers=1)  # type: ignore[list-item]
    with MultiAgentVectorEnv.make(FORAGING, 2, num_workers=1) as venv:
        with pytest.raises(RuntimeError, match=r"before reset\(\)"):  # not "not available"
            venv.step(np.zeros((2, 2), np.int64))
        venv.reset(seed=0)
        with pytest.raises(ValueError, match="one action per env"):
            venv.step(np.zeros(2, np.int64))
        with pytest.raises(TypeError, match="dtype"):
            venv.step(np.zeros((2, 2), np.float32))
        masks = venv.get_avail_actions()
        env, agent = next((k, i) for k in range(2) for i in range(2) if not masks[k, i].all())
        actions = np.zeros((2, 2), np.int64)
        actions[env, agent] = np.flatnonzero(~masks[env, agent])[0]
        with pytest.raises(ValueError, match="is not available"):
            venv.step(actions)
        venv.reset(seed=0)  # usable again after the error
        venv.step(np.zeros((2, 2), np.int64))


@pytest.mark.parametrize("continuous", [False, True])
def test_a_refused_step_moves_no_env(continuous: bool) -> None:
    """An action one env would refuse fails the step before any env of the batch moves, so the
    next steps are still those of the envs stepped one after another here."""
    make = functools.partial(MAenv, "simple_spread", continuous)
    with MultiAgentVectorEnv([make] * 3, num_workers=1) as venv:
        serial = SerialLoop([make() for _ in range(3)], same_step=True)
        obs, _ = venv.reset(seed=3)
        np.testing.assert_array_equal(obs, serial.reset(3))
        if continuous:
            good = np.full((3, 3, 5), 0.5, np.float32)
            bad = good.copy()
            bad[2, 1, 4] = 1.5
            match = r"env 2, agent 1 \(agent_1\): continuous actions lie in \[-1, 1\]"
        else:
            good = np.ones((3, 3), np.int64)
            bad = good.copy()
            bad[2, 1] = 5
            match = r"env 2, agent 1 \(agent_1\): action 5 is outside \[0, 5\)"
        with pytest.raises(ValueError, match=match):
            venv.step(bad)
        for _ in range(2):
            got = venv.step(good)
            want = serial.step(good)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


def test_the_benchmark_script_prints_the_ratio(run_python: RunPython) -> None:
    script = str(REPO_ROOT / "scripts" / "bench_multiagent_env.py")
    done = run_python(args=[script, "--envs", "8", "--seconds", "0.2", "--repeat", "1"])
    assert done.returncode == 0, done.stderr
    assert re.search(r"^ratio: \d+\.\d\dx$", done.stdout, re.M), done.stdout


def test_the_benchmark_script_says_which_envs_it_measures(run_python: RunPython) -> None:
    """Its help offered foraging ids, which it then refused."""
    script = str(REPO_ROOT / "scripts" / "bench_multiagent_env.py")
    shown = run_python(args=[script, "--help"])
    assert shown.returncode == 0 and "foraging id" not in shown.stdout, shown.stdout
    refused = run_python(args=[script, "--env", "Foraging-8x8-2p-2f-coop-v3"])
    assert refused.returncode == 2 and "use an MPE scenario" in refused.stderr
