"""The QMIX and COMA examples: a stopped-and-resumed run equals a run straight through (on MPE's
simple_spread with EPyMARL's settings and the legacy dynamics, and on level-based foraging,
whose action masks change every step), each setting changes the run and a resume with other
settings is refused by flag; QMIX's episode memory on a resume; the multi-agent examples'
usage errors."""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from parl.utils.interrupts import ctrl_c_deferred

from .conftest import REPO_ROOT, RunPython
from .example_mains import imported_example, run_mains, run_ok
from .test_offpolicy_examples import assert_same_weights

pytestmark = pytest.mark.slow  # the example scripts, run for real

SHORT = ["--train_total_steps", "300", "--test_every_steps", "150", "--eval_episodes", "1"]
# a memory of 16 episodes: the default 5000 writes hundreds of MB at each checkpoint
QMIX_OWN = ["--batch_size", "4", "--save_rpm", "--update_target_interval", "3",
            "--buffer_size", "16"]  # fmt: skip
OWN = {
    "QMIX": QMIX_OWN,
    "COMA": ["--episodes_per_iteration", "2", "--target_update_cycle", "3"],
}
TINY = ["--rnn_hidden_dim", "8", "--mixing_embed_dim", "8"]  # QMIX's smallest widths
FORAGING = "Foraging-8x8-2p-2f-coop-v3"


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def differ(first: Path, second: Path) -> bool:
    a, b = weights(first), weights(second)
    return any(not torch.equal(a[k], b[k]) for k in a)


def assert_resumed_as_straight(straight: Path, resumed: Path, stopped: dict, log: str) -> None:
    """The resume said so, ended with the straight run's weights, and trained on from where
    it stopped; the straight run wrote TensorBoard events."""
    assert "resumed from" in log
    assert_same_weights(straight / "model.ckpt", resumed / "model.ckpt")
    final = weights(resumed / "model.ckpt")
    assert any(not torch.equal(stopped[k], final[k]) for k in final)  # it did train on
    assert glob.glob(str(straight / "events.out.tfevents.*"))


