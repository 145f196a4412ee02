"""Every example's command line: ``--help`` runs, lists the shared flags with help text and
their defaults, shows no reStructuredText markup, and the older spellings still parse the same
as the new ones while staying out of ``--help``; numbers out of a flag's range, a negative
``--stop_after_steps``, an env of the wrong action space and ``--resume`` without a checkpoint
are refused by name before anything starts. The scripts' checks run many examples in one
interpreter (``example_scripts.run_scripts``)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from pathlib import Path

import pytest

from parl.utils.train_flags import (
    COMMON_FLAGS,
    add_common_flags,
    example_parser,
    fraction,
    non_negative_float,
    plain_text,
    positive_float,
    require_checkpoint,
)

from .conftest import REPO_ROOT, RunPython
from .example_scripts import run_scripts

EXAMPLES = REPO_ROOT / "examples"
SCRIPTS = {
    name: EXAMPLES / name / "train.py"
    for name in ("A2C", "DDPG", "DQN", "ES", "IMPALA", "MAPPO", "PPO", "QuickStart", "SAC", "TD3")
}
SCRIPTS["OAC"] = EXAMPLES / "OAC" / "train.py"
SCRIPTS["GA3C"] = EXAMPLES / "GA3C" / "train.py"
SCRIPTS["MADDPG"] = EXAMPLES / "MADDPG" / "train.py"
SCRIPTS["MAML"] = EXAMPLES / "MAML" / "train.py"
SCRIPTS["AlphaZero"] = EXAMPLES / "AlphaZero" / "train.py"
SCRIPTS |= {name: EXAMPLES / name / "train.py" for name in ("CQL", "IQL", "DT", "COMA", "QMIX")}
SCRIPTS["remote_hello"] = EXAMPLES / "remote_hello" / "count.py"

OFF_POLICY = set(COMMON_FLAGS) - {"xparl_addr"}
EXPECTED = {
    "A2C": set(COMMON_FLAGS),
    "IMPALA": set(COMMON_FLAGS),
    "GA3C": set(COMMON_FLAGS),
    "ES": set(COMMON_FLAGS),
    "PPO": set(COMMON_FLAGS),
    "MAPPO": set(COMMON_FLAGS),
    "DQN": OFF_POLICY,
    "DDPG": OFF_POLICY,
    "TD3": OFF_POLICY,
    "SAC": OFF_POLICY,
    "CQL": OFF_POLICY,
    "IQL": OFF_POLICY,
    "DT": OFF_POLICY,
    "OAC": OFF_POLICY,
    # multi-agent learners in one process, as PARL's QMIX and COMA scripts
    "COMA": OFF_POLICY,
    "QMIX": OFF_POLICY,
    # PARL's MADDPG counts episodes (--max_episodes, --test_every_episodes), not steps
    "MADDPG": OFF_POLICY - {"train_total_steps", "test_every_steps"},
    # regression tasks: no episodes to evaluate, one process
    "MAML": set(COMMON_FLAGS) - {"eval_episodes", "xparl_addr"},
    # steps are iterations of self-play, training and arena; episodes are evaluation games
    "AlphaZero": set(COMMON_FLAGS),
    "QuickStart": set(COMMON_FLAGS)
    - {"train_total_steps", "test_every_steps", "resume", "xparl_addr"},
    "remote_hello": {"xparl_addr"},
}
# old spelling -> the same command line in the shared spelling
OLD_SPELLINGS: dict[str, list[tuple[list[str], list[str]]]] = {
    name: [(["--no_tqdm"], ["--no_progress"]), (["--no-progress"], ["--no_progress"])]
    for name in ("DQN", "DDPG", "TD3", "SAC", "OAC")
}
OLD_SPELLINGS |= {
    "QuickStart": [
        (["--max-episodes", "7"], ["--max_episodes", "7"]),
        (["--eval-every", "3"], ["--eval_every", "3"]),
        (["--target-return", "100"], ["--target_return", "100"]),
        (["--hidden-size", "8"], ["--hidden_size", "8"]),
        (["--torch-threads", "2"], ["--torch_threads", "2"]),
        (["--no-progress"], ["--no_progress"]),
    ],
    "PPO": [
        (["--eval_episode", "3"], ["--eval_episodes", "3"]),
        (["--no-progress"], ["--no_progress"]),
    ],
    "A2C": [
        (["--max_sample_steps", "500"], ["--train_total_steps", "500"]),
        (["--no-progress"], ["--no_progress"]),
    ],
    "IMPALA": [(["--max_sample_steps", "500"], ["--train_total_steps", "500"])],
    "GA3C": [(["--max_sample_steps", "500"], ["--train_total_steps", "500"])],
    "AlphaZero": [(["--actor_num", "3"], ["--actors_num", "3"])],
}
MARKUP = re.compile(r"``|:[a-z]+:`|`[^`\s]+`")


def _option_blocks(help_text: str) -> dict[str, str]:
    """``--flag`` -> its help text, read from argparse's ``--help`` layout."""
    blocks: dict[str, str] = {}
    current: list[str] = []
    names: list[str] = []
    for line in help_text.splitlines():
        if re.match(r"^  -", line):
            for name in names:
                blocks[name] = " ".join(current)
            head, _, rest = line.strip().partition("  ")
            names = [n.split(" ")[0] for n in head.split(", ")]
            current = [rest.strip()] if rest.strip() else []
        elif names and line.startswith("    ") and line.strip():
            current.append(line.strip())
        elif not line.strip() or not line.startswith(" "):
            for name in names:
                blocks[name] = " ".join(current)
            names, current = [], []
    for name in names:
        blocks[name] = " ".join(current)
    return blocks


