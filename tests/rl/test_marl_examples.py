"""The QMIX and COMA examples: a stopped-and-resumed run equals a run straight through, on MPE's
simple_spread, and both run on level-based foraging (changing action masks)."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest
import torch

from .conftest import REPO_ROOT, RunPython
from .multiagent_support import assert_flags_refused
from .test_offpolicy_examples import assert_same_weights, run_example

pytestmark = pytest.mark.slow  # the example scripts, run for real

SHORT = ["--train_total_steps", "300", "--test_every_steps", "150", "--eval_episodes", "1"]
OWN = {
    "QMIX": ["--batch_size", "4", "--save_rpm", "--update_target_interval", "3"],
    "COMA": ["--episodes_per_iteration", "2", "--target_update_cycle", "3"],
}


@pytest.mark.parametrize("name", list(OWN))
def test_marl_example_resume_equals_straight_run(
    run_python: RunPython, tmp_path: Path, name: str
) -> None:
    args = [*SHORT, *OWN[name]]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_example(run_python, name, *args, "--logdir", str(straight))
    run_example(run_python, name, *args, "--logdir", str(resumed), "--stop_after_steps", "150")
    stopped = torch.load(resumed / "model.ckpt", weights_only=True)
    log = run_example(run_python, name, *args, "--logdir", str(resumed), "--resume")
    assert "resumed from" in log
    assert_same_weights(straight / "model.ckpt", resumed / "model.ckpt")
    final = torch.load(resumed / "model.ckpt", weights_only=True)
    assert any(not torch.equal(stopped[k], final[k]) for k in final)  # it did train on
    assert glob.glob(str(straight / "events.out.tfevents.*"))


@pytest.mark.parametrize("name", list(OWN))
def test_marl_example_legacy_dynamics_reach_the_env_and_a_resume_keeps_them(
    run_python: RunPython, tmp_path: Path, name: str
) -> None:
    """``--legacy_dynamics``: the same seed trains another run (for QMIX, whose first episodes
    act at random: the same actions, other rewards); resuming without the flag is refused by
    name, and foraging, which has no such dynamics, refuses the flag."""
    args = [*SHORT, *OWN[name]]
    legacy, plain = tmp_path / "legacy", tmp_path / "plain"
    run_example(run_python, name, *args, "--legacy_dynamics", "--logdir", str(legacy))
    run_example(run_python, name, *args, "--logdir", str(plain))
    weights = [torch.load(run / "model.ckpt", weights_only=True) for run in (legacy, plain)]
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    if name == "QMIX":
        memories = [np.load(run / "rpm.npz") for run in (legacy, plain)]
        np.testing.assert_array_equal(memories[0]["actions"][0], memories[1]["actions"][0])
        assert not np.array_equal(memories[0]["reward"][0], memories[1]["reward"][0])
    script = str(REPO_ROOT / "examples" / name / "train.py")
    proc = run_python(
        args=[script, "--no_progress", *args, "--logdir", str(legacy), "--resume"], timeout=180
    )
    assert proc.returncode != 0
    assert "written with --legacy_dynamics; this run is without --legacy_dynamics" in proc.stderr
    foraging = [*args, "--env", "Foraging-8x8-2p-2f-coop-v3", "--legacy_dynamics"]
    proc = run_python(args=[script, "--no_progress", *foraging, "--logdir", str(tmp_path / "f")])
    assert proc.returncode == 2 and "for MPE's particle scenarios" in proc.stderr


@pytest.mark.parametrize(
    ("name", "flags", "message"),
    [
        ("QMIX", ["--env", "simple_sprad"], "unknown multi-agent env 'simple_sprad'"),
        ("COMA", ["--env", "Foraging-8x8-2p"], "unknown foraging id 'Foraging-8x8-2p'"),
        ("COMA", ["--legacy_dynamics"], "for MPE's particle scenarios"),
        ("MAPPO", ["--legacy_dynamics"], "for MPE's particle scenarios"),
        ("MAPPO", ["--continuous_actions"], "discrete actions only"),
        ("MADDPG", ["--continuous_actions"], "discrete actions only"),
    ],
)
def test_marl_examples_refuse_an_env_they_cannot_open_as_a_usage_error(
    run_python: RunPython, tmp_path: Path, name: str, flags: list[str], message: str
) -> None:
    """An ``--env`` the run cannot open with its other flags ends the run before it starts:
    the usage line and the reason, exit status 2, no traceback, nothing written."""
    script = str(REPO_ROOT / "examples" / name / "train.py")
    env = [] if "--env" in flags else ["--env", "Foraging-8x8-2p-2f-coop-v3"]
    logdir = tmp_path / "run"
    proc = run_python(args=[script, *env, *flags, "--logdir", str(logdir)], timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "usage:" in proc.stderr and message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not logdir.exists()


@pytest.mark.parametrize("name", list(OWN))
def test_marl_example_runs_on_foraging(run_python: RunPython, tmp_path: Path, name: str) -> None:
    args = [*SHORT, *OWN[name], "--env", "Foraging-8x8-2p-2f-coop-v3"]
    log = run_example(run_python, name, *args, "--logdir", str(tmp_path))
    assert "done: " in log


@pytest.mark.parametrize("name", list(OWN))
def test_marl_example_runs_where_agents_see_different_amounts(
    run_python: RunPython, tmp_path: Path, name: str
) -> None:
    """In simple_world_comm the agents' observations differ in length and its leader has more
    actions than the rest: shorter observations are zero-padded to the longest."""
    short = ["--train_total_steps", "150", "--test_every_steps", "150", "--eval_episodes", "1"]
    args = [*short, *OWN[name], "--env", "simple_world_comm"]
    log = run_example(run_python, name, *args, "--logdir", str(tmp_path))
    assert "done: " in log


@pytest.mark.parametrize("name", list(OWN))
def test_marl_example_refuses_to_resume_on_another_env(
    run_python: RunPython, tmp_path: Path, name: str
) -> None:
    """Foraging with and without ``-coop`` has the same spaces: the checkpoint would load and the
    run go on in another game; the resume is refused by ``--env``."""
    short = ["--train_total_steps", "50", "--test_every_steps", "50", "--eval_episodes", "1"]
    args = [*short, *OWN[name], "--logdir", str(tmp_path)]
    run_example(run_python, name, *args, "--env", "Foraging-5x5-2p-1f-coop-v3")
    script = str(REPO_ROOT / "examples" / name / "train.py")
    argv = [script, "--no_progress", *args, "--env", "Foraging-5x5-2p-1f-v3", "--resume"]
    proc = run_python(args=argv, timeout=180)
    assert proc.returncode != 0
    assert (
        "written with --env Foraging-5x5-2p-1f-coop-v3; this run is with --env "
        "Foraging-5x5-2p-1f-v3" in proc.stderr
    ), proc.stderr[-2000:]


def test_qmix_example_holds_ctrl_c_until_the_checkpoint_and_memory_are_written(
    run_python: RunPython,
) -> None:
    code = (
        "import os, signal, sys, time\n"
        f"sys.path.insert(0, {str(REPO_ROOT / 'examples' / 'QMIX')!r})\n"
        "import threading, train\n"
        "# Ctrl-C as in a terminal, whatever the test runner left (a background job ignores it)\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "# another thread, as torch and tqdm start: the signal may be delivered to it\n"
        "threading.Thread(target=threading.Event().wait, daemon=True).start()\n"
        "done = []\n"
        "try:\n"
        "    with train.ctrl_c_deferred():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        done.append('both written')\n"
        "    time.sleep(10)  # a Ctrl-C whose handler ran after the block (on a busy machine)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after:', done)\n"
    )
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "interrupted after: ['both written']" in proc.stdout


def test_qmix_episode_memory_loads_into_another_buffer_size_newest_episodes_first(
    run_python: RunPython, tmp_path: Path
) -> None:
    """A resume with another ``--buffer_size`` keeps the saved episodes in the order they came,
    the newest when fewer fit, instead of failing on numpy's broadcast."""
    code = f"""
import sys
import numpy as np
sys.path.insert(0, {str(REPO_ROOT / "examples" / "QMIX")!r})
import train
def memory(size):
    return train.EpisodeMemory(size, slots=3, n_agents=2, obs_dim=4, state_dim=5, n_actions=3)
full = memory(4)
for k in range(6):  # wraps around: episodes 2 to 5 are kept, 4 and 5 at the front
    full.add({{key: np.full(value.shape[1:], k, np.float32) for key, value in full.data.items()}})
full.save({str(tmp_path / "rpm.npz")!r})
for size in (4, 3, 8):
    loaded = memory(size)
    loaded.load({str(tmp_path / "rpm.npz")!r})
    firsts = [int(ep[0, 0]) for ep in loaded.data["reward"][: loaded.count]]
    print(size, loaded.count, loaded.next, firsts)
"""
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:3] == [
        "4 4 2 [4, 5, 2, 3]",  # the same size: every slot back in place
        "3 3 0 [3, 4, 5]",
        "8 4 4 [2, 3, 4, 5]",
    ], proc.stdout


