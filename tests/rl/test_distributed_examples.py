"""The distributed examples (IMPALA, A2C with remote actors, ES, GA3C), each run end to end in
a fresh interpreter with 2 local actors (the first part of a stopped-and-resumed run, which
goes on from its checkpoint in another fresh interpreter); IMPALA learns CartPole within a
bounded budget (a threshold guard); a SIGKILLed actor stops training with ActorDiedError, never
a hang; zero actors, an empty ES batch, a count below one or an env of no supported kind is a
clear error; ES's checkpoint keeps the observation statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from .conftest import REPO_ROOT, RunPython
from .example_mains import imported_example, run_mains, run_ok_results
from .example_scripts import run_scripts

pytestmark = pytest.mark.slow  # the distributed examples, on worker processes

IMPALA_DIR = REPO_ROOT / "examples" / "IMPALA"
A2C_DIR = REPO_ROOT / "examples" / "A2C"
ES_DIR = REPO_ROOT / "examples" / "ES"
GA3C_DIR = REPO_ROOT / "examples" / "GA3C"


def _run_main(
    run_python: RunPython, folder: Path, args: list[str], timeout: float = 180, after: str = ""
) -> dict:
    """``train.main(args)`` of the example in ``folder``, in a fresh interpreter, then the code
    ``after`` (if any) in the same one; returns the result as a dict, with the ``log``."""
    code = f"""
import dataclasses, json, sys, torch
sys.path.insert(0, {str(folder)!r})
torch.set_num_threads(1)
import train
result = train.main({args!r})
print("THREADS", torch.get_num_threads())
print("RESULT" + json.dumps(dataclasses.asdict(result)))
"""
    code += after
    proc = run_python(code, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT") :]) | {"log": proc.stdout + proc.stderr}


def _assert_time_breakdown(result: dict, learner_keys: set[str], logdir: Path) -> None:
    assert learner_keys <= set(result["learner_times"]), result["learner_times"]
    assert result["actor_times"]["sampling"] > 0, result["actor_times"]
    assert "learner time (of" in result["log"] and "actor time" in result["log"]
    assert list(logdir.glob("events.out.tfevents.*")), "no TensorBoard events written"


@pytest.mark.threshold
def test_threshold_impala_learns_cartpole_with_two_local_actors(
    run_python: RunPython, tmp_path: Path
) -> None:
    logdir = tmp_path / "impala"
    args = ["--actor_num", "2", "--max_sample_steps", "60000", "--test_every_steps", "10000",
            "--target_return", "475", "--logdir", str(logdir)]  # fmt: skip
    result = _run_main(run_python, IMPALA_DIR, args)
    best = max(mean for _, mean in result["history"])
    assert best >= 150, result["history"]  # a random policy scores about 22
    assert result["train_steps"] >= 1 and result["sample_steps"] >= 10000
    _assert_time_breakdown(result, {"waiting", "learning", "batching", "publishing"}, logdir)
    assert (logdir / "model.ckpt").exists()


KILL_SCRIPT = """
import gc, os, signal, sys, time
import torch
torch.set_num_threads(1)
import parl
for name, folder, config, extra in {cases!r}:
    for module in [m for m, v in sys.modules.items()
                   if (getattr(v, "__file__", None) or "").startswith({examples!r})]:
        del sys.modules[module]  # each example's own train, agent and model modules
    sys.path.insert(0, folder)
    import train
    config = {{**getattr(train, config), "seed": 0, "actor_num": 2,
               "logdir": os.path.join({logdir!r}, name), **extra}}
    learner = train.Learner(config)
    for _ in range(2):
        learner.step()
    pid = learner.actors[0].getpid()
    pid = pid.get() if hasattr(pid, "get") else pid
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    try:
        for _ in range(100000):
            learner.step()
        print(name, "NO ERROR", flush=True)
    except parl.ActorDiedError as exc:
        print(name, f"DIED after {{time.monotonic() - start:.2f}} s: {{exc}}", flush=True)
    del learner
    gc.collect()
    parl.disconnect()  # the survivors end, as they do when a script stops on the error
    sys.path.remove(folder)