def test_every_example_is_checked_here() -> None:
    folders = {path.parent.name for path in EXAMPLES.glob("*/README.md")}
    assert folders == set(SCRIPTS) == set(EXPECTED), (
        f"examples not listed here: {sorted(folders - set(SCRIPTS))}"
    )


def test_example_help_lists_the_shared_flags_with_help_and_defaults(
    run_python: RunPython,
) -> None:
    """``--help`` of every example, all in one interpreter."""
    results = run_scripts(run_python, [(name, SCRIPTS[name], ["--help"]) for name in SCRIPTS])
    for name in sorted(SCRIPTS):
        result = results[name]
        assert result["code"] == 0, f"{name}: {result['error']}\n{result['stderr'][-3000:]}"
        _check_help(name, result["stdout"])


def _check_help(name: str, text: str) -> None:
    assert not MARKUP.search(text), f"reStructuredText markup in {name}'s --help:\n{text}"
    blocks = _option_blocks(text)
    flags = {f[2:] for f in blocks if f.startswith("--")}
    missing = EXPECTED[name] - flags
    assert not missing, f"{name} lacks {sorted(missing)}:\n{text}"
    for flag, description in blocks.items():
        if flag in ("-h", "--help"):
            continue
        assert description, f"{name}: {flag} has no help text:\n{text}"
        switch = re.search(rf"^  {re.escape(flag)}\s{{2,}}|^  {re.escape(flag)}$", text, re.M)
        if not switch:  # a flag that takes a value shows its default
            assert "default" in description, f"{name}: {flag}'s help hides its default"
    for old, _ in OLD_SPELLINGS.get(name, []):
        assert old[0] not in flags, f"{name}: the old spelling {old[0]} shows in --help"


PARSE = """
import json, os, sys
examples = {examples!r}
out = {{}}
for name, script, pairs in {cases!r}:
    before = set(sys.modules)
    sys.path.insert(0, os.path.dirname(script))
    example = __import__(os.path.basename(script)[:-3])
    parser = example.make_parser()
    out[name] = [[vars(parser.parse_args(old)), vars(parser.parse_args(new)),
                  vars(parser.parse_args([]))] for old, new in pairs]
    sys.path.pop(0)
    for module in set(sys.modules) - before:  # each example's own modules (model.py, ...)
        if (getattr(sys.modules[module], "__file__", None) or "").startswith(examples):
            del sys.modules[module]
print("PARSED" + json.dumps(out))
"""


