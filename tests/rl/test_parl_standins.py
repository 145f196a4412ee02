"""The stand-ins ``scripts/run_parl_scripts.py`` puts on PARL's scripts' path (SMAC, the
particle envs, D4RL, transformers' GPT-2) keep the interfaces those scripts use, at tiny sizes.

Each stand-in is imported from its folder for one test and taken off ``sys.modules`` after, as
the harness puts it on one script's path only.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from .multiagent_support import require_multiagent
from .test_parl_scripts_harness import harness  # noqa: F401 - the harness module fixture

STANDINS = Path(__file__).resolve().parents[2] / "scripts" / "parl_standins"


@pytest.fixture
def standin(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """``(folder, module)``: the stand-in module, imported from ``STANDINS/folder``."""
    folder, module = request.param
    top = module.split(".")[0]
    sys.path.insert(0, str(STANDINS / folder))
    try:
        yield importlib.import_module(module)
    finally:
        sys.path.remove(str(STANDINS / folder))
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]


@pytest.mark.parametrize("standin", [("smac", "smac.env")], indirect=True)
def test_smac_stand_in_plays_an_episode_in_smacs_interface(standin: ModuleType) -> None:
    require_multiagent()
    env = standin.StarCraft2Env(map_name="3m", difficulty="7", seed=0)
    info = env.get_env_info()
    assert set(info) == {"state_shape", "obs_shape", "n_actions", "n_agents", "episode_limit"}
    obs, state = env.reset()
    assert len(obs) == info["n_agents"] == env.n_agents and obs[0].shape == (info["obs_shape"],)
    assert state.shape == (info["state_shape"],) and np.array_equal(env.get_state(), state)
    rng = np.random.default_rng(0)
    for _ in range(info["episode_limit"]):
        avail = np.array(env.get_avail_actions())
        assert avail.shape == (env.n_agents, env.n_actions) and avail.any(axis=1).all()
        assert env.get_avail_agent_actions(0) == avail[0].tolist()
        actions = [rng.choice(np.flatnonzero(row)) for row in avail]
        reward, terminated, step_info = env.step(actions)
        assert isinstance(reward, float) and isinstance(terminated, bool)
        if terminated:
            assert step_info["battle_won"] is env.win_counted
            break
    assert terminated  # within the episode's limit
    assert env.get_stats()["battles_game"] == 1
    env.close()


@pytest.mark.parametrize("standin", [("mpe", "multiagent.environment")], indirect=True)
def test_particle_env_stand_in_steps_one_hot_actions(standin: ModuleType) -> None:
    require_multiagent()
    from multiagent.scenarios import load

    scenario = load("simple_spread.py").Scenario()
    world = scenario.make_world()
    env = standin.MultiAgentEnv(
        world, scenario.reset_world, scenario.reward, scenario.observation, scenario.info
    )
    env.seed(1)
    obs = env.reset()
    assert len(obs) == env.n == 3
    sizes = [space.shape[0] for space in env.observation_space]
    assert [o.shape[0] for o in obs] == sizes
    assert all(s.shape == (sum(sizes),) for s in env.share_observation_space)
    assert all(type(space.n) is int for space in env.action_space)  # as gym's, not numpy's
    one_hot = [np.eye(space.n)[1] for space in env.action_space]
    obs, rewards, dones, infos = env.step(one_hot)
    assert np.array(rewards).shape == (3, 1) and dones == [False] * 3
    assert [info["individual_reward"] for info in infos] == [r[0] for r in rewards]
    with pytest.raises(ValueError, match="scenario file name"):
        load("simple_spread")


@pytest.mark.parametrize("standin", [("d4rl", "d4rl")], indirect=True)
def test_d4rl_stand_in_registers_old_api_envs_that_name_their_dataset(
    standin: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gymnasium

    from parl.utils.offline_data import D4RL_REF_SCORES

    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path))
    ids = [name for name, spec in gymnasium.registry.items() if spec.entry_point is standin._make]
    try:
        assert "halfcheetah-random-v0" in ids and "hopper-medium-expert-v0" in ids
        env = gymnasium.make("halfcheetah-random-v0")
        env.seed(0)
        obs = env.reset()  # the old gym API: one value, four from step
        assert obs.shape == (17,)
        assert len(env.step(env.action_space.sample())) == 4
        assert standin.dataset_folder(env.dataset_name) == tmp_path / "halfcheetah-random-v0"
        with pytest.raises(FileNotFoundError, match="halfcheetah-random-v0"):
            standin.qlearning_dataset(env)
        env.close()
    finally:  # the registry outlives this test's import of the stand-in
        for name in ids:
            del gymnasium.registry[name]
    # D4RL's normalised score is a fraction: random 0, expert 1
    random_score, expert_score = D4RL_REF_SCORES["halfcheetah"]
    scores = standin.get_normalized_score("halfcheetah-random-v0", [random_score, expert_score])
    np.testing.assert_allclose(scores, [0.0, 1.0], atol=1e-6)


@pytest.mark.parametrize("standin", [("transformers", "transformers")], indirect=True)
def test_transformers_stand_in_has_the_gpt2_pieces_dt_imports(standin: ModuleType) -> None:
    from transformers.activations import ACT2FN
    from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions
    from transformers.modeling_utils import (
        Conv1D,
        PreTrainedModel,
        find_pruneable_heads_and_indices,
        prune_conv1d_layer,
    )
    from transformers.utils.model_parallel_utils import assert_device_map, get_device_map

    config = standin.GPT2Config(vocab_size=1, n_embd=8, n_layer=2, max_length=5)
    assert (config.n_embd, config.n_layer, config.max_length, config.n_ctx) == (8, 2, 5, 1024)
    assert config.use_return_dict and not config.add_cross_attention
    layer = Conv1D(6, 4)
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(layer(x), x @ layer.weight + layer.bias)
    heads, index = find_pruneable_heads_and_indices(
        [1], n_heads=3, head_size=2, already_pruned_heads=set()
    )
    assert heads == {1} and index.tolist() == [0, 1, 4, 5]
    assert prune_conv1d_layer(layer, index, dim=1).weight.shape == (4, 4)
    out = BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=x)
    assert out["last_hidden_state"] is x and out.last_hidden_state is x and out[0] is x
    assert ACT2FN["relu"](torch.tensor([-1.0])).item() == 0.0
    assert get_device_map(3, [0, 1]) == {0: [0, 1], 1: [2]}
    assert_device_map({0: [0, 1], 1: [2]}, 3)

    class Tiny(PreTrainedModel):
        def __init__(self) -> None:
            super().__init__(config)
            self.fc = torch.nn.Linear(2, 2)
            self.init_weights()

        def _init_weights(self, module: torch.nn.Module) -> None:
            if isinstance(module, torch.nn.Linear):
                module.weight.data.fill_(0.5)

    model = Tiny()
    assert torch.all(model.fc.weight == 0.5) and model.dtype == torch.float32
    assert model.get_head_mask(None, 2) == [None, None]


def test_kaggle_positions_are_legal_unfinished_connect_four_boards(
    harness: ModuleType,  # noqa: F811
    tmp_path: Path,
) -> None:
    described = harness.kaggle_refmoves(tmp_path, boards=20)
    lines = (tmp_path / "refmoves1k_kaggle").read_text().splitlines()
    assert len(lines) == 20 and "20 random positions" in described
    for line in lines:
        record = json.loads(line)
        board = np.reshape(record["board"], (6, 7))
        scores = record["move score"]
        assert set(np.unique(board)) <= {0, 1, 2} and len(scores) == 7
        ones, twos = int((board == 1).sum()), int((board == 2).sum())
        assert ones - twos in (0, 1)  # the first player moves first
        for column in board.T:  # pieces lie on each other: no gap below a piece
            filled = np.flatnonzero(column)
            assert filled.size == 0 or filled.tolist() == list(range(6 - filled.size, 6))
        assert not harness._four_in_a_row(board.tolist())
        assert [s == -1000 for s in scores] == [bool(board[0, c]) for c in range(7)]
