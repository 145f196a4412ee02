"""``parl.env.multiagent_env.MAenv``: PARL's multi-agent interface over mpe2's MPE scenarios and
lbforaging, its global state, masks, seeding and errors."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from parl.env.multiagent_env import MAenv
from parl.env.multiagent_scenarios import MPE_SCENARIOS, check_env_id

from .multiagent_support import require_multiagent

FORAGING = "Foraging-8x8-2p-2f-coop-v3"


@pytest.fixture(autouse=True)
def _multiagent_extra() -> None:
    require_multiagent()


@pytest.fixture
def spread() -> Iterator[MAenv]:
    with MAenv("simple_spread") as env:
        yield env


def _random_actions(env: MAenv, rng: np.random.Generator) -> list[Any]:
    if env.continuous_actions:
        return [rng.uniform(-1.0, 1.0, size).astype(np.float32) for size in env.act_shape_n]
    return [int(rng.choice(np.flatnonzero(env.get_avail_agent_actions(i)))) for i in range(env.n)]


def _record_env_actions(env: MAenv) -> list[dict[str, Any]]:
    """Every dict of actions MAenv hands to the parallel env, from now on."""
    seen: list[dict[str, Any]] = []
    step = env.env.step

    def recording(actions: dict[str, Any]) -> Any:
        seen.append(dict(actions))
        return step(actions)

    env.env.step = recording  # type: ignore[method-assign]
    return seen


def test_simple_spread_has_parls_interface(spread: MAenv) -> None:
    assert spread.n == 3 and spread.agents_name == ["agent_0", "agent_1", "agent_2"]
    assert all(isinstance(s, spaces.Box) for s in spread.observation_space)
    assert spread.action_space == [spaces.Discrete(5)] * 3
    assert spread.obs_shape_n == [18] * 3 and spread.act_shape_n == [5] * 3
    assert spread.max_step == 25
    obs_n = spread.reset(seed=0)
    assert isinstance(obs_n, list) and [o.shape for o in obs_n] == [(18,)] * 3
    np.testing.assert_array_equal(spread.state(), np.concatenate(obs_n))
    assert spread.state_shape == 54 and spread.share_observation_space == [spread.state_space] * 3
    for step in range(1, 26):
        obs_n, reward_n, done_n, info_n = spread.step([0, 1, 2])
        assert len(obs_n) == len(reward_n) == len(done_n) == len(info_n) == 3
        assert all(isinstance(r, float) for r in reward_n)
        assert reward_n[0] == reward_n[1] == reward_n[2]  # local_ratio=0: one shared reward
        assert done_n == [step == 25] * 3
    assert spread.truncations == [True] * 3 and spread.terminations == [False] * 3


def test_other_names_are_the_parallel_envs_as_through_a_gym_wrapper(spread: MAenv) -> None:
    spread.reset(seed=0)
    assert spread.possible_agents == spread.agents_name  # PettingZoo's name
    assert spread.unwrapped is spread.env.unwrapped and spread.unwrapped.world is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        spread.no_such_name  # noqa: B018


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("name", list(MPE_SCENARIOS))
def test_every_mpe_scenario_constructs_and_steps(name: str, continuous: bool) -> None:
    rng = np.random.default_rng(0)
    with MAenv(name, continuous, max_cycles=3) as env:
        space_type = spaces.Box if continuous else spaces.Discrete
        assert all(isinstance(s, space_type) for s in env.action_space)
        obs_n = env.reset(seed=1)
        for _ in range(3):
            assert [o.shape[0] for o in obs_n] == env.obs_shape_n
            assert env.state().shape == (env.state_shape,)
            np.testing.assert_array_equal(env.state(), env.env.state())  # read off obs_n
            obs_n, reward_n, done_n, _ = env.step(_random_actions(env, rng))
            assert len(reward_n) == env.n
        assert all(done_n)


@pytest.mark.parametrize("name", list(MPE_SCENARIOS))
def test_mpe2s_versioned_id_opens_the_same_scenario(name: str) -> None:
    versioned = MPE_SCENARIOS[name][0]
    with MAenv(name) as ours, MAenv(versioned) as theirs:
        assert ours.agents_name == theirs.agents_name
        assert ours.observation_space == theirs.observation_space
        np.testing.assert_array_equal(ours.reset(seed=3)[0], theirs.reset(seed=3)[0])


def test_parls_scenario_sizes() -> None:
    sizes = {"simple_adversary": 3, "simple_tag": 4, "simple_world_comm": 6}
    for name, n in sizes.items():
        with MAenv(name) as env:
            assert env.n == n, name
    with MAenv("simple_spread", N=4) as env:  # keyword arguments reach the scenario
        assert env.n == 4


def test_continuous_actions_map_minus_one_one_onto_the_space() -> None:
    with MAenv("simple_spread", continuous_actions=True) as env:
        assert env.action_space[0] == spaces.Box(0.0, 1.0, (5,), np.float32)
        seen = _record_env_actions(env)
        env.reset(seed=0)
        low, mid, high = (np.full(5, v, np.float32) for v in (-1.0, 0.0, 1.0))
        env.step([low, mid, high])
        got = seen[0]
        np.testing.assert_allclose(got["agent_0"], 0.0)
        np.testing.assert_allclose(got["agent_1"], 0.5)
        np.testing.assert_allclose(got["agent_2"], 1.0)


def test_a_discrete_action_is_an_index_or_the_argmax_of_scores(spread: MAenv) -> None:
    seen = _record_env_actions(spread)
    spread.reset(seed=0)
    scores = np.array([0.1, 0.05, 0.6, 0.2, 0.05], np.float32)  # what PARL's MADDPG gives
    spread.step([scores, np.int64(4), 1])
    assert seen[0] == {"agent_0": 2, "agent_1": 4, "agent_2": 1}


def test_a_one_element_int_array_is_an_index_as_parls_coma_agent_samples_it(
    spread: MAenv,
) -> None:
    """PARL's COMA agent samples a Categorical over ``(1, n_actions)`` probabilities, which gives
    an index of shape ``(1,)`` (a tensor); SMAC took it, and so does MAenv. A float one is
    still refused, and so is an index out of range."""
    torch = pytest.importorskip("torch")
    seen = _record_env_actions(spread)
    spread.reset(seed=0)
    probs = torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]])
    sampled = torch.distributions.Categorical(probs).sample()
    assert tuple(sampled.shape) == (1,)
    spread.step([sampled, np.array([2]), torch.argmax(probs)])
    assert seen[0] == {"agent_0": 3, "agent_1": 2, "agent_2": 3}
    with pytest.raises(ValueError, match="got shape"):
        spread.step([np.array([2.0]), 0, 0])
    with pytest.raises(ValueError, match=r"action 7 is outside \[0, 5\)"):
        spread.step([np.array([7]), 0, 0])


def test_every_agents_action_in_one_tensor_is_one_action_per_row(spread: MAenv) -> None:
    """A policy's batched output, ``(n,)`` indices or ``(n, act_dim)`` rows, as a torch tensor
    steps as the same array would, instead of being refused as not being ``n`` actions."""
    torch = pytest.importorskip("torch")
    seen = _record_env_actions(spread)
    spread.reset(seed=0)
    spread.step(torch.tensor([4, 0, 2]))
    spread.step(torch.eye(5)[[1, 3, 0]])  # one row of scores per agent
    assert seen == [
        {"agent_0": 4, "agent_1": 0, "agent_2": 2},
        {"agent_0": 1, "agent_1": 3, "agent_2": 0},
    ]
    with pytest.raises(ValueError, match="needs a list of 3 actions .* got 2"):
        spread.step(torch.tensor([4, 0]))
    with MAenv("simple_spread", continuous_actions=True) as env:
        env.reset(seed=0)
        by_tensor = env.step(torch.full((3, 5), 0.5))[0]
        env.reset(seed=0)
        by_array = env.step(np.full((3, 5), 0.5, np.float32))[0]
        for a, b in zip(by_tensor, by_array, strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_same_seed_gives_the_same_episode() -> None:
    def episode(seed: int, use_seed_method: bool) -> list[np.ndarray]:
        rng = np.random.default_rng(0)
        with MAenv("simple_tag") as env:
            if use_seed_method:
                env.seed(seed)
                out = env.reset()
            else:
                out = env.reset(seed=seed)
            for _ in range(10):
                obs_n, reward_n, _, _ = env.step(_random_actions(env, rng))
                out += [*obs_n, np.array(reward_n)]
            return out

    first = episode(7, False)
    for a, b in zip(first, episode(7, True), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(first, episode(8, False), strict=True))


@pytest.mark.parametrize("name", ["simple_tag", FORAGING])
def test_a_seed_gives_the_same_episode_whatever_came_before(name: str) -> None:
    """lbforaging spawns players away from where the last episode left them: an env that has
    played must reset to a seed's episode as a fresh one does (a resumed run meets it so)."""
    with MAenv(name) as fresh, MAenv(name) as played:
        rng = np.random.default_rng(0)
        for seed in range(8):
            played.reset(seed=seed)  # the players start on the cells the seed spawns them on
            for _ in range(2):
                played.step(_random_actions(played, rng))
            first = np.concatenate(fresh.reset(seed=seed))
            np.testing.assert_array_equal(np.concatenate(played.reset(seed=seed)), first)
            np.testing.assert_array_equal(played.get_avail_actions(), fresh.get_avail_actions())