def test_qmix_and_coma_examples_resume_as_straight_runs_and_refuse_other_settings(
    run_python: RunPython, tmp_path: Path
) -> None:
    """QMIX on simple_spread with EPyMARL's settings (Adam, standardised rewards: the running
    reward statistics travel in the checkpoint) and ``--legacy_dynamics``, QMIX on foraging
    (whose action masks change every step) with EPyMARL's feed-forward agent without last
    actions at the example's widths, COMA with EPyMARL's settings (an entropy bonus too) and
    COMA with PARL's on foraging: each run stopped halfway and resumed in another interpreter
    than the one that stopped ends as the straight one. The straight runs and first parts run
    in one interpreter, the resumes and the refused resumes in a second.

    QMIX: the legacy dynamics reach the env (the first episode's random actions, other
    rewards); the settings change the run; the feed-forward network's inputs are the
    observation and the id only, the GRU's also the last action. A resume is refused by flag
    (the settings, the agent, ``--env``: foraging with and without ``-coop`` has the same
    spaces, so the checkpoint would load and the run go on in another game), and refuses a
    memory of another point (a run killed between its checkpoint and its memory); a part run
    without ``--save_rpm`` leaves the memory of an earlier checkpoint, which the next resume
    leaves for an empty one, saying so. COMA: each setting and the legacy dynamics change the
    run; a resume without them, or on another ``--env`` with the same spaces, is refused by
    flag. simple_world_comm's agents see different amounts (zero-padded to the longest) and
    its leader has more actions: both examples run on it."""
    half = ["--stop_after_steps", "150"]
    world = ["--train_total_steps", "150", "--test_every_steps", "150", "--eval_episodes", "1",
             "--env", "simple_world_comm"]  # fmt: skip
    # QMIX
    epymarl = [*SHORT, *OWN["QMIX"], *TINY, "--optimizer", "adam", "--standardise_rewards",
               "--legacy_dynamics"]  # fmt: skip
    plain = [*SHORT, *OWN["QMIX"], *TINY]
    fc = [*SHORT, *OWN["QMIX"], "--env", FORAGING, "--agent", "fc", "--no_last_action"]
    gru = [*SHORT, *OWN["QMIX"], "--env", FORAGING]
    q = {name: tmp_path / "QMIX" / name for name in ("s", "r", "p", "world", "fs", "fr", "gru")}
    # COMA
    coma_epymarl = ["--optimizer", "adam", "--entropy_coef", "0.01", "--standardise_rewards",
                    "--legacy_dynamics"]  # fmt: skip
    args = [*SHORT, *OWN["COMA"], *coma_epymarl]
    foraging = [*SHORT, *OWN["COMA"], "--env", FORAGING]
    c = {name: tmp_path / "COMA" / name for name in ("s", "r", "fs", "fr", "world")}
    drops = (coma_epymarl[:2], coma_epymarl[2:4], coma_epymarl[4:5], coma_epymarl[5:])
    others = [tmp_path / "COMA" / "-".join(dropped) for dropped in drops]
    without = [[f for f in coma_epymarl if f not in dropped] for dropped in drops]

    first = [
        ("QMIX", [*epymarl, "--logdir", str(q["s"])]),
        ("QMIX", [*epymarl, *half, "--logdir", str(q["r"])]),
        ("QMIX", [*plain, *half, "--logdir", str(q["p"])]),
        ("QMIX", [*world, *OWN["QMIX"], *TINY, "--logdir", str(q["world"])]),
        ("QMIX", [*fc, "--logdir", str(q["fs"])]),
        ("QMIX", [*fc, *half, "--logdir", str(q["fr"])]),
        ("QMIX", [*gru, "--logdir", str(q["gru"])]),
        ("COMA", [*args, "--logdir", str(c["s"])]),
        ("COMA", [*args, *half, "--logdir", str(c["r"])]),
        *(
            ("COMA", [*SHORT, *OWN["COMA"], *flags, *half, "--logdir", str(other)])
            for flags, other in zip(without, others, strict=True)
        ),
        ("COMA", [*foraging, "--logdir", str(c["fs"])]),
        ("COMA", [*foraging, *half, "--logdir", str(c["fr"])]),
        ("COMA", [*world, *OWN["COMA"], "--logdir", str(c["world"])]),
    ]
    logs = dict(zip([str(Path(argv[-1]).relative_to(tmp_path)) for _, argv in first],
                    run_ok(run_python, first), strict=True))  # fmt: skip
    assert "done: " in logs["QMIX/world"] and "done: " in logs["COMA/world"]
    assert "done: " in logs["QMIX/gru"]

    # QMIX on simple_spread
    stats = torch.load(q["r"] / "checkpoint.pt", weights_only=False)["extra"]["reward_stats"]
    assert stats["count"] > 1 and stats["var"] > 0
    # the same seed, other dynamics and optimizer: the first episode's random actions, other
    # rewards, other weights
    memories = [dict(np.load(q[run] / "rpm.npz")) for run in ("r", "p")]
    np.testing.assert_array_equal(memories[0]["actions"][0], memories[1]["actions"][0])
    assert not np.array_equal(memories[0]["reward"][0], memories[1]["reward"][0])
    assert differ(q["r"] / "model.ckpt", q["p"] / "model.ckpt")
    # the straight run's last checkpoint (12 episodes) beside the memory of the stopped run's
    # (6 episodes): as if the run had died before writing its memory
    stale = tmp_path / "QMIX" / "stale"
    shutil.copytree(q["s"], stale)
    shutil.copy(q["r"] / "rpm.npz", stale / "rpm.npz")
    # QMIX on foraging: the networks' inputs
    fc_weights = weights(q["fs"] / "model.ckpt")
    assert "rnn.weight_ih" not in fc_weights and "fc_hidden.weight" in fc_weights
    # foraging 8x8, 2 agents, 2 foods: observations of 12 values (x, y, level of each food and
    # agent), 6 actions, 2 ids; no last action
    assert fc_weights["fc1.weight"].shape[1] == 12 + 2
    assert np.load(q["fs"] / "rpm.npz")["obs"].shape[-1] == 12 + 2
    assert weights(q["gru"] / "model.ckpt")["fc1.weight"].shape[1] == 12 + 6 + 2
    # COMA
    stats = torch.load(c["r"] / "checkpoint.pt", weights_only=False)["extra"]["reward_stats"]
    assert stats["count"] > 1 and stats["var"] > 0
    for other in others:  # each setting changes the run
        assert differ(c["r"] / "model.ckpt", other / "model.ckpt"), other.name
    stopped = {str(d[run]): weights(d[run] / "model.ckpt") for d in (q, c) for run in ("r", "fr")}

    no_rpm = [arg for arg in plain if arg != "--save_rpm"]
    second = [
        ("QMIX", [*epymarl, "--logdir", str(q["r"]), "--resume"]),
        ("QMIX", [*fc, "--logdir", str(q["fr"]), "--resume"]),
        # the plain run goes on without --save_rpm: its memory file stays that of 150 steps
        ("QMIX", [*no_rpm, "--stop_after_steps", "200", "--resume", "--logdir", str(q["p"])]),
        ("QMIX", [*plain, "--resume", "--logdir", str(q["p"])]),
        ("QMIX", [*epymarl, "--logdir", str(q["p"]), "--resume"]),
        ("QMIX", [*epymarl, "--logdir", str(stale), "--resume"]),
        ("QMIX", [*fc, "--logdir", str(q["gru"]), "--resume"]),
        ("QMIX", [*fc, "--env", "Foraging-8x8-2p-2f-v3", "--logdir", str(q["fs"]), "--resume"]),
        ("COMA", [*args, "--logdir", str(c["r"]), "--resume"]),
        ("COMA", [*foraging, "--logdir", str(c["fr"]), "--resume"]),
        ("COMA", [*SHORT, *OWN["COMA"], "--logdir", str(c["s"]), "--resume"]),
        (
            "COMA",
            [*foraging, "--env", "Foraging-8x8-2p-2f-v3", "--logdir", str(c["fs"]), "--resume"],
        ),  # fmt: skip
    ]
    runs = run_mains(run_python, second)
    resumes = {0: (q["s"], q["r"]), 1: (q["fs"], q["fr"]), 8: (c["s"], c["r"]),
               9: (c["fs"], c["fr"])}  # fmt: skip
    for k, (straight, resumed) in resumes.items():
        assert runs[k].code == 0 and "Traceback" not in runs[k].log, runs[k].log[-3000:]
        assert_resumed_as_straight(straight, resumed, stopped[str(resumed)], runs[k].log)
    for k in (2, 3):
        assert runs[k].code == 0 and "Traceback" not in runs[k].log, runs[k].log[-3000:]
    assert "from an earlier checkpoint" not in runs[2].log
    assert "rpm.npz is from an earlier checkpoint (the last one was written without" in runs[3].log
    assert int(np.load(q["p"] / "rpm.npz")["count"]) == 4  # the last 100 steps only

    refused = [runs[k] for k in (4, 5, 6, 7, 10, 11)]
    assert all(run.code != 0 for run in refused), [run.log[-1000:] for run in refused]
    assert (
        "written with --optimizer rmsprop and without --standardise_rewards and without "
        "--legacy_dynamics; this run is with --optimizer adam and with --standardise_rewards and "
        "with --legacy_dynamics" in refused[0].log
    ), refused[0].log[-2000:]
    assert "rpm.npz (count and next slot [6, 6]) is not the memory written with" in refused[1].log
    assert "checkpoint.pt ([12, 12])" in refused[1].log, refused[1].log[-2000:]
    assert (
        "written with --agent gru and without --no_last_action; this run is with --agent fc and "
        "with --no_last_action" in refused[2].log
    ), refused[2].log[-2000:]
    for k in (3, 5):
        assert (
            f"written with --env {FORAGING}; this run is with --env Foraging-8x8-2p-2f-v3"
            in refused[k].log
        ), refused[k].log[-2000:]
    assert (
        "written with --legacy_dynamics and with --optimizer adam and with --standardise_rewards"
        in refused[4].log
    ), refused[4].log[-2000:]


