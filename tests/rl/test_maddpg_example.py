"""examples/MADDPG: a stopped-and-resumed run equals a run straight through, with discrete and
continuous actions, and it writes TensorBoard events and one model file per agent; the time
limit and ``--legacy_dynamics`` reach the stored transitions; a resume refuses other settings,
another env and checkpoint or memory files of different points, and leaves memories older than
its checkpoint. Its usage errors are checked with the other multi-agent examples' (in
test_marl_examples.py)."""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from parl.utils.interrupts import ctrl_c_deferred

from . import test_offpolicy_examples as offpolicy
from .conftest import RunPython
from .example_mains import Run, imported_example, run_mains, run_ok

pytestmark = pytest.mark.slow  # the example script, run for real

SMALL = [
    "--max_episodes", "10", "--test_every_episodes", "4", "--batch_size", "32",
    "--learn_every", "5", "--warmup_size", "60", "--memory_size", "1000", "--save_rpm",
    "--no_progress",
]  # fmt: skip
AGENTS = 2  # simple_speaker_listener's speaker and listener


def assert_resumed_as_straight(straight: Path, resumed: Path, stopped: dict, run: Run) -> None:
    """The resume of ``resumed`` (stopped at episode 6) ended with the weights of the straight
    run, having trained on; the straight run wrote TensorBoard events."""
    assert run.code == 0 and "Traceback" not in run.log, run.log[-3000:]
    assert "resumed from" in run.log and "done: 10 episodes, 250 steps" in run.log, run.log[-2000:]
    for i in range(AGENTS):
        offpolicy.assert_same_weights(straight / f"agent_{i}.ckpt", resumed / f"agent_{i}.ckpt")
    final = torch.load(resumed / "agent_0.ckpt", weights_only=True)
    assert any(not torch.equal(stopped[k], final[k]) for k in final)  # it did train on
    assert glob.glob(str(straight / "events.out.tfevents.*"))


def stored_terminals(folder: Path) -> list[list[int]]:
    """Each agent's stored steps that are terminal, of six episodes of 25 steps."""
    found = []
    for i in range(AGENTS):
        with np.load(folder / f"rpm_agent{i}.npz") as memory:
            stored = memory["terminal"][: int(memory["size"])]
        assert stored.shape == (150,)
        found.append(np.flatnonzero(stored).tolist())
    return found