def test_example_old_flag_spellings_parse_as_the_shared_ones(run_python: RunPython) -> None:
    """Every example's parser, all in one interpreter."""
    cases = [(name, str(SCRIPTS[name]), OLD_SPELLINGS[name]) for name in sorted(OLD_SPELLINGS)]
    proc = run_python(PARSE.format(examples=str(EXAMPLES), cases=cases), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("PARSED"))
    parsed = json.loads(line[6:])
    assert sorted(parsed) == sorted(OLD_SPELLINGS)
    for name, pairs in OLD_SPELLINGS.items():
        for (old, new), (old_ns, new_ns, default_ns) in zip(pairs, parsed[name], strict=True):
            assert old_ns == new_ns, f"{name}: {old} parsed as {old_ns}, {new} as {new_ns}"
            assert old_ns != default_ns, f"{name}: {old} was ignored"


def test_plain_text_strips_inline_markup() -> None:
    assert plain_text("``--env X`` and :class:`parl.Agent` or :func:`~a.b` and `c`") == (
        "--env X and parl.Agent or a.b and c"
    )


def test_common_flags_refuse_an_unknown_name_and_hide_aliases() -> None:
    parser = example_parser("Title with ``markup``.\n\n    python x.py --env Y\n\nMore.")
    with pytest.raises(ValueError, match="not among"):
        add_common_flags(parser, env="CartPole-v1", skip=["max_steps"])
    parser = example_parser(None)
    add_common_flags(
        parser,
        env="CartPole-v1",
        defaults={"train_total_steps": 10},
        dest={"train_total_steps": "max_sample_steps"},
        aliases={"train_total_steps": ["--max_sample_steps"], "no_progress": ["--no_tqdm"]},
    )
    args = parser.parse_args(["--max_sample_steps", "5", "--no_tqdm"])
    assert args.max_sample_steps == 5 and args.progress is False
    assert parser.parse_args([]).max_sample_steps == 10
    assert "--max_sample_steps" not in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--torch_threads", "0"])
    described = example_parser("Title with ``markup``.\n\n    python x.py --env Y\n\nMore.")
    assert described.description == "Title with markup.\n\n    python x.py --env Y"