def test_qmix_example_resume_leaves_a_memory_older_than_the_checkpoint(
    run_python: RunPython, tmp_path: Path
) -> None:
    """A part run without ``--save_rpm`` leaves the episode memory of an earlier checkpoint on
    disk: the next resume starts with an empty one, saying so, instead of taking it for the
    checkpoint's."""
    args = [*SHORT, "--batch_size", "4", "--logdir", str(tmp_path)]
    run_example(run_python, "QMIX", *args, "--save_rpm", "--stop_after_steps", "100")
    log = run_example(run_python, "QMIX", *args, "--stop_after_steps", "200", "--resume")
    assert "from an earlier checkpoint" not in log
    log = run_example(run_python, "QMIX", *args, "--save_rpm", "--resume")
    assert "rpm.npz is from an earlier checkpoint (the last one was written without" in log
    assert int(np.load(tmp_path / "rpm.npz")["count"]) == 4  # the last 100 steps only


def test_qmix_example_resume_refuses_a_memory_from_another_point(
    run_python: RunPython, tmp_path: Path
) -> None:
    """A run killed between its checkpoint and its memory file leaves a memory of an earlier
    point: ``--resume`` refuses it instead of training on other episodes than the run had."""
    args = [*SHORT, "--batch_size", "4", "--save_rpm", "--logdir", str(tmp_path)]
    run_example(run_python, "QMIX", *args, "--stop_after_steps", "100")
    stale = (tmp_path / "rpm.npz").read_bytes()  # 4 episodes
    run_example(run_python, "QMIX", *args, "--stop_after_steps", "200", "--resume")
    (tmp_path / "rpm.npz").write_bytes(stale)
    script = REPO_ROOT / "examples" / "QMIX" / "train.py"
    proc = run_python(args=[str(script), "--no_progress", *args, "--resume"], timeout=180)
    assert proc.returncode != 0
    assert "rpm.npz (count and next slot [4, 4]) is not the memory written with" in proc.stderr
    assert "checkpoint.pt ([8, 8])" in proc.stderr, proc.stderr[-2000:]


