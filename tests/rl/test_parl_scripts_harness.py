"""``scripts/run_parl_scripts.py``, the harness that runs PARL's own scripts here, on a stand-in
checkout of scripts written for these tests (PARL's are run by the harness itself, not in CI)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import psutil
import pytest

from .multiagent_support import require_multiagent

HARNESS = Path(__file__).resolve().parents[2] / "scripts" / "run_parl_scripts.py"


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_parl_scripts", HARNESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _script(checkout: Path, folder: str, files: dict[str, str]) -> None:
    target = checkout / "benchmark" / "torch" / folder
    target.mkdir(parents=True)
    for name, text in files.items():
        (target / name).write_text(text)


def test_a_script_sees_gymnasium_as_gym_and_stops_at_its_evaluation(
    harness: ModuleType, tmp_path: Path
) -> None:
    script = (
        "import gym, gymnasium, time\n"
        "assert gym is gymnasium and gym.make('CartPole-v1').spec.id == 'CartPole-v1'\n"
        "print('Evaluation over: 1 episodes, Reward:', gym.__name__, flush=True)\n"
        "time.sleep(60)  # a training loop that would go on: the harness stops it\n"
    )
    _script(tmp_path, "demo", {"train.py": script})
    run = harness.ScriptRun("demo", "demo", ("--flag", "1"), timeout_s=30.0)
    outcome = harness.run_one(tmp_path, run, tmp_path / "work")
    assert outcome.ok, outcome.detail
    assert outcome.detail.endswith("Reward: gymnasium") and outcome.seconds < 30
    table = harness.table([outcome])
    assert "| `benchmark/torch/demo` | `train.py --flag 1` | evaluates: `Evaluation over" in table


def test_a_script_runs_the_parl_beside_the_harness_whatever_the_callers_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scripts run against the ``parl`` of the checkout the harness is in, not an installed
    copy nor one first on the caller's ``PYTHONPATH`` (a PARL checkout, another worktree)."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(HARNESS, checkout / "scripts" / HARNESS.name)
    (checkout / "parl").mkdir()
    (checkout / "parl" / "__init__.py").write_text("")
    other = tmp_path / "other"
    (other / "parl").mkdir(parents=True)
    (other / "parl" / "__init__.py").write_text("raise ImportError('the wrong parl')\n")
    monkeypatch.setenv("PYTHONPATH", str(other))
    spec = importlib.util.spec_from_file_location(
        "harness_copy", checkout / "scripts" / HARNESS.name
    )
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = copy
    try:
        spec.loader.exec_module(copy)
        script = "import parl\nprint('Evaluation over:', parl.__file__, flush=True)\n"
        _script(tmp_path / "parl_checkout", "which", {"train.py": script})
        run = copy.ScriptRun("which", "which", (), timeout_s=60.0)
        outcome = copy.run_one(tmp_path / "parl_checkout", run, tmp_path / "work")
    finally:
        del sys.modules[spec.name]
    assert outcome.ok, outcome.detail
    assert outcome.detail.endswith(str(checkout / "parl" / "__init__.py"))


def test_nth_waits_for_a_later_evaluation_and_the_table_says_which(
    harness: ModuleType, tmp_path: Path
) -> None:
    """A script that evaluates before it learns anything passes only at the evaluation asked
    for; one that never gets that far fails instead of passing on its first line."""
    script = (
        "import sys, time\n"
        "for k in range(int(sys.argv[1])):\n"
        "    print(f'Evaluation over: 1 episodes, Reward: {k}', flush=True)\n"
        "    time.sleep(0.5)\n"
        "time.sleep(60 if int(sys.argv[1]) > 2 else 0)\n"
    )
    _script(tmp_path, "later", {"train.py": script})
    run = harness.ScriptRun("later", "later", ("3",), nth=2, timeout_s=30.0)
    outcome = harness.run_one(tmp_path, run, tmp_path / "work")
    assert outcome.ok and outcome.detail.endswith("Reward: 1"), outcome.detail
    assert "evaluates (evaluation 2): `Evaluation over" in harness.table([outcome])
    short = harness.ScriptRun("later", "later", ("1",), nth=2, timeout_s=30.0)
    outcome = harness.run_one(tmp_path, short, tmp_path / "again")
    assert not outcome.ok and "Reward: 0" in outcome.detail


def test_a_failing_script_shows_its_exception_and_edits_are_applied(
    harness: ModuleType, tmp_path: Path
) -> None:
    _script(
        tmp_path,
        "broken",
        {"train.py": "import helper\nhelper.go()\n", "helper.py": "def go():\n    x = 1\n"},
    )
    edit = harness.Edit("helper.py", "x = 1", "raise KeyError('no such env')", "demo")
    run = harness.ScriptRun("broken", "broken", edits=(edit,), timeout_s=30.0)
    outcome = harness.run_one(tmp_path, run, tmp_path / "work")
    assert not outcome.ok and outcome.detail == "KeyError: 'no such env'"
    assert "+ helper.py: \"raise KeyError('no such env')\"" in run.command()
    stale = harness.Edit("helper.py", "y = 2", "z = 3", "demo")
    missing = harness.run_one(
        tmp_path, harness.ScriptRun("broken", "broken", edits=(stale,)), tmp_path / "again"
    )
    assert not missing.ok and "no longer has 'y = 2' once" in missing.detail


@pytest.mark.slow  # runs an example script
def test_a_cluster_script_gets_a_running_cluster_at_its_config_address(
    harness: ModuleType, tmp_path: Path
) -> None:
    config = "config = {'master_address': 'localhost:8010', 'actor_num': 8}\n"
    script = (
        "import parl\n"
        "from demo_config import config\n"
        "@parl.remote_class\n"
        "class Actor:\n"
        "    def where(self):\n"
        "        import os\n"
        "        return os.getpid()\n"
        "parl.connect(config['master_address'])\n"
        "actors = [Actor() for _ in range(config['actor_num'])]\n"
        "print('Evaluation over:', len({a.where() for a in actors}), 'actors', flush=True)\n"
    )
    _script(tmp_path, "clustered", {"train.py": script, "demo_config.py": config})
    (tmp_path / "benchmark" / "torch" / "clustered").chmod(0o775)  # as a checkout may have it
    run = harness.ScriptRun(
        "clustered",
        "clustered",
        cluster_cpus=2,
        config_module="demo_config.py",
        config={"actor_num": 2},
        timeout_s=60.0,
    )
    outcome = harness.run_one(tmp_path, run, tmp_path / "work")
    assert outcome.ok, outcome.detail
    assert outcome.detail.endswith("Evaluation over: 2 actors")


@pytest.mark.slow  # runs an example script
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_harness_stops_the_script_and_its_cluster(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Killing the harness (SIGTERM, or Ctrl-C's SIGINT) mid-run ends the script, which runs in
    a process group of its own, and the xparl cluster started for it; the harness says it was
    interrupted and exits 130."""
    config = "config = {'master_address': 'localhost:8010'}\n"
    script = "import os, time\nopen('started', 'w').write(f'{os.getpid()}\\n')\ntime.sleep(120)\n"
    _script(tmp_path, "clustered", {"train.py": script, "demo_config.py": config})
    stand_in = tmp_path / "harness.py"
    stand_in.write_text(
        HARNESS.read_text() + "\nRUNS = (ScriptRun('sleeper', 'clustered', cluster_cpus=1,"
        " config_module='demo_config.py', timeout_s=120.0),)\n"
    )
    # the harness's own main, with RUNS replaced by one script that sleeps
    text = stand_in.read_text().replace('if __name__ == "__main__":\n    sys.exit(main())', "")
    stand_in.write_text(text + "\nsys.exit(main())\n")
    harness = subprocess.Popen(
        [sys.executable, str(stand_in), str(tmp_path), "--keep"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    cluster: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 90
        started: list[Path] = []  # the script's pid file, once it holds the whole pid
        while not started and time.monotonic() < deadline:
            written = tmp_path.glob("parl-scripts-*/sleeper/started")
            started = [path for path in written if path.read_text().endswith("\n")]
            time.sleep(0.2)
        assert started, "the script never started"
        script_pid = int(started[0].read_text())
        home = started[0].parent / "home"
        cluster = [p for p in psutil.process_iter() if _home_of(p) == str(home)]
        assert cluster, "no xparl process runs with the script's HOME"
        harness.send_signal(sig)
        out, _ = harness.communicate(timeout=60)
    finally:
        if harness.poll() is None:
            harness.kill()
    try:
        assert harness.returncode == 130, out
        assert "interrupted" in out
        gone_by = time.monotonic() + 15
        while time.monotonic() < gone_by and (
            psutil.pid_exists(script_pid) or any(p.is_running() for p in cluster)
        ):
            time.sleep(0.2)
        assert not psutil.pid_exists(script_pid), "the script outlived the harness"
        assert not [p for p in cluster if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:  # a failure here leaves nothing running either
        for process in cluster:
            with contextlib.suppress(psutil.Error):
                process.kill()


def _home_of(process: psutil.Process) -> str | None:
    try:
        return process.environ().get("HOME")
    except (psutil.Error, OSError):
        return None


def test_update_rewrites_only_the_marked_block(harness: ModuleType, tmp_path: Path) -> None:
    page = tmp_path / "migrating-from-parl.md"
    page.write_text(f"intro\n{harness.BEGIN}\nold table\n{harness.END}\noutro\n")
    harness.update_file(page, "| new |")
    assert page.read_text() == f"intro\n{harness.BEGIN}\n| new |\n{harness.END}\noutro\n"
    (tmp_path / "other.md").write_text("no block\n")
    with pytest.raises(SystemExit, match="has no <!-- run_parl_scripts: begin -->"):
        harness.update_file(tmp_path / "other.md", "| new |")


def test_the_migration_page_holds_the_block_the_table_goes_into(harness: ModuleType) -> None:
    """``--update docs/migrating-from-parl.md`` is the documented target: the page has the block
    once, with a table in it."""
    page = HARNESS.parents[1] / "docs" / "migrating-from-parl.md"
    text = page.read_text(encoding="utf-8")
    assert text.count(harness.BEGIN) == 1 and text.count(harness.END) == 1
    block = text[text.index(harness.BEGIN) : text.index(harness.END)]
    assert "| script | command | result | time |" in block


# A stand-in for PARL's MADDPG benchmark with its flags and the calls it makes of this package:
# ``MAenv`` by name with ``from gym import spaces``, one ``MADDPG`` per agent over the whole
# team's action spaces, a relaxed one-hot (or a squashed vector) per agent into ``env.step``.
MADDPG_STAND_IN = """
import argparse
import numpy as np
import torch
from gym import spaces
from parl.algorithms import MADDPG
from parl.env.multiagent_env import MAenv
import parl

class Team(parl.Model):
    def __init__(self, obs_dim, act_dim, critic_in_dim, continuous):
        super().__init__()
        self.continuous = continuous
        self.actor = torch.nn.Linear(obs_dim, act_dim * (2 if continuous else 1))
        self.critic = torch.nn.Linear(critic_in_dim, 1)
    def policy(self, obs):
        out = self.actor(obs)
        return out.chunk(2, dim=-1) if self.continuous else out
    def value(self, obs_n, act_n):
        return self.critic(torch.cat(obs_n + act_n, dim=1)).squeeze(1)
    def get_actor_params(self):
        return self.actor.parameters()
    def get_critic_params(self):
        return self.critic.parameters()

parser = argparse.ArgumentParser()
parser.add_argument('--env', type=str, default='simple_speaker_listener')
parser.add_argument('--continuous_actions', action='store_true', default=False)
parser.add_argument('--max_episodes', type=int, default=25000)
parser.add_argument('--test_every_episodes', type=int, default=1000)
args = parser.parse_args()
env = MAenv(args.env, args.continuous_actions)
assert isinstance(env.action_space[0], spaces.Box) == args.continuous_actions
critic_in_dim = sum(env.obs_shape_n) + sum(env.act_shape_n)
algs = [
    MADDPG(Team(env.obs_shape_n[i], env.act_shape_n[i], critic_in_dim, args.continuous_actions),
           agent_index=i, act_space=env.action_space, gamma=0.95, tau=0.01,
           critic_lr=0.01, actor_lr=0.01)
    for i in range(env.n)
]
for episode in range(1, args.max_episodes + 1):
    obs_n, done, total = env.reset(), False, 0.0
    while not done:
        action_n = [alg.sample(torch.FloatTensor(o.reshape(1, -1))).detach().numpy().flatten()
                    for alg, o in zip(algs, obs_n)]
        obs_n, reward_n, done_n, _ = env.step(action_n)
        done, total = all(done_n), total + sum(reward_n)
    if episode % args.test_every_episodes == 0:
        print('Evaluation over: 1 episodes, Reward: {}'.format(total), flush=True)
"""


@pytest.mark.slow  # runs an example script
@pytest.mark.parametrize("name", ["maddpg", "maddpg (continuous)"])
def test_the_maddpg_entries_reach_an_evaluation_of_a_script_with_parls_flags(
    harness: ModuleType, tmp_path: Path, name: str
) -> None:
    """The harness's MADDPG runs give flags that PARL's script takes, on scenarios MAenv
    opens, and a budget that reaches the script's ``Evaluation over`` line."""
    require_multiagent()  # a failure under CI=true, where the extra is installed
    (run,) = [r for r in harness.RUNS if r.name == name]
    _script(tmp_path, run.folder, {"train.py": MADDPG_STAND_IN})
    quick = harness.ScriptRun(run.name, run.folder, run.argv, run.evaluation, timeout_s=60.0)
    outcome = harness.run_one(tmp_path, quick, tmp_path / "work")
    assert outcome.ok, outcome.detail
    assert outcome.detail.startswith("Evaluation over: 1 episodes, Reward: -")


def test_stand_ins_files_and_settings_reach_the_script_and_a_tensorboard_tag_counts(
    harness: ModuleType, tmp_path: Path
) -> None:
    """A script that prints no evaluation: the value it writes to TensorBoard is the one shown;
    the run's stand-in comes first on its path, its prepared file and environment are there,
    and its settings dict (not named ``config``) gets the budget."""
    script = (
        "import os, sys\n"
        "import smac\n"
        "from parl.utils import summary\n"
        "from settings import Settings\n"
        "assert smac.__file__.startswith(os.environ['STANDINS']), smac.__file__\n"
        "assert open('made.txt').read() == os.environ['MADE'] == os.getcwd() + '/made.txt'\n"
        "assert Settings == {'steps': 3, 'test_steps': 1}, Settings\n"
        "summary.add_scalar('eval_reward', 2.5, Settings['steps'])\n"
    )
    _script(tmp_path, "tagged", {"train.py": script, "settings.py": "Settings = {'steps': 100}\n"})

    def made(folder: Path) -> str:
        (folder / "made.txt").write_text(str(folder / "made.txt"))
        return "made.txt"

    run = harness.ScriptRun(
        "tagged",
        "tagged",
        evaluation_tag="eval_reward",
        config_module="settings.py",
        config_name="Settings",
        config={"steps": 3, "test_steps": 1},
        standins=(harness.SMAC,),
        prepare=(made,),
        environ=(("MADE", "{folder}/made.txt"), ("STANDINS", str(harness.STANDINS / "smac"))),
        timeout_s=60.0,
    )
    outcome = harness.run_one(tmp_path, run, tmp_path / "work")
    assert outcome.ok, outcome.detail
    assert outcome.detail == "eval_reward = 2.5 at step 3 (TensorBoard)"
    assert "+ stand-in smac (parl.env.MAenv on level-based foraging)" in run.command()
    assert "(settings.py: steps=3, test_steps=1)" in run.command()
    plain = harness.ScriptRun("tagged", "tagged", evaluation_tag="eval_reward", timeout_s=60.0)
    failed = harness.run_one(tmp_path, plain, tmp_path / "again")  # no stand-in: no smac
    assert not failed.ok and failed.detail == "ModuleNotFoundError: No module named 'smac'"