QMIX_COUNTS = ["--batch_size", "--buffer_size", "--exploration_steps", "--update_target_interval",
               "--rnn_hidden_dim", "--mixing_embed_dim"]  # fmt: skip
COUNTS = {
    "QMIX": QMIX_COUNTS,
    "COMA": ["--episodes_per_iteration", "--target_update_cycle"],
    "MAPPO": ["--env_num", "--num_workers", "--ppo_epoch", "--num_mini_batch"],
    "MADDPG": [
        "--max_episodes",
        "--test_every_episodes",
        "--batch_size",
        "--learn_every",
        "--memory_size",
    ],  # fmt: skip
}
ENV_ERRORS = [
    ("QMIX", ["--env", "simple_sprad"], "unknown multi-agent env 'simple_sprad'"),
    ("COMA", ["--env", "Foraging-8x8-2p"], "unknown foraging id 'Foraging-8x8-2p'"),
    ("QMIX", ["--legacy_dynamics"], "for MPE's particle scenarios"),
    ("COMA", ["--legacy_dynamics"], "for MPE's particle scenarios"),
    ("MAPPO", ["--legacy_dynamics"], "for MPE's particle scenarios"),
    ("MAPPO", ["--continuous_actions"], "discrete actions only"),
    ("MADDPG", ["--continuous_actions"], "discrete actions only"),
]
OTHER_ERRORS = [
    # updates start once the memory holds a batch: a larger batch ran the whole budget without
    ("QMIX", ["--buffer_size", "4", "--batch_size", "8"],
     "--batch_size 8 is more episodes than --buffer_size 4 keeps"),
    # learning starts once a memory holds more than the warm-up (PARL's: --batch_size * 25)
    ("MADDPG", ["--memory_size", "1000"], "--memory_size 1000 holds no more than the warm-up of "
     "25600 transitions (--batch_size * 25)"),
    ("MADDPG", ["--memory_size", "100", "--warmup_size", "100"], "warm-up of 100 transitions, so"),
]  # fmt: skip


