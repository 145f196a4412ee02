"""``scripts/run_parl_scripts.py``, the harness that runs PARL's own scripts here, on a stand-in
checkout of scripts written for these tests (PARL's are run by the harness itself, not in CI)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

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