def test_maddpg_resumes_equal_straight_runs_and_refuse_other_flags_and_memories(
    run_python: RunPython, tmp_path: Path
) -> None:
    """With discrete actions, and with continuous ones, the legacy dynamics and the time limit
    stored as terminal: a run stopped at episode 6 and resumed in another interpreter than the
    one that stopped ends with the straight run's weights. The straight runs and first parts
    run in one interpreter, the resumes and the refused resumes in a second.

    MPE episodes end only at their length: by default no stored step is terminal (the critic
    bootstraps through the cut); ``--time_limit_as_terminal`` stores each episode's last step
    as terminal, as PARL's runs did. The legacy dynamics' stored transitions replay exactly in
    ``MAenv(..., legacy_dynamics=True)`` and not in mpe2's order. A run killed while writing
    leaves checkpoint files of two points, or a memory of an earlier point (or none) beside a
    checkpoint: every update draws the same rows of every agent's memory, so ``--resume``
    refuses them; with no memory at all it resumes with empty ones. A part run without
    ``--save_rpm`` leaves the memory files of an earlier checkpoint, which the next resume
    leaves for empty memories, saying so. A resume is refused by flag, and by ``--env``
    (foraging with and without ``-coop`` has the same spaces). Foraging forbids some actions
    and MADDPG's policies do not mask: a forbidden argmax does nothing, as in lbforaging
    itself, instead of stopping the run."""
    cont = [*SMALL, "--continuous_actions", "--legacy_dynamics", "--time_limit_as_terminal"]
    foraging = ["--max_episodes", "2", "--test_every_episodes", "1", "--eval_episodes", "1",
                "--batch_size", "16", "--warmup_size", "32", "--learn_every", "5",
                "--env", "Foraging-5x5-2p-1f-coop-v3", "--no_progress"]  # fmt: skip
    d = {name: tmp_path / name for name in ("sd", "rd", "sc", "rc", "f")}
    stop = ["--stop_after_episodes", "6"]
    logs = run_ok(
        run_python,
        [
            ("MADDPG", [*SMALL, "--logdir", str(d["sd"])]),
            ("MADDPG", [*SMALL, *stop, "--logdir", str(d["rd"])]),
            ("MADDPG", [*cont, "--logdir", str(d["sc"])]),
            ("MADDPG", [*cont, *stop, "--logdir", str(d["rc"])]),
            ("MADDPG", [*foraging, "--logdir", str(d["f"])]),
        ],
    )
    for k in (0, 2):
        assert "done: 10 episodes, 250 steps" in logs[k] and "done: 6 episodes" in logs[k + 1]
    assert "done: 2 episodes, 100 steps" in logs[4]
    assert stored_terminals(d["rd"]) == [[], []]
    assert stored_terminals(d["rc"]) == [[24, 49, 74, 99, 124, 149]] * AGENTS

    from parl.env.multiagent_env import MAenv

    memories = [dict(np.load(d["rc"] / f"rpm_agent{i}.npz")) for i in range(AGENTS)]
    replays = {}
    for legacy in (False, True):
        env = MAenv("simple_speaker_listener", True, legacy_dynamics=legacy)
        env.reset(seed=0)  # the example seeds episode k with --seed + k
        replays[legacy] = [
            env.step([memory["action"][t] for memory in memories])[0] for t in range(25)
        ]
    listener = 1
    stored = memories[listener]["next_obs"][:25]
    np.testing.assert_array_equal(np.stack([o[listener] for o in replays[True]]), stored)
    assert not np.array_equal(np.stack([o[listener] for o in replays[False]]), stored)

    for name in ("older", "none"):  # the run as it stopped
        shutil.copytree(d["rd"], tmp_path / name)
    for i in range(AGENTS):  # no memory at all: resumes with empty ones
        (tmp_path / "none" / f"rpm_agent{i}.npz").unlink()
    # copies of the finished run, as a run killed while writing its files leaves them
    for name in ("stale", "missing", "points"):
        shutil.copytree(d["sd"], tmp_path / name)
    shutil.copy(d["rd"] / "rpm_agent1.npz", tmp_path / "stale")  # 150 transitions
    (tmp_path / "missing" / "rpm_agent1.npz").unlink()
    path = tmp_path / "points" / "checkpoint_agent1.pt"
    payload = torch.load(path, weights_only=False)
    payload["counters"]["episodes"] = 0  # as if the run had died before rewriting this one
    torch.save(payload, path)
    stopped = {run: torch.load(d[run] / "agent_0.ckpt", weights_only=True) for run in ("rd", "rc")}

    older = tmp_path / "older"
    no_rpm = [arg for arg in SMALL if arg != "--save_rpm"]
    resume = ["--resume", "--logdir"]
    runs = run_mains(
        run_python,
        [
            ("MADDPG", [*SMALL, *resume, str(d["rd"])]),
            ("MADDPG", [*cont, *resume, str(d["rc"])]),
            ("MADDPG", [*no_rpm, "--stop_after_episodes", "8", *resume, str(older)]),
            ("MADDPG", [*SMALL, *resume, str(older)]),
            *(
                ("MADDPG", [*SMALL, *resume, str(tmp_path / name)])
                for name in ("none", "stale", "missing", "points")
            ),
            ("MADDPG", [*SMALL, "--continuous_actions", *resume, str(d["rc"])]),
            ("MADDPG", [*foraging, "--env", "Foraging-5x5-2p-1f-v3", *resume, str(d["f"])]),
        ],
    )
    assert_resumed_as_straight(d["sd"], d["rd"], stopped["rd"], runs[0])
    assert_resumed_as_straight(d["sc"], d["rc"], stopped["rc"], runs[1])

    for run in runs[2:5]:
        assert run.code == 0 and "Traceback" not in run.log, run.log[-3000:]
    # the older run goes on without --save_rpm: its memory files stay those of episode 6
    assert "no replay memory" not in runs[2].log, runs[2].log[-2000:]  # loaded
    assert "from an earlier checkpoint" not in runs[2].log, runs[2].log[-2000:]
    assert (
        "rpm_agent1.npz is from an earlier checkpoint (the last one was written without "
        in runs[3].log
    ), runs[3].log[-2000:]
    assert "done: 10 episodes" in runs[3].log
    saved = np.load(older / "rpm_agent0.npz")
    assert int(saved["size"]) == 50  # the last 2 episodes only, not 150 stale transitions more
    assert "no replay memory in" in runs[4].log and "done: 10 episodes" in runs[4].log

    stale, missing, points, flags, env = runs[5:]
    assert all(run.code != 0 for run in runs[5:]), [run.log[-1000:] for run in runs[5:]]
    assert (
        f"rpm_agent1.npz (size and next row [150, 150]) is not the memory written with "
        f"{tmp_path}/stale/checkpoint_agent1.pt ([250, 250])" in stale.log
    ), stale.log[-2000:]
    assert "agent 1: none)" in missing.log, missing.log[-2000:]
    assert "checkpoint files in" in points.log, points.log[-2000:]
    assert "are from different points" in points.log
    assert (
        "written with --time_limit_as_terminal and with --legacy_dynamics; this run is without "
        "--time_limit_as_terminal and without --legacy_dynamics" in flags.log
    ), flags.log[-2000:]
    assert (
        "written with --env Foraging-5x5-2p-1f-coop-v3; this run is with --env "
        "Foraging-5x5-2p-1f-v3" in env.log
    ), env.log[-2000:]


def test_ctrl_c_while_checkpoint_files_are_written_comes_after_the_last(
    run_python: RunPython,
) -> None:
    """The example holds Ctrl-C back while it writes its checkpoint files, then raises it."""
    with imported_example("examples/MADDPG") as train:
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
        "        done.append('all files written')\n"
        "    time.sleep(10)  # a Ctrl-C whose handler ran after the block (on a busy machine)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after:', done)\n"
    )
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "interrupted after: ['all files written']" in proc.stdout