def test_mpe_allows_every_action_and_pads_shorter_masks() -> None:
    with MAenv("simple_speaker_listener") as env:
        env.reset(seed=0)
        masks = env.get_avail_actions()
        assert masks.dtype == np.bool_ and masks.shape == (2, 5)
        assert masks.tolist() == [[True] * 3 + [False] * 2, [True] * 5]
        assert env.get_avail_agent_actions(0).tolist() == [True] * 3
        assert env.get_env_info() == {
            "n_agents": 2,
            "n_actions": 5,
            "obs_shape": 11,
            "state_shape": 14,
            "episode_limit": 25,
        }


def test_foraging_masks_are_lbforagings_own_rule() -> None:
    rng = np.random.default_rng(0)
    with MAenv(FORAGING) as env:
        assert env.n == 2 and env.action_space == [spaces.Discrete(6)] * 2
        assert env.max_step == 50 and env.state_shape == 2 * env.obs_shape_n[0]
        game = env.env._game  # lbforaging's own valid actions, to compare with
        masked_somewhere = False
        for episode in range(3):
            obs_n = env.reset(seed=episode)
            done = False
            while not done:
                np.testing.assert_array_equal(env.state(), np.concatenate(obs_n))
                masks = env.get_avail_actions()
                want = [sorted(a.value for a in game._valid_actions[p]) for p in game.players]
                assert [np.flatnonzero(m).tolist() for m in masks] == want
                masked_somewhere |= not masks.all()
                obs_n, _, done_n, _ = env.step(_random_actions(env, rng))
                done = all(done_n)
            assert env.terminations != env.truncations  # food gone, or out of time
        assert masked_somewhere