def test_remote_hello_runs_cleanly_and_reads_the_right_way_round(run_python: RunPython) -> None:
    """count.py, as a user runs it: exit 0, nothing on stderr that looks like a failure, and a
    ratio of 1 or more that says "faster" or "slower" (never "0.14x faster")."""
    proc = run_python(args=[str(SCRIPTS["remote_hello"]), "--actor_num", "2", "--n", "20000"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    for blemish in ("Traceback", "Exception ignored"):
        assert blemish not in proc.stderr, proc.stderr[-3000:]
    line = proc.stdout.strip().splitlines()[-1]
    found = re.fullmatch(
        r"2 x count to 2e\+04: serial [\d.]+ s, remote [\d.]+ s on \d+ cores "
        r"\((\d+\.\d\d)x (faster|slower)\)",
        line,
    )
    assert found and float(found.group(1)) >= 1.0, line
    spec = importlib.util.spec_from_file_location("remote_hello_count", SCRIPTS["remote_hello"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    speedup = module.speedup
    assert speedup(2.0, 1.0) == "2.00x faster" and speedup(1.0, 7.0) == "7.00x slower"
    assert speedup(1.0, 1.0) == "1.00x faster"


def test_env_flag_refuses_unknown_ids_and_wrong_action_spaces_as_usage_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--env`` is checked as it is parsed (the default too): one usage error, exit status 2,
    naming the id and gymnasium's suggestion, or what the algorithm needs; an example of
    another kind of env (MPE scenarios) takes its ids unchecked."""
    parser = example_parser(None)
    add_common_flags(parser, env="CartPole-v1", action_space="continuous", algorithm="SAC")
    for argv, words in [
        ([], "argument --env: SAC needs a continuous (Box) action space; CartPole-v1 has"),
        (["--env", "CartPole-v2"], "argument --env: unknown env id 'CartPole-v2': Environment"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(argv)
        assert exit_.value.code == 2
        assert words in capsys.readouterr().err
    assert parser.parse_args(["--env", "Pendulum-v1"]).env == "Pendulum-v1"
    plain = example_parser(None)
    add_common_flags(plain, env="CartPole-v1")
    assert plain.parse_args([]).env == "CartPole-v1"
    other = example_parser(None)
    add_common_flags(other, env="simple_spread", gym_env=False)
    assert other.parse_args(["--env", "simple_tag"]).env == "simple_tag"


def test_a_device_this_machine_lacks_is_a_usage_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    parser = example_parser(None)
    add_common_flags(parser, env="CartPole-v1")
    assert parser.parse_args(["--device", "cpu"]).device == "cpu"
    assert parser.parse_args([]).device == "cpu"
    for device, message in (
        ("cuda", "argument --device: device 'cuda' asks for CUDA, but no GPU is available"),
        ("gpu0", "argument --device: device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>'"),
    ):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(["--device", device])
        assert exited.value.code == 2
        assert message in capsys.readouterr().err


def test_ppo_config_zoo_is_the_readmes_halfcheetah_configuration(run_python: RunPython) -> None:
    """The PPO HalfCheetah-v5 results of docs/algorithms/ppo.md ran rl-zoo's configuration: ``--config zoo``
    reaches it from the example's own command line; without ``--continuous_action`` it is
    refused by name."""
    code = f"""
import json, sys
sys.path.insert(0, {str(EXAMPLES / "PPO")!r})
import train
config = train.parse_config(["--env", "HalfCheetah-v5", "--continuous_action", "--config", "zoo"])
default = train.parse_config(["--env", "HalfCheetah-v5", "--continuous_action"])
print("CONFIG" + json.dumps([config, default]))
train.parse_config(["--env", "CartPole-v1", "--config", "zoo"])
"""
    proc = run_python(code, timeout=120)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("CONFIG"))
    zoo, default = json.loads(line[len("CONFIG") :])
    readme = {"hidden_sizes": [256, 256], "activation": "relu", "log_std_init": -2.0,
              "step_nums": 512, "update_epochs": 20, "initial_lr": 2.0633e-05, "env_num": 1}  # fmt: skip
    assert {k: zoo[k] for k in readme} == readme
    assert zoo["step_nums"] // zoo["num_minibatches"] == 64  # 64-sample minibatches
    assert zoo["train_total_steps"] == 1_000_000 and zoo["env"] == "HalfCheetah-v5"
    assert default["step_nums"] == 2048 and default["activation"] == "tanh"
    assert proc.returncode == 2 and "--config zoo is rl-zoo's MuJoCo setting" in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_cql_config_paper_is_the_papers_sampling_and_flags_override_a_preset(
    run_python: RunPython,
) -> None:
    """CQL's default is the CPU preset (2 sampled actions per proposal, 200k updates);
    ``--config paper`` is the paper's 10 and 1M; a flag given beside a preset wins."""
    code = f"""
import json, sys
sys.path.insert(0, {str(EXAMPLES / "CQL")!r})
import train
rows = []
for argv in ([], ["--config", "paper"], ["--config", "paper", "--num_random", "3",
             "--train_total_steps", "7"]):
    a = train.parse_args(["--dataset", "d", *argv])
    rows.append([a.config, a.num_random, a.train_total_steps, a.test_every_steps])
print("CONFIG" + json.dumps(rows))
"""
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("CONFIG"))
    cpu, paper, mixed = json.loads(line[len("CONFIG") :])
    assert cpu == ["cpu", 2, 200_000, 5_000]
    assert paper == ["paper", 10, 1_000_000, 10_000]
    assert mixed == ["paper", 3, 7, 10_000]


NEGATIVE_STOP = ["AlphaZero", "COMA", "DDPG", "DQN", "MAML", "OAC", "QMIX", "SAC", "TD3"]
OUT_OF_RANGE = [
    ("COMA", "--entropy_coef=-0.1",
     "argument --entropy_coef: must be a finite number of 0 or more, got -0.1"),
    ("COMA", "--entropy_coef=nan",
     "argument --entropy_coef: must be a finite number of 0 or more, got nan"),
    ("COMA", "--entropy_coef=inf",
     "argument --entropy_coef: must be a finite number of 0 or more, got inf"),
    ("COMA", "--gamma=1.5", "argument --gamma: must be a number in [0, 1], got 1.5"),
    ("COMA", "--actor_lr=-1", "argument --actor_lr: must be a finite number above 0"),
    ("QMIX", "--lr=nan", "argument --lr: must be a finite number above 0, got nan"),
    ("MAPPO", "--lr=0", "argument --lr: must be a finite number above 0, got 0"),
    ("PPO", "--eval_episodes=-1", "--eval_episodes: must be 0"),
    ("remote_hello", "--actor_num=0", "argument --actor_num: must be 1 or more, got 0"),
    ("remote_hello", "--n=-5", "argument --n: must be 1 or more, got -5"),
]  # fmt: skip
# (example, its usage error)
WRONG_ACTION_SPACE = [
    ("DQN", "argument --env: DQN needs a discrete action space; Pendulum-v1 has Box("),
    (
        "SAC",
        "argument --env: SAC needs a continuous (Box) action space; CartPole-v1 has Discrete(2)",
    ),
    ("PPO", "error: --env Pendulum-v1: its actions are Box(-2.0, 2.0, (1,), float32); add --cont"),
]


@pytest.mark.slow  # runs the examples' scripts (torch, gymnasium)
def test_out_of_range_flags_and_wrong_action_spaces_are_refused_before_anything_starts(
    run_python: RunPython, tmp_path: Path
) -> None:
    """``--stop_after_steps -1`` would train nothing and then write an untrained model over the
    run's: every example that has the flag refuses it. A number out of a flag's range is a usage
    error naming the flag; an env of the wrong action space is named with the fix. Nothing is
    written first. The scripts run in one interpreter, each as its command line runs it."""
    cases = [(f"stop {name}", SCRIPTS[name], ["--stop_after_steps", "-1", "--logdir",
              str(tmp_path / f"stop-{name}")]) for name in NEGATIVE_STOP]  # fmt: skip
    cases += [(f"{name} {flag}", SCRIPTS[name], [flag, "--logdir", str(tmp_path / f"range{i}")])
              for i, (name, flag, _) in enumerate(OUT_OF_RANGE)]  # fmt: skip
    cases += [(f"space {name}", SCRIPTS[name], ["--env", "CartPole-v1" if name == "SAC" else
               "Pendulum-v1", "--train_total_steps", "10", "--logdir",
               str(tmp_path / f"space-{name}"), "--no_progress"])
              for name, *_ in WRONG_ACTION_SPACE]  # fmt: skip
    cases += [(f"id {env}", SCRIPTS["SAC"], ["--env", env, "--logdir", str(tmp_path / "id")])
              for env in ("CartPole-v2", "CartPol-v1")]  # fmt: skip
    results = run_scripts(run_python, cases)
    for name in NEGATIVE_STOP:
        result = results[f"stop {name}"]
        assert result["code"] == 2, f"{name}: {result}"
        assert "--stop_after_steps" in result["stderr"] and "-1" in result["stderr"], result
    # DQN's words: a negative count would write the untrained model over the run's
    assert "--stop_after_steps must be 0 (never) or more, got -1" in results["stop DQN"]["stderr"]
    for name, flag, message in OUT_OF_RANGE:
        result = results[f"{name} {flag}"]
        assert result["code"] == 2 and message in result["stderr"], f"{name} {flag}: {result}"
    for name, pattern in WRONG_ACTION_SPACE:
        result = results[f"space {name}"]
        assert result["code"] == 2 and pattern in result["stderr"], result
        assert "Traceback" not in result["stderr"], result
    # an unknown id: one usage error naming it and gymnasium's suggestion, no traceback
    for env, suggestion in (("CartPole-v2", "[ `v0`, `v1` ]"), ("CartPol-v1", "`CartPole`")):
        result = results[f"id {env}"]
        assert result["code"] == 2, result
        assert f"argument --env: unknown env id '{env}'" in result["stderr"], result
        assert suggestion in result["stderr"] and "Traceback" not in result["stderr"], result
    assert list(tmp_path.iterdir()) == [], "a refused command line wrote its logdir"


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        (positive_float, ["3e-4", "10"], ["0", "-1e-4", "nan", "inf", "fast"]),
        (non_negative_float, ["0", "0.001"], ["-0.1", "nan", "-inf"]),
        (fraction, ["0", "0.99", "1"], ["1.5", "-0.01", "nan"]),
    ],
)
def test_number_flag_types_take_their_range_and_refuse_the_rest(kind, good, bad) -> None:
    for value in good:
        assert kind(value) == float(value)
    for value in bad:
        with pytest.raises(argparse.ArgumentTypeError, match="must be"):
            kind(value)


RESUME_WITHOUT_CHECKPOINT = """
import contextlib, io, json, os, runpy, sys
examples, logdir = {examples!r}, {logdir!r}
out = {{}}
for name, script, extra in {cases!r}:
    before, folder = set(sys.modules), os.path.dirname(script)
    sys.argv, err, code = [script, "--resume", "--logdir", logdir, *extra], io.StringIO(), None
    sys.path.insert(0, folder)
    with contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            code = exc.code
    sys.path.remove(folder)
    for module in set(sys.modules) - before:  # each example's own modules (model.py, ...)
        if (getattr(sys.modules[module], "__file__", None) or "").startswith(examples):
            del sys.modules[module]
    out[name] = [code, err.getvalue()[-600:], sorted(os.listdir(logdir))]
print("RESUMED" + json.dumps(out))
"""


def test_resume_without_a_checkpoint_is_a_usage_error_before_anything_starts(
    run_python: RunPython, tmp_path: Path
) -> None:
    """A mistyped ``--logdir`` with ``--resume`` must not train afresh (the run the user meant
    to continue stays unread, and the new one writes its files there) nor fail deep in a run
    whose actors have started: every example stops at its command line, naming the file."""
    logdir = tmp_path / "empty"
    logdir.mkdir()
    offline = {"CQL", "IQL", "DT"}  # --dataset is required; it is not read before the check
    cases = [
        (name, str(script), ["--dataset", str(tmp_path / "none")] if name in offline else [])
        for name, script in sorted(SCRIPTS.items())
        if "resume" in EXPECTED[name]
    ]
    code = RESUME_WITHOUT_CHECKPOINT.format(examples=str(EXAMPLES), logdir=str(logdir), cases=cases)
    proc = run_python(code, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESUMED"))
    results = json.loads(line[7:])
    assert len(results) == len(cases) >= 19
    for name, (status, stderr, files) in results.items():
        wanted = "checkpoint_agent0.pt" if name in ("MADDPG", "MAPPO") else "checkpoint.pt"
        assert status == 2, f"{name} exited {status}:\n{stderr}"
        assert f"--resume: no checkpoint {logdir / wanted}; run without --resume" in stderr, (
            f"{name}:\n{stderr}"
        )
        assert files == [], f"{name} wrote {files} before refusing"


def test_a_resuming_train_call_without_its_checkpoint_raises_the_command_lines_message(
    run_python: RunPython, tmp_path: Path
) -> None:
    """``train(config)`` called from Python has no parser to exit through: it raises
    ``FileNotFoundError`` with the words the command line prints, before any env is made."""
    missing = tmp_path / "run" / "checkpoint.pt"
    with pytest.raises(FileNotFoundError, match="--resume: no checkpoint .*run without --resume"):
        require_checkpoint(str(missing))
    missing.mkdir(parents=True)  # a folder of that name is no checkpoint either
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        require_checkpoint(str(missing))
    written = tmp_path / "checkpoint.pt"
    written.write_bytes(b"")
    require_checkpoint(str(written))
    code = f"""
import sys
sys.path.insert(0, {str(EXAMPLES / "PPO")!r})
import gymnasium, train
config = train.parse_config(["--env", "CartPole-v1", "--logdir", {str(tmp_path / "none")!r}])
gymnasium.make = None  # train's check comes before any env (parsing made one, to check it)
config["resume"] = True
try:
    train.train(config)
except FileNotFoundError as error:
    print("RAISED", error)
"""
    proc = run_python(code, timeout=120)
    assert f"RAISED --resume: no checkpoint {tmp_path / 'none' / 'checkpoint.pt'}; run without" in (
        proc.stdout
    ), proc.stderr[-2000:]
