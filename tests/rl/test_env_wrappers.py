"""``parl.env.CompatWrapper`` and ``ActionMappingWrapper`` against gymnasium's own behaviour;
``parl.env.make``'s errors (a missing extra, an unknown id, the wrong kind of action space)."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.spaces import Box
from gymnasium.wrappers import RescaleAction

from parl.env import ActionMappingWrapper, CompatWrapper, is_gym_version_ge, making
from parl.extras import install_command

UNIT = np.ones(1, dtype=np.float32)


class RecordingEnv(gymnasium.Env):
    """A Box-action env that returns the action it received as its observation."""

    def __init__(self) -> None:
        self.action_space = Box(np.array([-2.0, 0.0]), np.array([2.0, 10.0]), dtype=np.float64)
        self.observation_space = Box(-np.inf, np.inf, (2,), dtype=np.float64)
        self.closed = False

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return np.zeros(2), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return np.asarray(action, dtype=np.float64), 0.0, False, False, {}

    def render(self) -> Any:
        return np.full((4, 6, 3), 7, dtype=np.uint8)

    def close(self) -> None:
        self.closed = True


def test_reset_and_step_follow_gymnasium_with_the_old_api() -> None:
    raw = gymnasium.make("CartPole-v1")
    env = CompatWrapper(gymnasium.make("CartPole-v1"))
    expected_obs, _ = raw.reset(seed=3)
    env.seed(3)
    obs = env.reset()
    np.testing.assert_array_equal(obs, expected_obs)
    for t in range(600):
        action = t % 2 if t < 400 else 0
        r_obs, r_rew, term, trunc, _ = raw.step(action)
        result = env.step(action)
        assert len(result) == 4
        obs, rew, done, _ = result
        np.testing.assert_array_equal(obs, r_obs)
        assert rew == r_rew and done == (term or trunc)
        if done:
            break
    assert done


def test_time_limit_ends_the_episode_and_says_so() -> None:
    env = CompatWrapper(gymnasium.make("CartPole-v1", max_episode_steps=3))
    assert env._max_episode_steps == 3
    assert CompatWrapper(gymnasium.make("CartPole-v1"))._max_episode_steps == 500
    env.seed(0)
    env.reset()
    dones, infos = [], []
    for t in range(3):
        _, _, done, info = env.step(t % 2)
        dones.append(done)
        infos.append(info)
    assert dones == [False, False, True]
    assert infos[-1]["TimeLimit.truncated"] is True
    assert "TimeLimit.truncated" not in infos[0]


def test_seed_fixes_the_first_reset_and_later_resets_move_on() -> None:
    first = CompatWrapper(gymnasium.make("CartPole-v1"))
    second = CompatWrapper(gymnasium.make("CartPole-v1"))
    assert first.seed(7) == [7]
    second.seed(7)
    starts_a = [first.reset() for _ in range(3)]
    starts_b = [second.reset() for _ in range(3)]
    np.testing.assert_array_equal(np.array(starts_a), np.array(starts_b))
    assert not np.array_equal(starts_a[0], starts_a[1])  # not the same episode replayed
    assert first.action_space.sample() == second.action_space.sample()


def test_render_and_close_pass_through() -> None:
    inner = RecordingEnv()
    env = CompatWrapper(inner)
    env.reset()
    frame = env.render(mode="rgb_array")  # the old mode argument is accepted
    assert isinstance(frame, np.ndarray) and frame.shape == (4, 6, 3) and frame[0, 0, 0] == 7
    env.close()
    assert inner.closed


def test_compat_wrapper_rejects_what_is_not_a_gymnasium_env() -> None:
    with pytest.raises(TypeError, match="gymnasium env"):
        CompatWrapper(object())  # type: ignore[arg-type]


def test_is_gym_version_ge() -> None:
    assert is_gym_version_ge("0.26.0")
    assert is_gym_version_ge(gymnasium.__version__)
    assert not is_gym_version_ge("99.0")


def test_action_mapping_matches_gymnasium_rescale_action() -> None:
    mapped = ActionMappingWrapper(gymnasium.make("Pendulum-v1"))
    reference = RescaleAction(gymnasium.make("Pendulum-v1"), -UNIT, UNIT)
    assert mapped.action_space == reference.action_space
    mapped.reset(seed=1)
    reference.reset(seed=1)
    for value in (-1.0, -0.3, 0.0, 0.8, 1.0):
        action = np.array([value], dtype=np.float32)
        ours = mapped.step(action)
        theirs = reference.step(action)
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)


def test_action_mapping_per_dimension_bounds_tolerance_and_errors() -> None:
    env = ActionMappingWrapper(RecordingEnv())
    env.reset(seed=0)
    obs, *_ = env.step(np.array([-1.0, 1.0]))
    np.testing.assert_allclose(obs, [-2.0, 10.0])
    obs, *_ = env.step(np.array([0.5, 0.0]))
    np.testing.assert_allclose(obs, [1.0, 5.0])
    obs, *_ = env.step(np.array([1.0005, -1.0005]))  # within PARL's 1e-3 tolerance: clipped
    np.testing.assert_allclose(obs, [2.0, 0.0])
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        env.step(np.array([1.5, 0.0]))
    with pytest.raises(TypeError, match="Box"):
        ActionMappingWrapper(gymnasium.make("CartPole-v1"))


def test_action_mapping_over_compat_wrapper_keeps_the_old_api() -> None:
    """PARL's TD3 script: CompatWrapper, then ActionMappingWrapper, then ``env.seed(seed)``."""
    env = ActionMappingWrapper(CompatWrapper(gymnasium.make("Pendulum-v1")))
    assert env._max_episode_steps == 200
    assert env.seed(5) == [5]
    obs = env.reset()
    reference = RescaleAction(gymnasium.make("Pendulum-v1"), -UNIT, UNIT)
    np.testing.assert_array_equal(obs, reference.reset(seed=5)[0])
    result = env.step(np.array([0.5], dtype=np.float32))
    assert len(result) == 4
    np.testing.assert_allclose(result[0], reference.step(np.array([0.5], np.float32))[0])
    steps = 1
    while not result[2]:
        result = env.step(np.array([0.0], dtype=np.float32))
        steps += 1
    assert steps == 200 and result[3]["TimeLimit.truncated"]