def test_foraging_episode_length() -> None:
    with MAenv(FORAGING, max_cycles=7) as env:
        assert env.max_step == 7 and env.get_env_info()["episode_limit"] == 7
        env.reset(seed=0)
        dones = [all(env.step([0, 0])[2]) for _ in range(7)]
        assert dones == [False] * 6 + [True] and env.truncations == [True, True]


def test_foraging_refuses_a_masked_action() -> None:
    with MAenv(FORAGING) as env:
        env.reset(seed=0)
        masks = env.get_avail_actions()
        agent, action = next(
            (i, int(np.flatnonzero(~m)[0])) for i, m in enumerate(masks) if not m.all()
        )
        actions: list[Any] = [0, 0]
        actions[agent] = action
        with pytest.raises(ValueError, match=f"action {action} is not available"):
            env.step(actions)
    with pytest.raises(ValueError, match="discrete actions only"):
        MAenv(FORAGING, continuous_actions=True)
    with pytest.raises(ValueError, match="for MPE's particle scenarios"):
        MAenv(FORAGING, legacy_dynamics=True)


def test_foraging_can_end_by_termination() -> None:
    # one food that both players can reach: it is eaten well before 50 steps
    with MAenv("Foraging-5x5-2p-1f-coop-v3") as env:
        rng = np.random.default_rng(0)
        for episode in range(20):
            env.reset(seed=episode)
            done = False
            while not done:
                masks = env.get_avail_actions()
                load = [5 if m[5] else int(rng.choice(np.flatnonzero(m))) for m in masks]
                _, reward_n, done_n, _ = env.step(load)
                done = all(done_n)
            if env.terminations == [True, True]:
                assert sum(reward_n) > 0
                return
    pytest.fail("no foraging episode ended with the food eaten")


