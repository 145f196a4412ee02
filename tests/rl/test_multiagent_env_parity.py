"""``MAenv`` against PARL 2.2.1's own ``parl/env/multiagent_env.py``, from the published wheel.

PARL's module wraps PettingZoo 1.17's MPE (``pettingzoo.mpe.simple_spread_v2``, ...) in a
``gym.Wrapper``. Here it runs on today's scenarios: ``pettingzoo.mpe`` is stood in for by mpe2's
scenarios behind PettingZoo 1.17's parallel API (``reset()`` returns the observations, ``step``
returns one ``done`` per agent), and ``gym`` by gymnasium's spaces with a plain wrapper. Both
envs then get the same seed and the same actions, in the forms PARL's MADDPG gives them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest

from parl.env.multiagent_env import MAenv

from .multiagent_support import require_multiagent
from .test_parl_parity import PARL_VERSION, parl_wheel  # noqa: F401 - the wheel fixture

# PARL's PettingZoo 1.17 module -> mpe2's
OLD_MODULES = {
    "simple_v2": "simple_v3",
    "simple_adversary_v2": "simple_adversary_v3",
    "simple_crypto_v2": "simple_crypto_v3",
    "simple_push_v2": "simple_push_v3",
    "simple_speaker_listener_v3": "simple_speaker_listener_v4",
    "simple_spread_v2": "simple_spread_v3",
    "simple_tag_v2": "simple_tag_v3",
    "simple_world_comm_v2": "simple_world_comm_v3",
}
PARL_SCENARIOS = [
    "simple",
    "simple_adversary",
    "simple_crypto",
    "simple_push",
    "simple_speaker_listener",
    "simple_spread",
    "simple_tag",
    "simple_world_comm",
]


class _OldParallelEnv:
    """A parallel env with PettingZoo 1.17's API; ``next_seed`` seeds the next reset."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.next_seed: int | None = None
        self.observation_spaces = {a: env.observation_space(a) for a in env.possible_agents}
        self.action_spaces = {a: env.action_space(a) for a in env.possible_agents}

    def reset(self) -> dict[str, np.ndarray]:
        obs, _ = self.env.reset(seed=self.next_seed)
        return obs

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict]:
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        return obs, rewards, {a: terms[a] or truncs[a] for a in terms}, infos


class _Wrapper:
    """gym 0.23's ``Wrapper``, as far as PARL's module uses it."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def __getattr__(self, name: str) -> Any:
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)


@pytest.fixture(scope="module")
def parls_maenv(parl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:  # noqa: F811
    """PARL's ``MAenv`` function, loaded from the wheel over the stand-ins."""
    require_multiagent()
    gym = types.ModuleType("gym")
    gym.Wrapper = _Wrapper  # type: ignore[attr-defined]
    gym.spaces = gymnasium.spaces  # type: ignore[attr-defined]
    mpe = types.ModuleType("pettingzoo.mpe")
    for old, new in OLD_MODULES.items():
        module = types.ModuleType(f"pettingzoo.mpe.{old}")
        scenario = importlib.import_module(f"mpe2.{new}")

        def parallel_env(_scenario: Any = scenario, **kwargs: Any) -> _OldParallelEnv:
            return _OldParallelEnv(_scenario.parallel_env(**kwargs))

        module.parallel_env = parallel_env  # type: ignore[attr-defined]
        setattr(mpe, old, module)
    source = tmp_path_factory.mktemp("parl-multiagent-env")
    with zipfile.ZipFile(parl_wheel) as archive:
        path = Path(archive.extract("parl/env/multiagent_env.py", source))
    stand_ins = {"gym": gym, "gym.spaces": gymnasium.spaces, "pettingzoo.mpe": mpe}
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        name = f"published_parl_{PARL_VERSION.replace('.', '_')}_multiagent_env"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value
    return module.MAenv


def _parl_actions(env: MAenv, rng: np.random.Generator) -> list[np.ndarray]:
    """Actions as PARL's MADDPG agents give them: a softmax over the actions, or a tanh."""
    if env.continuous_actions:
        return [np.tanh(rng.normal(size=d)).astype(np.float32) for d in env.act_shape_n]
    scores = [rng.normal(size=d) for d in env.act_shape_n]
    return [np.exp(x) / np.exp(x).sum() for x in scores]


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("name", PARL_SCENARIOS)
def test_maenv_steps_as_parls_does(parls_maenv: Any, name: str, continuous: bool) -> None:
    theirs, ours = parls_maenv(name, continuous), MAenv(name, continuous)
    assert (theirs.n, theirs.agents_name) == (ours.n, ours.agents_name)
    assert theirs.obs_shape_n == ours.obs_shape_n
    assert theirs.act_shape_n == ours.act_shape_n
    assert theirs.observation_space == ours.observation_space
    assert theirs.action_space == ours.action_space
    rng = np.random.default_rng(0)
    for episode in range(2):
        theirs.env.next_seed = episode
        for a, b in zip(theirs.reset(), ours.reset(seed=episode), strict=True):
            np.testing.assert_array_equal(a, b)
        for _ in range(ours.max_step):
            actions = _parl_actions(ours, rng)
            got, want = ours.step(actions), theirs.step(actions)
            for a, b in zip(got[0], want[0], strict=True):
                np.testing.assert_array_equal(a, b)
            assert got[1] == want[1] and got[2] == want[2]
        assert all(got[2])
    ours.close()
