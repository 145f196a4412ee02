"""``import parl`` has no side effects and loads torch only when an RL name is first used.

Each check runs in a fresh interpreter, in an empty folder, so nothing imported by the test
session can hide a side effect.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .conftest import RunPython

SNAPSHOT = """
import logging, os, sys, threading
def snapshot():
    return (sorted(os.listdir('.')), logging.getLogger().handlers[:],
            logging.getLogger('parl').handlers[:], threading.active_count())
"""


def test_import_parl_is_silent_and_torch_free(run_python: RunPython, tmp_path: Path) -> None:
    proc = run_python(
        SNAPSHOT
        + (
            "before = snapshot()\n"
            "import parl\n"
            "parl.remote_class, parl.connect, parl.ParlError\n"
            "import parl.utils.logger\n"
            "from parl.utils import logger, summary, ReplayMemory, calc_gae, WindowStat, set_seed\n"
            "assert snapshot() == before, (snapshot(), before)\n"
            "heavy = {'torch', 'tensorboard', 'gymnasium'} & set(sys.modules)\n"
            "assert not heavy, heavy\n"
        )
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""
    assert os.listdir(tmp_path) == []


def test_torch_loads_on_first_touch_without_changing_settings(
    run_python: RunPython, tmp_path: Path
) -> None:
    proc = run_python(
        SNAPSHOT
        + (
            "import parl\n"
            "assert 'torch' not in sys.modules\n"
            "model_class = parl.Model\n"
            "assert 'torch' in sys.modules\n"
            "import torch\n"
            "assert issubclass(model_class, torch.nn.Module)\n"
            "threads = (torch.get_num_threads(), torch.get_num_interop_threads())\n"
            "before = snapshot()\n"
            "parl.Algorithm, parl.Agent, parl.algorithms.PolicyGradient, parl.utils.get_device\n"
            "import parl.core.checkpoint, parl.utils.summary\n"
            "assert (torch.get_num_threads(), torch.get_num_interop_threads()) == threads\n"
            "assert snapshot() == before, (snapshot(), before)\n"
            "assert 'tensorboard' not in sys.modules\n"
        )
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""
    assert os.listdir(tmp_path) == []


def test_core_imports_only_torch_numpy_and_the_standard_library() -> None:
    core = Path(__file__).resolve().parents[2] / "parl" / "core"
    allowed = set(sys.stdlib_module_names) | {"__future__", "numpy", "torch"}
    for path in core.glob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]) and len(words) > 1:
                module = words[1]
                # parl.errors, parl.validation and parl.atomic_file are the bottom layer
                # (standard library only)
                assert (
                    module.split(".")[0] in allowed
                    or module.startswith("parl.core")
                    or module in ("parl.errors", "parl.validation", "parl.atomic_file")
                ), (
                    path.name,
                    line,
                )


def test_remote_api_works_without_torch(run_python: RunPython, tmp_path: Path) -> None:
    script = tmp_path / "remote_add.py"
    script.write_text(
        "import sys\n"
        "import parl\n"
        "\n"
        "@parl.remote_class\n"
        "class Adder:\n"
        "    def add(self, a, b):\n"
        "        import sys\n"
        "        return a + b, 'torch' in sys.modules\n"
        "\n"
        "if __name__ == '__main__':\n"
        "    print(Adder().add(2, 3), 'torch' in sys.modules)\n"
    )
    proc = run_python(args=[str(script)], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(5, False) False"  # neither the caller nor the actor