"""

KILL_CASES = [
    ("IMPALA", str(IMPALA_DIR), "cartpole_config", {}),
    ("A2C", str(A2C_DIR), "cartpole_config", {}),
    ("ES", str(ES_DIR), "cartpole_config", {"noise_size": 1_000_000}),
    ("GA3C", str(GA3C_DIR), "cartpole_config", {}),
]


def test_killing_an_actor_stops_training_with_a_clear_error(
    run_python: RunPython, tmp_path: Path
) -> None:
    """IMPALA, A2C, ES and GA3C, one after the other in one interpreter: an actor killed with
    SIGKILL mid-run ends training with ``ActorDiedError`` naming it, within seconds (a hang
    fails on the interpreter's timeout)."""
    script = KILL_SCRIPT.format(
        cases=KILL_CASES, examples=str(REPO_ROOT / "examples"), logdir=str(tmp_path / "log")
    )
    proc = run_python(script, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    for name, *_ in KILL_CASES:
        said = lines.get(name, "")
        assert said.startswith("DIED after"), (name, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "actor 0 of 2 died" in said, (name, said)
        seconds = float(said.split("DIED after ")[1].split(" s")[0])
        assert seconds < 30, (name, said)


def test_a2c_vector_env_mode_samples_on_the_learner(run_python: RunPython, tmp_path: Path) -> None:
    """``--mode vector_env --actor_num 0``: no actors, the learner samples (remote actors run
    in ``test_distributed_examples_resume_from_their_checkpoints``)."""
    local = _run_main(
        run_python,
        A2C_DIR,
        ["--max_sample_steps", "1000", "--test_every_steps", "1000", "--no_progress", "--mode",
         "vector_env", "--actor_num", "0", "--logdir", str(tmp_path / "b")],
    )  # fmt: skip
    assert local["sample_steps"] >= 1000 and "sampling" in local["learner_times"]
    assert local["actor_times"] == {}


def test_es_runs_an_update_on_halfcheetah(run_python: RunPython, tmp_path: Path) -> None:
    """One update of 4 episodes of 1,000 steps (CartPole runs in
    ``test_distributed_examples_resume_from_their_checkpoints``)."""
    small = ["--noise_size", "1000000", "--test_every_train_steps", "1", "--eval_episodes", "1"]
    cheetah = _run_main(
        run_python,
        ES_DIR,
        ["--train_steps", "1", "--min_episodes_per_batch", "4", "--min_steps_per_batch", "2000",
         *small, "--logdir", str(tmp_path / "h")],
    )  # fmt: skip
    assert cheetah["train_steps"] == 1 and cheetah["sample_steps"] >= 4000  # 1,000-step episodes


def test_impala_and_a2c_run_a_gaussian_policy_on_halfcheetah(
    run_python: RunPython, tmp_path: Path
) -> None:
    """MuJoCo: a Gaussian policy, float actions in the trajectory slots (IMPALA with shared
    memory and by value, A2C), and the model's observation statistics updated by the learner
    and saved with the checkpoint. The three runs share one interpreter."""
    calls = [
        ("IMPALA", ["--env", "HalfCheetah-v5", "--max_sample_steps", "1000", "--test_every_steps",
                    "600", "--eval_episodes", "1", "--transport", transport, "--logdir",
                    str(tmp_path / transport)])
        for transport in ("shm", "values")
    ]  # fmt: skip
    calls.append(("A2C", ["--env", "HalfCheetah-v5", "--max_sample_steps", "1500",
                          "--test_every_steps", "1000", "--no_progress", "--logdir",
                          str(tmp_path / "a2c")]))  # fmt: skip
    *impalas, a2c = run_ok_results(run_python, calls)
    with imported_example("examples/IMPALA", "model") as model_module:
        for transport, result in zip(("shm", "values"), impalas, strict=True):
            logdir = tmp_path / transport
            assert result["train_steps"] >= 10 and len(result["history"]) == 1, transport
            _assert_time_breakdown(
                result, {"waiting", "learning", "batching", "publishing"}, logdir
            )
            model = model_module.MujocoModel(17, 6)
            model.load_state_dict(torch.load(logdir / "model.ckpt", weights_only=True))
            # updated from every training batch
            assert float(model.obs_norm.count) >= 10 * 64, transport
            assert float(model.obs_norm.var.mean()) != 1.0, transport
    assert a2c["train_steps"] >= 20 and len(a2c["history"]) == 1
    _assert_time_breakdown(a2c, {"waiting", "learning", "publishing"}, tmp_path / "a2c")


# -- bad flags and envs get clear errors; checkpoints replay -----------------------------------


GA3C_COUNTS = [(["--env_num", "0"], "--env_num 1 or more, got 0"),
               (["--t_max", "0"], "--t_max 1 or more, got 0"),
               (["--t_max", "-3"], "--t_max 1 or more, got -3"),
               (["--train_batch_size", "0"], "--train_batch_size 1 or more, got 0")]  # fmt: skip


def test_zero_actors_counts_below_one_and_envs_of_no_supported_kind_are_refused_by_name(
    run_python: RunPython, tmp_path: Path
) -> None:
    """Each script run as its command line runs it, all in one interpreter. Zero actors: ES used
    to loop forever waiting for episodes, IMPALA failed inside parl.wait. Both ES minimums at 0
    made an update with no episodes (numpy's "need at least one array"). GA3C's counts each
    failed later, obscurely: gymnasium's IndexError on an empty vector env, numpy's "negative
    dimensions" or an IndexError in a segment, "need at least one array" in a batch.
    Pendulum-v1 went to the Atari wrappers: AttributeError 'get_action_meanings'."""
    log = ["--logdir", str(tmp_path)]
    script = {name: REPO_ROOT / "examples" / name / "train.py" for name in
              ("IMPALA", "ES", "A2C", "GA3C")}  # fmt: skip
    cases = [
        ("zero IMPALA", script["IMPALA"], ["--env", "CartPole-v1", "--actor_num", "0", *log,
                                           "--max_sample_steps", "1000"]),
        ("zero ES", script["ES"], ["--env", "CartPole-v1", "--actor_num", "0", *log,
                                   "--noise_size", "100000"]),
        ("no batch ES", script["ES"], ["--env", "CartPole-v1", "--min_episodes_per_batch", "0",
                                       "--min_steps_per_batch", "0", "--noise_size", "100000",
                                       *log]),
        *[(f"kind {name}", script[name], ["--env", "Pendulum-v1", "--max_sample_steps", "100",
                                          *log]) for name in ("IMPALA", "A2C", "GA3C")],
        *[(f"count {flags}", script["GA3C"], [*flags, "--train_total_steps", "100",
                                              "--no_progress", *log])
          for flags, _ in GA3C_COUNTS],
    ]  # fmt: skip
    results = run_scripts(run_python, cases)
    for example in ("IMPALA", "ES"):
        error = results[f"zero {example}"]["error"]
        assert error == f"ValueError: {example} needs --actor_num 1 or more, got 0", error
    error = results["no batch ES"]["error"] or ""
    assert error.startswith("ValueError: ES needs --min_episodes_per_batch or --min_steps_per"), (
        error
    )
    for example, runs in (("IMPALA", "CartPole, MuJoCo"), ("A2C", "CartPole, MuJoCo"),
                          ("GA3C", "CartPole and Atari")):  # fmt: skip
        error = results[f"kind {example}"]["error"] or ""
        assert error.startswith(f"ValueError: {example}'s example runs {runs}"), error
        assert "Pendulum-v1 (gymnasium.envs.classic_control" in error, error
    for flags, message in GA3C_COUNTS:
        error = results[f"count {flags}"]["error"]
        assert error == f"ValueError: GA3C needs {message}", error


def test_es_checkpoint_keeps_the_observation_statistics(
    run_python: RunPython, tmp_path: Path
) -> None:
    """The ES policy acts on filtered observations: model.ckpt alone could not be replayed."""
    code = f"""
import sys
import numpy as np
sys.path.insert(0, {str(REPO_ROOT / "examples" / "ES")!r})
from agent import ESAgent, make_env
from es_config import mujoco_config
from parl.algorithms.es import compute_centered_ranks
from parl.algorithms.es_noise import SharedNoiseTable

config = {{**mujoco_config, "env_name": "Pendulum-v1"}}
noise = SharedNoiseTable(10_000, 0, shared=False)
env = make_env(config)
trained = ESAgent(config, env, noise)
trained.obs_filter(np.random.default_rng(0).normal(5.0, 3.0, (500, 3)))
path = trained.save({str(tmp_path / "model.ckpt")!r})
restored = ESAgent(config, env, noise)
restored.restore(path)
obs = np.array([4.0, 6.0, 1.0])
print("SAME", np.allclose(trained.obs_filter(obs, update=False),
                          restored.obs_filter(obs, update=False)), restored.obs_filter.state.n)
"""
    proc = run_python(code, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SAME True 500" in proc.stdout, proc.stdout


RESUME_RUNS = {
    "A2C": (A2C_DIR, ["--actor_num", "2", "--test_every_steps", "500"], 1000),
    "IMPALA": (IMPALA_DIR, ["--actor_num", "2", "--test_every_steps", "1000"], 1000),
    "GA3C": (GA3C_DIR, ["--actor_num", "2", "--test_every_steps", "500"], 1000),
    "ES": (ES_DIR, ["--env", "CartPole-v1", "--actor_num", "2", "--noise_size", "1000000",
                    "--train_steps", "4", "--test_every_train_steps", "1"], 2),
}  # fmt: skip


def _assert_first_part_ran_end_to_end(name: str, result: dict, logdir: Path) -> None:
    """What the first part of each resume test shows of a run with 2 local actors."""
    if name == "A2C":  # remote actors
        assert result["sample_steps"] >= 1000 and len(result["history"]) == 2
        _assert_time_breakdown(result, {"waiting", "learning", "publishing"}, logdir)
    elif name == "ES":
        assert result["train_steps"] == 2 and len(result["history"]) == 2
        assert result["sample_steps"] >= 2 * 2000  # min_steps_per_batch of the CartPole config
        _assert_time_breakdown(result, {"waiting", "learning", "obs_filter"}, logdir)
    elif name == "GA3C":
        _assert_ga3c_run(result, logdir)
    else:
        _assert_time_breakdown(result, {"waiting", "learning", "batching", "publishing"}, logdir)
    assert (logdir / "model.ckpt").exists()


def _assert_ga3c_run(result: dict, logdir: Path) -> None:
    """GA3C with 2 local simulators reports where the time went and how its predictor batched."""
    assert result["sample_steps"] >= 1000 and len(result["history"]) == 2
    # whole batches of 128 steps, of the segments completed (the last ones are still open)
    assert (
        result["sample_steps"] // 128 - 1 <= result["train_steps"] <= result["sample_steps"] // 128
    )
    # "waiting" shows only when every simulator was still stepping: not on every machine
    learner_keys = {"gathering", "predicting", "answering", "batching", "training"}
    assert learner_keys <= set(result["learner_times"]), result["learner_times"]
    assert result["actor_times"]["simulating"] > 0, result["actor_times"]
    assert result["actor_times"]["waiting for a prediction"] > 0, result["actor_times"]
    assert "learner time (of" in result["log"] and "simulator time, 2 simulators" in result["log"]
    predictor = result["predictor"]
    # every step of every env was predicted for once (the first observations too)
    predicted = round(predictor["batches"] * predictor["mean_batch_size"])
    assert predicted >= result["sample_steps"] + 8
    assert 4 <= predictor["mean_batch_size"] <= 16, predictor  # one or two requests of 4
    assert "mean batch" in result["log"]
    assert list(logdir.glob("events.out.tfevents.*")), "no TensorBoard events written"
    assert (logdir / "model.ckpt").exists() and (logdir / "checkpoint.pt").exists()


def test_distributed_examples_resume_from_their_checkpoints(
    run_python: RunPython, tmp_path: Path
) -> None:
    """For each distributed example: a first run with 2 local actors runs end to end and stops
    early; ``--resume`` (with the shared ``--device`` and ``--torch_threads`` flags), in an
    interpreter that did not run the first part, picks up its counters from the checkpoint in
    ``--logdir`` and trains on to the full budget. The first parts share one interpreter, the
    resumes another, each example's own modules imported afresh."""
    names = sorted(RESUME_RUNS)
    first_calls, second_calls = [], []
    for name in names:
        folder, args, first_budget = RESUME_RUNS[name]
        common = [*args, "--eval_episodes", "1", "--no_progress", "--logdir",
                  str(tmp_path / name)]  # fmt: skip
        # the last of a repeated flag wins: ES stops after 2 of 4 updates, the others at 1000 steps
        budget = "--train_steps" if name == "ES" else "--train_total_steps"
        full = "4" if name == "ES" else "2000"
        first_calls.append((folder.name, [*common, budget, str(first_budget)]))
        second_calls.append((folder.name, [*common, budget, full, "--resume", "--device", "cpu",
                                           "--torch_threads", "2"]))  # fmt: skip
    firsts = run_mains(run_python, first_calls)
    for name, run in zip(names, firsts, strict=True):
        assert run.code == 0 and run.result is not None, f"{name}: {run.log[-3000:]}"
        assert (tmp_path / name / "checkpoint.pt").exists(), name
        _assert_first_part_ran_end_to_end(name, run.result | {"log": run.log}, tmp_path / name)
        assert run.threads == 1, (name, run.threads)
    seconds = run_mains(run_python, second_calls)
    for name, run, before in zip(names, seconds, firsts, strict=True):
        assert run.code == 0 and run.result is not None, f"{name}: {run.log[-3000:]}"
        first, second = before.result, run.result
        assert first is not None
        assert "resumed from" in run.log, f"{name}: {run.log[-2000:]}"
        assert run.threads == 2, (name, run.threads)  # --torch_threads
        assert second["sample_steps"] > first["sample_steps"], name
        assert second["train_steps"] > first["train_steps"], name
        assert min(steps for steps, _ in second["history"]) > first["sample_steps"], name
        for blemish in ("Traceback", "Exception ignored"):
            assert blemish not in before.log + run.log, f"{name}: {run.log[-2000:]}"
        if name == "GA3C":  # its speed counts only the steps the resumed run made itself
            ran = second["sample_steps"] - first["sample_steps"]
            assert f"{second['sample_steps']} steps ({ran} in this run)" in run.log
