"""Run PARL's own torch training scripts against this package, as a PARL user would.

    python scripts/run_parl_scripts.py PARL_CHECKOUT [--only NAME ...] [--update docs/migrating-from-parl.md]

``PARL_CHECKOUT`` is a checkout of PaddlePaddle/PARL (2.2.1, its last release). For each of its
``benchmark/torch`` scripts, the script's folder is copied to a temporary folder and a one-line ``gym.py`` that *is* gymnasium is put beside it, which is the
same as changing ``import gym`` to ``import gymnasium as gym`` and nothing else. The script then
runs with this Python, and the ``parl`` of the checkout this script is in, under a small budget
given through its own flags; the
scripts that read their settings from a config module (``a2c_config.py``, ``es_config.py``) get
the budget as a ``config.update(...)`` line appended to that module, since they have no flags
(MAML++'s settings class gets its smaller numbers written in).
Scripts that need an ``xparl`` cluster get one, started and stopped here with a private ``HOME``.

What cannot be installed here is replaced for the run by a stand-in of the same import name from
``scripts/parl_standins`` (put first on that script's path only, and named in the table): the
MAPPO authors' particle envs, SMAC, D4RL (reading a small dataset that
``make_offline_dataset.py`` writes into the run's folder) and transformers' GPT-2; AlphaZero's
Kaggle file of reference moves is generated in the same format.

A run succeeds when the script prints its first evaluation (each script's own line, such as
``Evaluation over`` or ``Test reward``, or for QMIX, which prints none, the ``eval_reward`` it
writes to TensorBoard); it is then stopped. Otherwise the table shows the last
line of its traceback, or that it timed out. Nothing of PARL's code is kept or copied anywhere
but the temporary folder. ``--update FILE`` writes the table into ``FILE`` between the lines
``<!-- run_parl_scripts: begin -->`` and ``<!-- run_parl_scripts: end -->``; the table lives in
``docs/migrating-from-parl.md`` (its "Checking your scripts" section).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

GYM_SHIM = "import sys, gymnasium; sys.modules[__name__] = gymnasium\n"
# the checkout this script is in: its ``parl`` is the one the scripts run against
CHECKOUT = Path(__file__).resolve().parents[1]
STANDINS = Path(__file__).resolve().parent / "parl_standins"


@dataclass(frozen=True)
class Edit:
    """A change to a copied script beyond the ``gym`` import, and why (shown in the table): one
    it needs to run here, or a budget where it has no flag for one."""

    file: str
    old: str
    new: str
    why: str


@dataclass(frozen=True)
class StandIn:
    """A package the script imports that cannot be installed here, replaced for the run by the
    one of the same import name in ``scripts/parl_standins/<folder>``."""

    folder: str
    module: str  # the import name, as the table shows it
    built_on: str  # what it is made of, as the table shows it


@dataclass(frozen=True)
class ScriptRun:
    """One PARL script, the flags that give it a small budget, and how to see its evaluation."""

    name: str
    folder: str  # relative to benchmark/torch
    argv: tuple[str, ...] = ()
    evaluation: str = r"Evaluation over"  # regex of the script's own evaluation line
    # a TensorBoard tag the script writes its evaluation to, for scripts that print none
    evaluation_tag: str = ""
    script: str = "train.py"
    nth: int = 1  # the evaluation that counts (a later one, where the first precedes learning)
    cluster_cpus: int = 0  # > 0: start an xparl cluster with this many slots
    config_module: str = ""  # config module of scripts without flags
    config_name: str = "config"  # the dict in it
    config: dict[str, object] = field(default_factory=dict)
    edits: tuple[Edit, ...] = ()
    # folders of scripts/parl_standins put first on the script's path, and what they stand for
    standins: tuple[StandIn, ...] = ()
    # files the script reads, made in its folder before it starts
    prepare: tuple[Callable[[Path], str], ...] = ()
    # more environment variables of the script ({folder}: its folder)
    environ: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 600.0

    def command(self) -> str:
        """The command line as shown in the table (``{port}`` for the cluster's port)."""
        shown = " ".join((self.script, *self.argv))
        if self.config:
            settings = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
            shown += f" ({self.config_module}: {settings})"
        for edit in self.edits:
            shown += f" + {edit.file}: {edit.new.strip()!r}"
        for standin in self.standins:
            shown += f" + stand-in {standin.module} ({standin.built_on})"
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


# the stand-ins of scripts/parl_standins, for the packages that cannot be installed here
MPE = StandIn("mpe", "multiagent", "parl.env.MAenv on mpe2")
SMAC = StandIn("smac", "smac", "parl.env.MAenv on level-based foraging")
D4RL = StandIn("d4rl", "d4rl", "a make_offline_dataset.py dataset")
TRANSFORMERS = StandIn("transformers", "transformers", "GPT-2 on torch")
OFFLINE_TASK, OFFLINE_KIND, OFFLINE_SAMPLES = "HalfCheetah-v5", "random", 3000


def offline_dataset(folder: Path) -> str:
    """A small D4RL-style dataset of random steps, in ``folder/d4rl`` (D4RL_DATASET_DIR)."""
    command = [
        sys.executable, str(CHECKOUT / "scripts" / "make_offline_dataset.py"),
        "--env", OFFLINE_TASK, "--out", str(folder / "d4rl"), "--kinds", OFFLINE_KIND,
        "--samples", str(OFFLINE_SAMPLES),
    ]  # fmt: skip
    subprocess.run(
        command, env=child_env(folder), capture_output=True, text=True, check=True, timeout=300
    )
    return f"d4rl/{OFFLINE_NAME}: {OFFLINE_SAMPLES} random steps of {OFFLINE_TASK}"


def offline_pickle(folder: Path) -> str:
    """The dataset as the trajectories pickle DT's ``data/download_d4rl_datasets.py`` writes."""
    offline_dataset(folder)
    sys.path.insert(0, str(CHECKOUT))
    from parl.utils.offline_data import load_episodes

    episodes = load_episodes(folder / "d4rl" / OFFLINE_NAME)
    path = folder / "data" / f"{OFFLINE_TASK.split('-')[0].lower()}-{OFFLINE_KIND}-v2.pkl"
    with open(path, "wb") as out:
        pickle.dump(episodes, out)
    return f"data/{path.name}: its {len(episodes)} episodes"


def kaggle_refmoves(folder: Path, boards: int = 100, seed: int = 0) -> str:
    """``refmoves1k_kaggle`` as AlphaZero's ``utils.get_test_dataset`` reads it: one JSON line
    per Connect Four position, ``{"board": 42 cells row by row from the top (0 empty, 1 and 2
    the players), "move score": 7 scores}``. The positions are random games that nobody has
    won yet; the scores are random (positive: the move wins), -1000 for a full column."""
    rng = random.Random(seed)
    lines = []
    while len(lines) < boards:
        board = [[0] * 7 for _ in range(6)]
        for ply in range(rng.randrange(0, 30)):
            free = [c for c in range(7) if board[0][c] == 0]
            column = rng.choice(free)
            row = max(r for r in range(6) if board[r][column] == 0)
            board[row][column] = 1 + ply % 2
        if _four_in_a_row(board):
            continue
        scores = [rng.randint(-20, 20) if board[0][c] == 0 else -1000 for c in range(7)]
        lines.append(json.dumps({"board": sum(board, []), "move score": scores}))
    (folder / "refmoves1k_kaggle").write_text("\n".join(lines) + "\n")
    return f"refmoves1k_kaggle: {boards} random positions with random move scores"


def _four_in_a_row(board: list[list[int]]) -> bool:
    for r in range(6):
        for c in range(7):
            player = board[r][c]
            if player == 0:
                continue
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + i * dr, c + i * dc) for i in range(4)]
                if all(0 <= y < 6 and 0 <= x < 7 and board[y][x] == player for y, x in cells):
                    return True
    return False


