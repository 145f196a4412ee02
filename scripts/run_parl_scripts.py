"""Run PARL's own torch training scripts against this package, as a PARL user would.

    python scripts/run_parl_scripts.py PARL_CHECKOUT [--only NAME ...] [--update docs/migrating-from-parl.md]

``PARL_CHECKOUT`` is a checkout of PaddlePaddle/PARL (2.2.1, its last release). For each of its
``benchmark/torch`` scripts that can run here (not those that need D4RL, SMAC, OpenAI's
particle envs or a Kaggle file), the script's folder is copied to a
temporary folder and a one-line ``gym.py`` that *is* gymnasium is put beside it, which is the
same as changing ``import gym`` to ``import gymnasium as gym`` and nothing else. The script then
runs with this Python, and the ``parl`` of the checkout this script is in, under a small budget
given through its own flags; the
scripts that read their settings from a config module (``a2c_config.py``, ``es_config.py``) get
the budget as a ``config.update(...)`` line appended to that module, since they have no flags
(MAML++'s settings class gets its smaller numbers written in).
Scripts that need an ``xparl`` cluster get one, started and stopped here with a private ``HOME``.

A run succeeds when the script prints its first evaluation (each script's own line, such as
``Evaluation over`` or ``Test reward``); it is then stopped. Otherwise the table shows the last
line of its traceback, or that it timed out. Nothing of PARL's code is kept or copied anywhere
but the temporary folder. ``--update FILE`` writes the table into ``FILE`` between the lines
``<!-- run_parl_scripts: begin -->`` and ``<!-- run_parl_scripts: end -->``; the table lives in
``docs/migrating-from-parl.md`` (its "Checking your scripts" section).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

GYM_SHIM = "import sys, gymnasium; sys.modules[__name__] = gymnasium\n"
# the checkout this script is in: its ``parl`` is the one the scripts run against
CHECKOUT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Edit:
    """A change to a copied script beyond the ``gym`` import, and why (shown in the table): one
    it needs to run here, or a budget where it has no flag for one."""

    file: str
    old: str
    new: str
    why: str


@dataclass(frozen=True)
class ScriptRun:
    """One PARL script, the flags that give it a small budget, and how to see its evaluation."""

    name: str
    folder: str  # relative to benchmark/torch
    argv: tuple[str, ...] = ()
    evaluation: str = r"Evaluation over"  # regex of the script's own evaluation line
    nth: int = 1  # the evaluation that counts (a later one, where the first precedes learning)
    cluster_cpus: int = 0  # > 0: start an xparl cluster with this many slots
    config_module: str = ""  # config module of scripts without flags
    config: dict[str, object] = field(default_factory=dict)
    edits: tuple[Edit, ...] = ()
    timeout_s: float = 600.0

    def command(self) -> str:
        """The command line as shown in the table (``{port}`` for the cluster's port)."""
        shown = " ".join(("train.py", *self.argv))
        if self.config:
            settings = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
            shown += f" ({self.config_module}: {settings})"
        for edit in self.edits:
            shown += f" + {edit.file}: {edit.new.strip()!r}"
        return shown


MUJOCO = "HalfCheetah-v4"
ATARI = "PongNoFrameskip-v4"

# gym 0.21-0.26 loaded ale-py as a plugin, so gym.make("PongNoFrameskip-v4") worked in any
# process; gymnasium 1.x knows the Atari ids only once ale_py is imported. parl.env does it, but
# the actor of ppo's env_utils.py calls gym.make before it imports parl.env.
IMPORT_ALE = Edit(
    "env_utils.py",
    "import gym\n",
    "import gym\nimport ale_py\n",
    "gymnasium 1.x registers the Atari ids only when ale_py is imported",
)
# numpy 2 refuses np.zeros(None), which ES's RunningStat() copies with (numpy 1 read it as ());
# numpy 1.24 removed the alias np.int that ES's unflatten uses.
NUMPY_SHAPE = Edit(
    "obs_filter.py",
    "def __init__(self, shape=None):",
    "def __init__(self, shape=()):",
    "numpy 2 refuses None as a shape",
)
NUMPY_INT = Edit(
    "utils.py",
    "dtype=np.int)",
    "dtype=int)",
    "numpy 1.24 removed np.int",
)

# MAML++ reads its settings from a dataclass without flags: a short first epoch, a smaller test set
MAML_BUDGET = (
    Edit("config.py", "total_iter_per_epoch = 500", "total_iter_per_epoch = 20", "a short epoch"),
    Edit("config.py", "num_test_tasks = 10000", "num_test_tasks = 1000", "a smaller test set"),
)

RUNS: tuple[ScriptRun, ...] = (
    ScriptRun("QuickStart", "QuickStart", evaluation=r"Test reward"),
    ScriptRun(
        "dqn",
        "dqn",
        ("--env", ATARI, "--train_total_steps", "200000", "--test_every_steps", "100000"),
        evaluation=r"eval_agent done",
        timeout_s=900.0,
    ),
    ScriptRun(
        "dqn (DDQN)",
        "dqn",
        ("--env", ATARI, "--algo", "DDQN", "--train_total_steps", "200000"),
        evaluation=r"eval_agent done",
        timeout_s=900.0,
    ),
    ScriptRun(
        "ppo (MuJoCo)",
        "ppo",
        ("--env", MUJOCO, "--continuous_action", "--seed", "1", "--test_every_steps", "2048"),
    ),
    ScriptRun(
        "ppo (Atari, xparl)",
        "ppo",
        ("--env", ATARI, "--env_num", "2", "--xparl_addr", "localhost:{port}", "--seed", "1"),
        cluster_cpus=2,
        edits=(IMPORT_ALE,),
    ),
    ScriptRun("sac", "sac", ("--env", MUJOCO, "--train_total_steps", "20000")),
    ScriptRun(
        "td3",
        "td3",
        ("--env", MUJOCO, "--train_total_steps", "20000"),
        evaluation=r"Evaluate reward",
    ),
    ScriptRun("ddpg", "ddpg", ("--env", MUJOCO, "--train_total_steps", "20000")),
    # it evaluates after its first episode, then every 11,000 steps: the second evaluation
    # follows its 10,000 random steps and a thousand updates
    ScriptRun(
        "oac",
        "oac",
        ("--env", MUJOCO, "--train_total_steps", "20000", "--test_every_steps", "11000"),
        nth=2,
    ),
    ScriptRun(
        "a2c (xparl)",
        "a2c",
        evaluation=r"'Sample steps'",
        cluster_cpus=2,
        config_module="a2c_config.py",
        config={"actor_num": 2, "env_num": 2, "log_metrics_interval_s": 5},
    ),
    ScriptRun(
        "ES (xparl)",
        "ES",
        evaluation=r"'episodes_this_iter'",
        cluster_cpus=2,
        config_module="es_config.py",
        config={
            "env_name": "Hopper-v4",
            "actor_num": 2,
            "noise_size": 10_000_000,
            "min_episodes_per_batch": 10,
            "min_steps_per_batch": 500,
        },
        edits=(NUMPY_SHAPE, NUMPY_INT),
    ),
    ScriptRun("maml++", "maml++", evaluation=r"epoch 1: test loss", edits=MAML_BUDGET),
    # MAenv's episodes are 25 steps, as in PARL: the first evaluation comes after 4 of them
    ScriptRun(
        "maddpg",
        "maddpg",
        ("--env", "simple_speaker_listener", "--max_episodes", "8", "--test_every_episodes", "4"),
    ),
    ScriptRun(
        "maddpg (continuous)",
        "maddpg",
        (
            "--env",
            "simple_spread",
            "--continuous_actions",
            "--max_episodes",
            "8",
            "--test_every_episodes",
            "4",
        ),
    ),
)


# parl's logger stamps each line "[11-25 21:30:19 train.py:125] "; tqdm redraws with "\r"
LOG_PREFIX = re.compile(r"^.*?\[\d\d-\d\d \d\d:\d\d:\d\d [^\]]*\] ")


@dataclass
class Outcome:
    run: ScriptRun
    ok: bool
    detail: str
    seconds: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(home: Path) -> dict[str, str]:
    """The environment of a script or an ``xparl`` command: a private ``HOME``, and this
    checkout's ``parl`` first on the path (an installed copy, or a PARL checkout on the
    caller's ``PYTHONPATH``, would otherwise be what runs)."""
    return {
        **os.environ,
        "HOME": str(home),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(CHECKOUT),
    }


def xparl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("xparl")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "parl.ssh.xparl"]
    return subprocess.run(
        [*command, *args],
        env=child_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )


def last_error_line(log: str) -> str:
    """The exception line of the last traceback in ``log``, or its last non-empty line."""
    lines = [line for line in log.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in log:
        for line in reversed(lines):
            if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b|^[\w.]+: ", line):
                return line.strip()
    return lines[-1].strip() if lines else "(no output)"


def stop(process: subprocess.Popen[bytes]) -> None:
    """End the script and everything it started (it runs in a session of its own)."""
    for sig, wait_s in ((signal.SIGINT, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_one(checkout: Path, run: ScriptRun, workdir: Path) -> Outcome:
    source = checkout / "benchmark" / "torch" / run.folder
    folder = workdir / run.name.replace(" ", "_").replace("(", "").replace(")", "").replace(",", "")
    shutil.copytree(source, folder)
    folder.chmod(0o700)  # a checkout's folder may be group-writable: the agent's cache lies in it
    (folder / "gym.py").write_text(GYM_SHIM)
    home = folder / "home"
    home.mkdir(mode=0o700)
    port = free_port() if run.cluster_cpus else 0
    config = dict(run.config)
    if run.cluster_cpus and run.config_module:
        config["master_address"] = f"localhost:{port}"
    if config:
        with open(folder / run.config_module, "a") as module:
            module.write(f"\nconfig.update({config!r})\n")
    for edit in run.edits:
        path = folder / edit.file
        text = path.read_text()
        if text.count(edit.old) != 1:
            return Outcome(run, False, f"{edit.file} no longer has {edit.old!r} once", 0.0)
        path.write_text(text.replace(edit.old, edit.new))
    argv = [a.replace("{port}", str(port)) for a in run.argv]
    env = child_env(home)
    started = time.monotonic()
    if run.cluster_cpus:
        result = xparl(home, "start", "--port", str(port), "--cpu_num", str(run.cluster_cpus))
        if result.returncode != 0:
            return Outcome(run, False, f"xparl start failed: {result.stderr.strip()}", 0.0)
    log_path = folder / "output.log"
    process = None
    try:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "train.py", *argv],
                cwd=folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        pattern = re.compile(run.evaluation)
        deadline = started + run.timeout_s
        while True:
            text = log_path.read_text(errors="replace")
            matches = list(pattern.finditer(text))
            found = matches[run.nth - 1] if len(matches) >= run.nth else None
            if found:
                stop(process)
                line = text[text.rfind("\n", 0, found.start()) + 1 : text.find("\n", found.end())]
                line = LOG_PREFIX.sub("", line.split("\r")[-1]).strip()  # no tqdm, no stamp
                return Outcome(run, True, line[:120], time.monotonic() - started)
            if process.poll() is not None:
                text = log_path.read_text(errors="replace")
                return Outcome(run, False, last_error_line(text), time.monotonic() - started)
            if time.monotonic() > deadline:
                stop(process)
                text = log_path.read_text(errors="replace")
                detail = f"no evaluation within {run.timeout_s:.0f} s; last line: "
                return Outcome(run, False, detail + last_error_line(text), run.timeout_s)
            time.sleep(0.5)
    finally:  # also when the harness itself is interrupted: nothing it started outlives it
        if process is not None and process.poll() is None:
            stop(process)
        if run.cluster_cpus:
            xparl(home, "stop", "--port", str(port))


def table(outcomes: list[Outcome]) -> str:
    rows = [
        "| script | command | result | time |",
        "|---|---|---|---|",
    ]
    for o in outcomes:
        which = f" (evaluation {o.run.nth})" if o.run.nth > 1 else ""
        result = f"evaluates{which}: `{o.detail}`" if o.ok else f"fails: `{o.detail}`"
        rows.append(
            f"| `benchmark/torch/{o.run.folder}` | `{o.run.command()}` | {result} | "
            f"{o.seconds:.0f} s |"
        )
    return "\n".join(rows)


BEGIN, END = "<!-- run_parl_scripts: begin -->", "<!-- run_parl_scripts: end -->"


def update_file(path: Path, text: str) -> None:
    """Replace what stands between the ``BEGIN`` and ``END`` lines of ``path`` with ``text``."""
    content = path.read_text()
    start, stop = content.find(BEGIN), content.find(END)
    if start < 0 or stop < start:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} block to write the table into")
    path.write_text(content[: start + len(BEGIN)] + "\n" + text + "\n" + content[stop:])


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP end the harness as Ctrl-C does, through the cleanup of ``run_one``
    (the script's own process group, its xparl cluster) and of the work folder."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a checkout of PaddlePaddle/PARL")
    parser.add_argument("--only", nargs="+", default=None, help="run only these script names")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders")
    parser.add_argument(
        "--update",
        type=Path,
        help="write the table into this file's block (docs/migrating-from-parl.md)",
    )
    args = parser.parse_args()
    bench = args.checkout / "benchmark" / "torch"
    if not bench.is_dir():
        parser.error(f"{args.checkout} has no benchmark/torch: give a checkout of PARL")
    runs = [r for r in RUNS if args.only is None or r.name in args.only or r.folder in args.only]
    if not runs:
        parser.error(f"--only matched none of {[r.name for r in RUNS]}")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupted)
    workdir = Path(tempfile.mkdtemp(prefix="parl-scripts-"))
    outcomes = []
    try:
        for run in runs:
            print(f"running {run.name}: {run.command()}", flush=True)
            outcome = run_one(args.checkout, run, workdir)
            status = "ok" if outcome.ok else "FAILED"
            print(f"  {status} in {outcome.seconds:.0f} s: {outcome.detail}", flush=True)
            outcomes.append(outcome)
    except KeyboardInterrupt as exc:
        print(f"interrupted ({exc or 'SIGINT'}): the scripts that finished are", flush=True)
        print(table(outcomes))
        return 130
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(table(outcomes))
    if args.update is not None:
        update_file(args.update, table(outcomes))
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