# the function each example's ``main`` parses its command line with, first of all
PARSE = {"QMIX": "parse_args", "COMA": "parse_args", "MAPPO": "parse_config",
         "MADDPG": "parse_args"}  # fmt: skip


def test_multi_agent_examples_refuse_what_they_cannot_run_with_as_usage_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Each refusal ends the run before it starts (in the parsing that ``main`` begins with,
    run here in the test's process): the usage line and the reason, exit status 2, no
    traceback, nothing written. An ``--env`` the run cannot open with its other flags (foraging
    has no legacy dynamics; the discrete-only examples); a count of 0 or -1 (it stopped the run
    with a ZeroDivisionError or an IndexError, or trained nothing); a batch or warm-up the
    memory can never pass."""
    cases = []
    for k, (name, flags, message) in enumerate(ENV_ERRORS):
        env = [] if "--env" in flags else ["--env", "Foraging-8x8-2p-2f-coop-v3"]
        cases.append((name, [*env, *flags, "--logdir", str(tmp_path / str(k))], message))
    for name, flags in COUNTS.items():
        for flag in flags:
            for value in ("0", "-1"):
                message = f"argument {flag}: must be 1 or more, got {value}"
                cases.append((name, [flag, value, "--logdir", str(tmp_path / "c")], message))
    for k, (name, flags, message) in enumerate(OTHER_ERRORS):
        cases.append((name, [*flags, "--logdir", str(tmp_path / f"o{k}")], message))
    for example in PARSE:
        with imported_example(f"examples/{example}") as train:
            parse = getattr(train, PARSE[example])
            for name, argv, message in cases:
                if name != example:
                    continue
                with pytest.raises(SystemExit) as exit_:
                    parse(argv)
                log = capsys.readouterr().err
                assert exit_.value.code == 2, (name, argv, log[-2000:])
                assert "usage:" in log and message in log, (name, argv, log[-2000:])
                assert "Traceback" not in log, log[-2000:]
    assert not any(tmp_path.iterdir())  # no run wrote anything


def test_qmix_example_holds_ctrl_c_until_the_checkpoint_and_memory_are_written(
    run_python: RunPython,
) -> None:
    """The example writes its checkpoint and memory in the library's ``ctrl_c_deferred``,
    which holds Ctrl-C back until the block ends, then raises it."""
    with imported_example("examples/QMIX") as train:
        assert train.ctrl_c_deferred is ctrl_c_deferred  # the library's, run below
    # a fresh interpreter that imports only the library's module: the signal for real
    code = (
        "import os, signal, threading, time\n"
        "from parl.utils.interrupts import ctrl_c_deferred\n"
        "# Ctrl-C as in a terminal, whatever the test runner left (a background job ignores it)\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "# another thread, as torch and tqdm start: the signal may be delivered to it\n"
        "threading.Thread(target=threading.Event().wait, daemon=True).start()\n"
        "done = []\n"
        "try:\n"
        "    with ctrl_c_deferred():\n"
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
    tmp_path: Path,
) -> None:
    """A resume with another ``--buffer_size`` keeps the saved episodes in the order they came,
    the newest when fewer fit, instead of failing on numpy's broadcast."""
    with imported_example("examples/QMIX") as train:

        def memory(size: int):  # type: ignore[no-untyped-def]
            return train.EpisodeMemory(size, slots=3, n_agents=2, obs_dim=4, state_dim=5,
                                       n_actions=3)  # fmt: skip

        full = memory(4)
        for k in range(6):  # wraps around: episodes 2 to 5 are kept, 4 and 5 at the front
            full.add({key: np.full(value.shape[1:], k, np.float32)
                      for key, value in full.data.items()})  # fmt: skip
        full.save(str(tmp_path / "rpm.npz"))
        loaded = {}
        for size in (4, 3, 8):
            loaded[size] = memory(size)
            loaded[size].load(str(tmp_path / "rpm.npz"))
    found = {
        size: (m.count, m.next, [int(ep[0, 0]) for ep in m.data["reward"][: m.count]])
        for size, m in loaded.items()
    }
    assert found == {
        4: (4, 2, [4, 5, 2, 3]),  # the same size: every slot back in place
        3: (3, 0, [3, 4, 5]),
        8: (4, 4, [2, 3, 4, 5]),
    }, found


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