# numpy 2 removed ndarray.tostring, which AlphaZero's game keys its search tree with
NUMPY_TOBYTES = Edit(
    "connect4_game.py", "board.tostring()", "board.tobytes()", "numpy 2 removed tostring"
)
# main.py's settings, a dict without flags: two actors of the run's cluster, few games and
# searches (its asserts want the games and the 1000 test positions split evenly between them)
ALPHAZERO_BUDGET = tuple(
    Edit("main.py", old, new, why)
    for old, new, why in (
        ("'localhost:8010'", "'localhost:{port}'", "the run's cluster"),
        ("'actors_num': 25", "'actors_num': 2", "two actors"),
        ("'numEps': 500", "'numEps': 2", "two self-play games"),
        ("'arenaCompare': 50", "'arenaCompare': 4", "four arena games"),
        ("'numMCTSSims': 800", "'numMCTSSims': 4", "four searches a move"),
    )
)


OFFLINE_NAME = f"{OFFLINE_TASK.split('-')[0].lower()}-{OFFLINE_KIND}-v0"
D4RL_DIR = (("D4RL_DATASET_DIR", "{folder}/d4rl"),)
# DT makes gym's v3 MuJoCo envs, which gymnasium builds only with mujoco-py, and steps them in
# the old gym API
DT_ENV = (
    Edit(
        "train.py",
        "import gym\n",
        "import gym\nfrom parl.env import CompatWrapper\n",
        "the old gym API on gymnasium",
    ),
    Edit(
        "train.py",
        "gym.make('HalfCheetah-v3')",
        "CompatWrapper(gym.make('HalfCheetah-v5'))",
        "gymnasium's v3 MuJoCo envs need mujoco-py; the old gym API",
    ),
)