def test_foraging_renders_only_in_the_mode_it_was_made_with() -> None:
    """Made without a render mode, render() warns and returns nothing (lbforaging itself would
    open a window); a mode it cannot render is refused by name when the env is made."""
    drawing = "pyglet" in sys.modules  # lbforaging's viewer imports it
    with MAenv("Foraging-5x5-2p-1f-coop-v3") as env:
        env.reset(seed=0)
        with pytest.warns(UserWarning, match="without a render mode"):
            assert env.render() is None
    assert ("pyglet" in sys.modules) == drawing
    with pytest.raises(ValueError, match="render_mode='ansi'.*'human'.*'rgb_array'"):
        MAenv("Foraging-5x5-2p-1f-coop-v3", render_mode="ansi")


def test_check_env_id_accepts_every_foraging_id_lbforaging_registers_and_no_other() -> None:
    """Read off the id without importing lbforaging, so checked here against its registry."""
    import gymnasium
    import lbforaging  # noqa: F401  (registers its ids)

    registered = [name for name in gymnasium.registry if name.startswith("Foraging-")]
    registered = [name for name in registered if not name.startswith("Foraging-grid")]
    assert len(registered) > 1000
    for name in registered:
        check_env_id(name)
    for name in ("Foraging", "Foraging-8x8-2p-2f-coop-v2", "Foraging-8x9-2p-2f-v3"):
        with pytest.raises(ValueError, match=f"unknown foraging id '{name}'"):
            check_env_id(name)
    # a variant this process registered itself is the user's to open
    gymnasium.register("Foraging-mine-v0", entry_point="lbforaging.foraging:ForagingEnv")
    try:
        check_env_id("Foraging-mine-v0")
    finally:
        del gymnasium.registry["Foraging-mine-v0"]