def test_action_mapping_seed_on_a_plain_gymnasium_env() -> None:
    first = ActionMappingWrapper(gymnasium.make("Pendulum-v1"))
    second = ActionMappingWrapper(gymnasium.make("Pendulum-v1"))
    first.seed(9)
    second.seed(9)
    np.testing.assert_array_equal(first.reset()[0], second.reset()[0])
    np.testing.assert_array_equal(first.action_space.sample(), second.action_space.sample())


class Float32BoundsEnv(RecordingEnv):
    """Box(-3, 10) in float32: bounds that float32 arithmetic does not hit exactly."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = Box(-3.0, 10.0, (2,), dtype=np.float32)


def test_action_mapping_ends_land_exactly_on_float32_bounds() -> None:
    env = ActionMappingWrapper(Float32BoundsEnv())
    env.reset(seed=0)
    obs, *_ = env.step(np.array([1.0, -1.0], dtype=np.float32))
    assert obs.tolist() == [10.0, -3.0]
    obs, *_ = env.step(np.array([0.0, 0.5], dtype=np.float32))
    np.testing.assert_allclose(obs, [3.5, 6.75], rtol=1e-7)


class DiscreteRecordingEnv(gymnasium.Env):
    """Discrete(4) actions; the observation is the action received, as given."""

    observation_space = Box(-np.inf, np.inf, (1,), dtype=np.float64)
    action_space = gymnasium.spaces.Discrete(4)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        return np.zeros(1), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.received = action
        return np.zeros(1), 0.0, False, False, {}

    def ends_in(self) -> int:
        return 3


def test_compat_wrapper_takes_a_one_element_integer_array_as_a_discrete_action() -> None:
    # PARL's agents often return actions.flatten(): a (1,) array that old gym's Atari envs took.
    env = CompatWrapper(DiscreteRecordingEnv())
    env.reset()
    env.step(np.array([2]))
    assert env.unwrapped.received == 2 and type(env.unwrapped.received) is int
    env.step(np.int64(3))
    assert env.unwrapped.received == 3
    env.step(np.array([0.7]))  # not an integer array: passed on as it is
    assert isinstance(env.unwrapped.received, np.ndarray)


def test_compat_wrapper_finds_attributes_of_the_envs_inside_it() -> None:
    # old gym's Wrapper forwarded attribute lookups; PARL scripts call env.get_real_done() etc.
    env = CompatWrapper(gymnasium.wrappers.RecordEpisodeStatistics(DiscreteRecordingEnv()))
    assert env.ends_in() == 3
    assert env.get_wrapper_attr("ends_in") == env.ends_in
    with pytest.raises(AttributeError, match="the envs it wraps have no attribute 'nothing'"):
        env.nothing  # noqa: B018
    with pytest.raises(AttributeError):
        env._private_thing  # noqa: B018
    assert copy.deepcopy(env).ends_in() == 3  # no recursion while copying


def test_action_mapping_refuses_nan_actions() -> None:
    # a diverged policy: PARL's range assert stopped it, and so does this
    env = ActionMappingWrapper(RecordingEnv())
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"expects actions in \[-1, 1\] \(and no NaN\)"):
        env.step(np.array([0.0, np.nan]))


def test_wrapped_mujoco_envs_pickle_and_find_inner_attributes() -> None:
    import pickle

    env = ActionMappingWrapper(CompatWrapper(gymnasium.make("HalfCheetah-v5")))
    env.seed(3)
    first = env.reset()
    assert env.data is env.unwrapped.data  # old gym's wrappers found it through each layer
    copy_of = pickle.loads(pickle.dumps(env))
    copy_of.seed(3)
    np.testing.assert_array_equal(copy_of.reset(), first)
    obs, *_ = copy_of.step(np.ones(6, dtype=np.float32))
    assert obs.shape == (17,)


def test_seed_takes_numpy_integers_and_refuses_negative_or_non_integer_seeds() -> None:
    by_int, by_numpy = (CompatWrapper(gymnasium.make("CartPole-v1")) for _ in range(2))
    by_int.seed(11)
    assert by_numpy.seed(np.int64(11)) == [11]
    np.testing.assert_array_equal(by_int.reset(), by_numpy.reset())
    with pytest.raises(ValueError, match=r"seed must be an int of at least 0, or None, got -1"):
        by_int.seed(-1)
    with pytest.raises(TypeError, match=r"seed must be an int of at least 0, or None, got 1\.5"):
        by_int.seed(1.5)


# -- parl.env.make ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_id", "extra", "package"),
    [
        ("PongNoFrameskip-v4", "atari", "ale_py"),
        ("ALE/Breakout-v5", "atari", "ale_py"),
        ("HalfCheetah-v5", "mujoco", "mujoco"),
        ("Foraging-8x8-2p-3f-v3", "multiagent", "lbforaging"),
    ],
)
def test_an_env_of_a_missing_extra_names_the_extra_and_its_install_command(
    monkeypatch: pytest.MonkeyPatch, env_id: str, extra: str, package: str
) -> None:
    monkeypatch.setattr(making, "_installed", lambda module: module != package)
    for call in (making.check_env_id, making.make):
        with pytest.raises(ImportError) as caught:
            call(env_id)
        message = str(caught.value)
        assert message.startswith(f"{env_id} needs the {package} package"), message
        assert f"install the {extra} extra: {install_command(extra)}" in message


@pytest.mark.parametrize(
    ("env_id", "suggestion"),
    [
        ("CartPole-v2", "It provides versioned environments: [ `v0`, `v1` ]."),
        ("CartPol-v1", "Did you mean: `CartPole`?"),
        ("Nowhere/Thing-v0", "Namespace Nowhere not found."),
    ],
)
def test_an_unknown_id_names_gymnasiums_suggestion(env_id: str, suggestion: str) -> None:
    for call in (making.check_env_id, making.make):
        with pytest.raises(ValueError) as caught:
            call(env_id)
        assert str(caught.value).startswith(f"unknown env id {env_id!r}: ")
        assert suggestion in str(caught.value)


def test_an_mpe_scenario_is_sent_to_maenv() -> None:
    with pytest.raises(ValueError, match=r"'simple_spread' is a multi-agent .* parl.env.MAenv"):
        making.make("simple_spread")


def test_an_algorithm_on_the_wrong_kind_of_action_space_names_both_and_envs_that_fit() -> None:
    with pytest.raises(TypeError) as caught:
        making.make("CartPole-v1", action_space="continuous", algorithm="SAC")
    assert str(caught.value) == (
        "SAC needs a continuous (Box) action space; CartPole-v1 has Discrete(2); "
        "try Pendulum-v1 or a MuJoCo env"
    )
    with pytest.raises(TypeError) as caught:
        making.make("Pendulum-v1", action_space="discrete", algorithm="DQN")
    assert str(caught.value).startswith(
        "DQN needs a discrete action space; Pendulum-v1 has Box(-2.0, 2.0, (1,), float32); "
        "try CartPole-v1"
    )
    env = making.make("Pendulum-v1", action_space="continuous", algorithm="SAC")
    assert isinstance(env.action_space, Box)
    env.close()
    with pytest.raises(ValueError, match="kind must be 'continuous' or 'discrete', got 'box'"):
        making.check_action_space(Box(-1, 1), "X-v0", "box", "SAC")  # type: ignore[arg-type]