RUNS += (
    # simple_spread: the agents' observations have one size, so the script's np.array(obs) is a
    # plain array under numpy 2 (simple_speaker_listener's differ, which numpy 2 refuses)
    ScriptRun(
        "mappo",
        "mappo",
        ("--env_name", "simple_spread", "--env_num", "2", "--train_total_steps", "100"),
        evaluation=r"Steps: \d+, Episodes",
        standins=(MPE,),
    ),
    # QMIX prints nothing: its evaluation is the eval_reward it writes to TensorBoard, flushed
    # when the script ends after its budget of steps
    ScriptRun(
        "qmix",
        "qmix",
        evaluation_tag="eval_reward",
        config_module="qmix_config.py",
        config_name="QMixConfig",
        config={"training_steps": 200, "test_steps": 100},
        standins=(SMAC,),
    ),
    ScriptRun(
        "coma",
        "coma",
        evaluation=r"^win_rate \[",
        config_module="coma_config.py",
        config={"n_epoch": 2, "n_episodes": 2, "test_episode_n": 3},
        standins=(SMAC,),
    ),
    ScriptRun(
        "cql",
        "cql",
        ("--env", OFFLINE_NAME, "--train_total_steps", "2000", "--test_every_steps", "1000"),
        evaluation=r"Evaluation: total_steps",
        standins=(D4RL,),
        prepare=(offline_dataset,),
        environ=D4RL_DIR,
    ),
    ScriptRun(
        "iql",
        "iql",
        ("--env", OFFLINE_NAME, "--train_total_steps", "2000", "--test_every_steps", "1000"),
        evaluation=r"Evaluation: total_steps",
        standins=(D4RL,),
        prepare=(offline_dataset,),
        environ=D4RL_DIR,
    ),
    ScriptRun(
        "AlphaZero (xparl)",
        "AlphaZero",
        script="main.py",
        evaluation=r"perfect moves rate",
        cluster_cpus=2,
        edits=(NUMPY_TOBYTES, *ALPHAZERO_BUDGET),
        prepare=(kaggle_refmoves,),
    ),
    ScriptRun(
        "DT",
        "DT",
        # its evaluation plays 100 episodes (a number in evaluate_episodes.py): short ones
        (
            "--env",
            "halfcheetah",
            "--dataset",
            OFFLINE_KIND,
            "--max_iters",
            "1",
            "--num_steps_per_iter",
            "5",
            "--warmup_steps",
            "5",
            "--max_ep_len",
            "20",
            "--K",
            "5",
            "--batch_size",
            "8",
            "--embed_dim",
            "32",
            "--n_layer",
            "1",
        ),  # fmt: skip
        evaluation=r"target_\d+_return_mean",
        edits=DT_ENV,
        standins=(TRANSFORMERS,),
        prepare=(offline_pickle,),
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


def child_env(home: Path, standins: tuple[StandIn, ...] = ()) -> dict[str, str]:
    """The environment of a script or an ``xparl`` command: a private ``HOME``, and this
    checkout's ``parl`` first on the path (an installed copy, or a PARL checkout on the
    caller's ``PYTHONPATH``, would otherwise be what runs), after the run's stand-ins."""
    path = [str(STANDINS / s.folder) for s in standins] + [str(CHECKOUT)]
    return {
        **os.environ,
        "HOME": str(home),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(path),
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
            module.write(f"\n{run.config_name}.update({config!r})\n")
    for edit in run.edits:
        path = folder / edit.file
        text = path.read_text()
        if text.count(edit.old) != 1:
            return Outcome(run, False, f"{edit.file} no longer has {edit.old!r} once", 0.0)
        path.write_text(text.replace(edit.old, edit.new.replace("{port}", str(port))))
    argv = [a.replace("{port}", str(port)) for a in run.argv]
    env = child_env(home, run.standins)
    env.update({key: value.replace("{folder}", str(folder)) for key, value in run.environ})
    started = time.monotonic()
    for make in run.prepare:
        print(f"  prepared {make(folder)}", flush=True)
    if run.cluster_cpus:
        result = xparl(home, "start", "--port", str(port), "--cpu_num", str(run.cluster_cpus))
        if result.returncode != 0:
            return Outcome(run, False, f"xparl start failed: {result.stderr.strip()}", 0.0)
    log_path = folder / "output.log"
    process = None
    try:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, run.script, *argv],
                cwd=folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        pattern = re.compile(run.evaluation, re.MULTILINE)
        deadline = started + run.timeout_s
        while True:
            ended = process.poll() is not None  # read after: a last line is not missed
            text = log_path.read_text(errors="replace")
            line = evaluation_line(run, pattern, text, folder)
            if line is not None:
                stop(process)
                return Outcome(run, True, line[:120], time.monotonic() - started)
            if ended:
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


def evaluation_line(run: ScriptRun, pattern: re.Pattern[str], log: str, folder: Path) -> str | None:
    """The run's ``nth`` evaluation, as its log line, or as the value of its TensorBoard tag;
    ``None`` while there is none."""
    if run.evaluation_tag:
        values = tensorboard_values(folder, run.evaluation_tag)
        if len(values) < run.nth:
            return None
        step, value = values[run.nth - 1]
        return f"{run.evaluation_tag} = {value:.6g} at step {step} (TensorBoard)"
    matches = list(pattern.finditer(log))
    if len(matches) < run.nth:
        return None
    found = matches[run.nth - 1]
    line = log[log.rfind("\n", 0, found.start()) + 1 : log.find("\n", found.end())]
    return LOG_PREFIX.sub("", line.split("\r")[-1]).strip()  # no tqdm, no stamp


def tensorboard_values(folder: Path, tag: str) -> list[tuple[int, float]]:
    """``(step, value)`` of every scalar ``tag`` in the event files under ``folder``."""
    from google.protobuf.message import DecodeError
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    values = []
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        try:
            for event in EventFileLoader(str(path)).Load():
                for item in event.summary.value:
                    if item.tag != tag:
                        continue
                    # the loader turns a scalar's simple_value into a tensor
                    kind = item.WhichOneof("value")
                    value = make_ndarray(item.tensor) if kind == "tensor" else item.simple_value
                    values.append((int(event.step), float(value)))
        except (OSError, DecodeError):  # a file being written: read again at the next poll
            continue
    return values


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