def test_a_missing_multiagent_extra_is_a_usage_error_of_the_examples(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``importable=True`` (the examples' parse-time check) imports the package the env needs;
    one that does not import is the examples' one-line usage error with the install command."""
    import argparse

    from parl.utils.train_flags import refuse_as_usage

    check_env_id("simple_spread", importable=True)
    check_env_id("Foraging-8x8-2p-2f-coop-v3", importable=True)
    monkeypatch.setitem(sys.modules, "mpe2.simple_spread_v3", None)
    monkeypatch.setitem(sys.modules, "lbforaging.foraging", None)
    check_env_id("simple_spread")  # the name alone: no import
    parser = argparse.ArgumentParser(prog="train.py")
    for env_id, words in (
        ("simple_spread", "MPE scenario 'simple_spread' needs mpe2: install the multiagent extra"),
        ("Foraging-8x8-2p-2f-coop-v3", "needs lbforaging: install the multiagent extra: pip"),
    ):
        with pytest.raises(SystemExit) as exited:
            refuse_as_usage(parser, lambda: check_env_id(env_id, importable=True))  # noqa: B023
        err = capsys.readouterr().err
        assert exited.value.code == 2 and words in err and "Traceback" not in err, err


def test_bad_input_gets_clear_errors(spread: MAenv) -> None:
    with pytest.raises(ValueError, match=r"unknown multi-agent env 'simple_sprad'.*simple_spread"):
        MAenv("simple_sprad")
    with pytest.raises(ValueError, match="unknown foraging id 'Foraging-3x3-2p-2f-v3'"):
        MAenv("Foraging-3x3-2p-2f-v3")
    with pytest.raises(ValueError, match="max_cycles"):
        MAenv("simple", max_cycles=0)
    with pytest.raises(ValueError, match="render_mode='rgb'"):  # rendered nothing, silently
        MAenv("simple", render_mode="rgb")
    # a misspelt keyword names the env asked for and the keywords it takes
    with pytest.raises(
        TypeError, match=r"MPE scenario 'simple_spread' takes no keyword 'n'.*\bN\b"
    ):
        MAenv("simple_spread", n=4)
    with pytest.raises(
        TypeError, match=r"Foraging-5x5-2p-1f-coop-v3 takes no keyword 'sigth'.*sight"
    ):
        MAenv("Foraging-5x5-2p-1f-coop-v3", sigth=2)
    with MAenv("simple_spread", N=4) as env, MAenv("Foraging-5x5-2p-1f-coop-v3", sight=2) as lbf:
        assert env.n == 4 and lbf.n == 2  # the scenarios' own keywords still go through
    with pytest.raises(RuntimeError, match="before reset"):
        spread.step([0, 0, 0])
    with pytest.raises(RuntimeError, match=r"state\(\) before reset"):
        spread.state()
    with MAenv(FORAGING) as env:  # its masks read the field, which the first reset lays out
        for call in (env.state, env.get_avail_actions, lambda: env.get_avail_agent_actions(0)):
            with pytest.raises(RuntimeError, match="before reset"):
                call()
    spread.reset(seed=0)
    with pytest.raises(ValueError, match="list of 3 actions"):
        spread.step([0, 0])
    with pytest.raises(ValueError, match=r"agent 1 \(agent_1\): action 5 is outside \[0, 5\)"):
        spread.step([0, 5, 0])
    with pytest.raises(TypeError, match="an int in"):
        spread.step([0, 1.0, 0])
    with pytest.raises(ValueError, match="shape"):
        spread.step([0, np.zeros(4), 0])
    for lone in (2, None, np.array(2), (a for a in [0, 0, 0])):  # no list around the actions
        with pytest.raises(ValueError, match="list of 3 actions"):
            spread.step(lone)  # type: ignore[arg-type]
    scores = np.array([0.0, np.nan, 0.0, 0.0, 1.0])  # a diverged policy's, not action 0
    with pytest.raises(ValueError, match=r"agent 2 \(agent_2\): a vector of 5 scores.*NaN"):
        spread.step([0, 0, scores])
    for _ in range(25):
        spread.step([0, 0, 0])
    with pytest.raises(RuntimeError, match="after the episode ended"):
        spread.step([0, 0, 0])
    with MAenv("simple", continuous_actions=True) as env:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"lie in \[-1, 1\]"):
            env.step([np.full(5, 1.5, np.float32)])
        with pytest.raises(ValueError, match="shape"):
            env.step([np.zeros(3, np.float32)])
        env.step([np.full(5, 1.0005, np.float32)])  # a tanh's rounding is let through


def test_parls_maddpg_script_runs_its_episodes(tmp_path: Any) -> None:
    """The part of PARL's MADDPG benchmark (``benchmark/torch/maddpg/train.py``) that builds and
    steps the env, with actions shaped as its agents give them."""
    rng = np.random.default_rng(0)
    for continuous in (False, True):
        env = MAenv("simple_speaker_listener", continuous)
        if continuous:
            assert isinstance(env.action_space[0], spaces.Box)
        critic_in_dim = sum(env.obs_shape_n) + sum(env.act_shape_n)
        assert critic_in_dim == 3 + 11 + 3 + 5
        for _ in range(2):
            obs_n = env.reset()
            done, steps, total = False, 0, 0.0
            agents_reward = [0.0 for _ in range(env.n)]
            while not done and steps < 25:
                steps += 1
                if continuous:
                    action_n = [np.tanh(rng.normal(size=d)) for d in env.act_shape_n]
                else:  # a softmax over the actions, as MADDPG's sample() gives
                    scores = [rng.normal(size=d) for d in env.act_shape_n]
                    action_n = [np.exp(x) / np.exp(x).sum() for x in scores]
                next_obs_n, reward_n, done_n, _ = env.step(action_n)
                done = all(done_n)
                for i in range(env.n):
                    assert next_obs_n[i].shape == (env.obs_shape_n[i],) and done_n[i] in (
                        True,
                        False,
                    )
                    agents_reward[i] += reward_n[i]
                obs_n = next_obs_n
                total += sum(reward_n)
            assert steps == 25 and done and len(obs_n) == 2
            assert total == pytest.approx(sum(agents_reward))
        env.close()


def test_a_missing_dependency_of_mpe2_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # mpe2 installed without pygame (a --no-deps install): the message names pygame, not mpe2
    import sys

    for name in [n for n in sys.modules if n == "mpe2" or n.startswith("mpe2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pygame", None)
    with pytest.raises(ImportError, match=r"needs mpe2 and its dependencies \(missing here: "
                       r"pygame\): install the multiagent extra: pip install"):  # fmt: skip
        MAenv("simple_spread")


def test_a_numpy_seed_is_an_int_seed_and_a_negative_one_is_named() -> None:
    with MAenv("simple_spread") as by_int, MAenv("simple_spread") as by_numpy:
        by_numpy.seed(np.int64(3))
        for a, b in zip(by_int.reset(seed=3), by_numpy.reset(), strict=True):
            np.testing.assert_array_equal(a, b)
        with pytest.raises(ValueError, match=r"MAenv: seed must be an int >= 0, got -2"):
            by_int.reset(seed=-2)