def test_qmix_example_resumes_with_adam_and_standardised_rewards(
    run_python: RunPython, tmp_path: Path
) -> None:
    """EPyMARL's settings: the running reward statistics travel in the checkpoint, so a resumed
    run standardises as the straight one did and ends with the same weights."""
    args = [*SHORT, *OWN["QMIX"], "--optimizer", "adam", "--standardise_rewards"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_example(run_python, "QMIX", *args, "--logdir", str(straight))
    run_example(run_python, "QMIX", *args, "--logdir", str(resumed), "--stop_after_steps", "150")
    stats = torch.load(resumed / "checkpoint.pt", weights_only=False)["extra"]["reward_stats"]
    assert stats["count"] > 1 and stats["var"] > 0
    run_example(run_python, "QMIX", *args, "--logdir", str(resumed), "--resume")
    assert_same_weights(straight / "model.ckpt", resumed / "model.ckpt")
    plain = tmp_path / "plain"  # RMSprop on raw rewards: another run
    run_example(run_python, "QMIX", *SHORT, *OWN["QMIX"], "--logdir", str(plain))
    with pytest.raises(AssertionError):
        assert_same_weights(straight / "model.ckpt", plain / "model.ckpt")
    proc = run_python(
        args=[str(REPO_ROOT / "examples" / "QMIX" / "train.py"), "--no_progress", *args,
              "--logdir", str(plain), "--resume"],
        timeout=180,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--standardise_rewards" in proc.stderr
    proc = run_python(
        args=[str(REPO_ROOT / "examples" / "QMIX" / "train.py"), "--no_progress", *SHORT,
              *OWN["QMIX"], "--optimizer", "adam", "--logdir", str(plain), "--resume"],
        timeout=180,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "written with --optimizer rmsprop" in proc.stderr


def test_coma_example_resumes_with_epymarls_settings(run_python: RunPython, tmp_path: Path) -> None:
    """Adam, an entropy bonus and standardised rewards: the reward statistics travel in the
    checkpoint, so a resumed run ends as the straight one; each setting changes the run; a
    resume without them is refused by flag."""
    epymarl = ["--optimizer", "adam", "--entropy_coef", "0.01", "--standardise_rewards"]
    args = [*SHORT, *OWN["COMA"], *epymarl]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_example(run_python, "COMA", *args, "--logdir", str(straight))
    run_example(run_python, "COMA", *args, "--logdir", str(resumed), "--stop_after_steps", "150")
    stats = torch.load(resumed / "checkpoint.pt", weights_only=False)["extra"]["reward_stats"]
    assert stats["count"] > 1 and stats["var"] > 0
    run_example(run_python, "COMA", *args, "--logdir", str(resumed), "--resume")
    assert_same_weights(straight / "model.ckpt", resumed / "model.ckpt")
    for dropped in (epymarl[:2], epymarl[2:4], epymarl[4:]):
        other = tmp_path / "-".join(dropped)
        kept = [flag for flag in epymarl if flag not in dropped]
        run_example(run_python, "COMA", *SHORT, *OWN["COMA"], *kept, "--logdir", str(other))
        with pytest.raises(AssertionError):
            assert_same_weights(straight / "model.ckpt", other / "model.ckpt")
    script = str(REPO_ROOT / "examples" / "COMA" / "train.py")
    proc = run_python(
        args=[script, "--no_progress", *SHORT, *OWN["COMA"], "--logdir", str(straight),
              "--resume"],
        timeout=180,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "written with --optimizer adam and with --standardise_rewards" in proc.stderr


def test_qmix_example_resumes_with_a_feed_forward_agent_without_last_actions(
    run_python: RunPython, tmp_path: Path
) -> None:
    """EPyMARL's QMIX agent: feed-forward, its inputs the observation and the id only. A resumed
    run ends as the straight one; a checkpoint of the other network is refused by flag."""
    args = [*SHORT, *OWN["QMIX"], "--env", "Foraging-8x8-2p-2f-coop-v3", "--agent", "fc",
            "--no_last_action"]  # fmt: skip
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_example(run_python, "QMIX", *args, "--logdir", str(straight))
    run_example(run_python, "QMIX", *args, "--logdir", str(resumed), "--stop_after_steps", "150")
    run_example(run_python, "QMIX", *args, "--logdir", str(resumed), "--resume")
    assert_same_weights(straight / "model.ckpt", resumed / "model.ckpt")
    weights = torch.load(straight / "model.ckpt", weights_only=True)
    assert "rnn.weight_ih" not in weights and "fc_hidden.weight" in weights
    # foraging 8x8, 2 agents, 2 foods: observations of 12 values (x, y, level of each food and
    # agent), 6 actions, 2 ids; no last action
    assert weights["fc1.weight"].shape[1] == 12 + 2
    memory = np.load(straight / "rpm.npz")
    assert memory["obs"].shape[-1] == 12 + 2
    gru = tmp_path / "gru"
    run_example(run_python, "QMIX", *SHORT, *OWN["QMIX"], "--env", "Foraging-8x8-2p-2f-coop-v3",
                "--logdir", str(gru))  # fmt: skip
    assert torch.load(gru / "model.ckpt", weights_only=True)["fc1.weight"].shape[1] == 12 + 6 + 2
    proc = run_python(
        args=[str(REPO_ROOT / "examples" / "QMIX" / "train.py"), "--no_progress", *args,
              "--logdir", str(gru), "--resume"],
        timeout=180,
    )  # fmt: skip
    assert proc.returncode != 0
    assert (
        "written with --agent gru and without --no_last_action; this run is with --agent fc and "
        "with --no_last_action" in proc.stderr
    )


@pytest.mark.parametrize(
    ("name", "flags"),
    [
        (
            "QMIX",
            ["--batch_size", "--buffer_size", "--exploration_steps", "--update_target_interval"]
            + ["--rnn_hidden_dim", "--mixing_embed_dim"],
        ),
        ("COMA", ["--episodes_per_iteration", "--target_update_cycle"]),
    ],
)
def test_marl_example_refuses_counts_it_cannot_run_with(
    run_python: RunPython, name: str, flags: list[str]
) -> None:
    """A count of 0 stopped the run with a ZeroDivisionError or an IndexError."""
    assert_flags_refused(run_python, name, flags)


def test_qmix_example_refuses_a_batch_larger_than_the_memory(run_python: RunPython) -> None:
    """Updates start once the memory holds a batch: a ``--batch_size`` above ``--buffer_size``
    ran the whole budget without one."""
    script = REPO_ROOT / "examples" / "QMIX" / "train.py"
    proc = run_python(args=[str(script), "--buffer_size", "4", "--batch_size", "8"], timeout=120)
    assert proc.returncode == 2
    assert "--batch_size 8 is more episodes than --buffer_size 4 keeps" in proc.stderr


def test_qmix_agent_explores_as_a_team_or_agent_by_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--exploration_draws team`` (PARL's agent): one draw sends every agent off its greedy
    action at once; ``agent`` (PyMARL's selector): each agent draws for itself, so one agent
    explores while the other acts greedily. Random actions stay among the available ones."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples" / "QMIX"))
    from qmix_agent import QMixAgent
    from qmix_model import FCModel, QMixerModel

    from parl.algorithms import QMIX

    n_agents, n_actions = 2, 6
    available = np.ones((n_agents, n_actions), np.float32)
    available[:, 0] = 0.0  # action 0 is never available: no random pick may choose it
    obs = np.zeros((n_agents, 4), np.float32)
    patterns = {}
    for draws in ("team", "agent"):
        torch.manual_seed(0)
        alg = QMIX(FCModel(4, n_actions, 8), QMixerModel(n_agents, 8, 4))
        agent = QMixAgent(alg, 0.5, 0.5, 0.0, 10, exploration_draws=draws)
        agent.reset_agent()
        greedy = agent.predict(obs, available)
        np.random.seed(1)
        rows = np.array([agent.sample(obs, available) for _ in range(4000)])
        assert (rows != 0).all()
        off = rows != greedy  # a random pick equal to the greedy action reads as greedy
        patterns[draws] = off.sum(axis=1)
    # one agent off and the other greedy: only by chance in a team draw (the random pick of
    # one agent equals its greedy action, 1 in 5), half the time an agent draws alone
    lone = {draws: float(np.mean(count == 1)) for draws, count in patterns.items()}
    assert lone["team"] == pytest.approx(2 * 0.5 * 0.8 * 0.2, abs=0.03)
    assert lone["agent"] == pytest.approx(2 * (0.5 * 0.8) * (1 - 0.5 * 0.8), abs=0.03)
    with pytest.raises(ValueError, match="exploration_draws must be 'team' or 'agent'"):
        QMixAgent(alg, 0.5, 0.5, 0.0, 10, exploration_draws="joint")
