"""The offline examples run on small datasets made here (a D4RL HDF5 file and a Minari
dataset of random Pendulum steps) with tiny networks, a resumed run equals a run straight
through, and a resume with other flags or data, or a dataset of another env, is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from parl.utils.offline_data import save_d4rl_hdf5

from .conftest import RunPython
from .example_mains import Run, imported_example, run_mains, run_ok
from .test_offline_data import _needed

pytestmark = pytest.mark.slow  # the example scripts, run for real

SMALL = ["--env", "Pendulum-v1", "--eval_episodes", "1", "--hidden", "8", "--batch_size", "16"]


def random_steps(episodes: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    """Pendulum episodes of random actions in [-1, 1] (the examples scale them to the env's
    range), each cut by the 200-step time limit."""
    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(seed)
    log: dict[str, list] = {k: [] for k in ("observations", "actions", "rewards", "timeouts")}
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            action = rng.uniform(-1.0, 1.0, size=1).astype(np.float32)
            next_obs, reward, terminated, truncated, _ = env.step(2.0 * action)
            log["observations"].append(obs)
            log["actions"].append(action)
            log["rewards"].append(reward)
            log["timeouts"].append(truncated)
            obs, done = next_obs, terminated or truncated
    steps = {key: np.asarray(value) for key, value in log.items()}
    steps["terminals"] = np.zeros(len(steps["rewards"]), dtype=bool)
    return steps


def write_minari_dataset() -> None:
    """``pendulum/random-v0``: two episodes of random Pendulum steps, written where
    ``MINARI_DATASETS_PATH`` says."""
    minari = _needed("minari")
    from minari.data_collector import EpisodeBuffer

    steps = random_steps()
    buffers = []
    for index, start in enumerate((0, 200)):
        part = slice(start, start + 200)
        final_obs = steps["observations"][start + 199] + 0.0  # a stand-in last observation
        buffers.append(
            EpisodeBuffer(
                id=index,
                observations=np.concatenate([steps["observations"][part], final_obs[None]]),
                actions=steps["actions"][part],
                rewards=steps["rewards"][part],
                terminations=steps["terminals"][part],
                truncations=steps["timeouts"][part],
                infos={},
            )
        )
    env = gym.make("Pendulum-v1")
    minari.create_dataset_from_buffers(
        "pendulum/random-v0",
        buffers,
        observation_space=env.observation_space,
        action_space=gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
        algorithm_name="random",
    )


def value_error(run: Run) -> str:
    """The last line of a run that must have failed with a ``ValueError``."""
    assert run.code == 1, run.log[-3000:]
    return run.log.strip().splitlines()[-1]


def in_one(name: str, *args: str) -> tuple[str, list[str]]:
    """A call of ``run_mains``: the example with the small settings and ``args``."""
    return (name, ["--no_progress", *SMALL, *args])


def assert_same_weights(first: Path, second: Path) -> None:
    a, b = torch.load(first, weights_only=True), torch.load(second, weights_only=True)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.filterwarnings("ignore::UserWarning")  # Minari's, writing a dataset
def test_offline_examples_resume_as_straight_runs_and_refuse_other_flags_or_data(
    run_python: RunPython, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CQL and DT on a D4RL file: a run stopped at 20 steps and resumed to 30 in another
    interpreter than the one that stopped ends with the straight run's weights (the straight
    runs, the first parts and IQL's run in one interpreter, the resumes and the refused runs in
    a second). The trained policy itself is evaluated at the end. CQL: ``--actor_lr`` reaches
    the actor's optimizer. A resume with other flags or other data is refused before anything
    is restored (a CQL checkpoint from before the learning-rate flags ran at PARL's rates, and
    is read as such); the same data elsewhere is the same dataset. IQL trains and evaluates on
    a Minari dataset. A dataset of another env is refused, naming the env (CQL, IQL)."""
    _needed("h5py")
    dataset = tmp_path / "pendulum-random-v0.hdf5"
    save_d4rl_hdf5(dataset, **random_steps())
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    write_minari_dataset()
    iql = ["--dataset", "pendulum/random-v0", "--train_total_steps", "20", "--test_every_steps",
           "10", "--logdir", str(tmp_path / "iql")]  # fmt: skip
    cql = ["--dataset", str(dataset), "--test_every_steps", "10", "--policy_eval_start", "15",
           "--num_random", "3", "--actor_lr", "3e-5"]  # fmt: skip
    dt = ["--dataset", str(dataset), "--test_every_steps", "10", "--target_return", "-200",
          "--context", "4", "--embed_dim", "16", "--n_layer", "1", "--batch_size", "8",
          "--max_ep_len", "200", "--eval_episodes", "1", "--no_progress",
          "--env", "Pendulum-v1"]  # fmt: skip
    d = {name: tmp_path / name for name in ("cql", "cql-part", "dt", "dt-part")}
    logs = run_ok(
        run_python,
        [
            in_one("CQL", *cql, "--train_total_steps", "30", "--logdir", str(d["cql"])),
            in_one("CQL", *cql, "--train_total_steps", "20", "--logdir", str(d["cql-part"])),
            ("DT", [*dt, "--train_total_steps", "30", "--logdir", str(d["dt"])]),
            ("DT", [*dt, "--train_total_steps", "20", "--logdir", str(d["dt-part"])]),
            in_one("IQL", *iql),
        ],
    )
    assert "Evaluation: total_steps 10" in logs[4]
    assert "Evaluation: total_steps 20" in logs[4]  # the trained policy itself, at the end
    assert (tmp_path / "iql" / "model.ckpt").is_file()
    for log in (logs[0], logs[2]):
        assert "Evaluation: total_steps 20" in log
        assert "Evaluation: total_steps 30" in log  # the trained policy itself, at the end
    assert "config cpu (3 sampled actions per proposal)" in logs[0]
    optimizers = torch.load(d["cql"] / "checkpoint.pt", weights_only=False)["optimizers"]
    rates = {
        net: optimizers[f"{net}_optimizer"]["param_groups"][0]["lr"] for net in ("actor", "critic")
    }
    assert rates == {"actor": 3e-5, "critic": 3e-4}  # --actor_lr reaches the actor's optimizer
    # a checkpoint from before the learning-rate flags ran at PARL's rates: read as such
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    state = torch.load(d["cql"] / "checkpoint.pt", weights_only=False)
    del state["extra"]["actor_lr"], state["extra"]["critic_lr"]
    torch.save(state, legacy / "checkpoint.pt")
    other = tmp_path / "other.hdf5"
    save_d4rl_hdf5(other, **random_steps(seed=1))
    copy = tmp_path / "copy.hdf5"
    copy.write_bytes(dataset.read_bytes())  # the same data elsewhere is the same dataset

    # the straight run goes on to 40 steps in the second interpreter, on the same data elsewhere
    # (the resumed run's files are compared with the straight run's after that interpreter)
    extended = tmp_path / "cql-extended"
    shutil.copytree(d["cql"], extended)
    more = [*cql, "--train_total_steps", "40", "--logdir", str(extended), "--resume"]
    dt_more = [*dt, "--train_total_steps", "40", "--logdir", str(d["dt-part"]), "--resume"]
    runs = run_mains(
        run_python,
        [
            in_one(
                "CQL", *cql, "--train_total_steps", "30", "--logdir", str(d["cql-part"]), "--resume"
            ),  # fmt: skip
            ("DT", [*dt, "--train_total_steps", "30", "--logdir", str(d["dt-part"]), "--resume"]),
            in_one("CQL", *more, "--dataset", str(copy)),
            in_one("CQL", *more, "--with_lagrange"),
            in_one("CQL", *more, "--actor_lr", "1e-4"),
            in_one("CQL", *cql, "--train_total_steps", "40", "--logdir", str(legacy), "--resume"),
            in_one("CQL", *more, "--dataset", str(other)),
            in_one(
                "CQL",
                "--dataset",
                str(dataset),
                "--env",
                "MountainCarContinuous-v0",
                "--logdir",
                str(tmp_path / "log"),
            ),  # fmt: skip
            ("DT", [*dt_more, "--context", "5"]),
            ("DT", [*dt_more, "--dataset", str(other)]),
            in_one(
                "IQL",
                "--dataset",
                str(dataset),
                "--env",
                "MountainCarContinuous-v0",
                "--logdir",
                str(tmp_path / "iql-other"),
            ),  # fmt: skip
        ],
    )
    for run, name in zip(runs[:2], ("cql", "dt"), strict=True):
        assert run.code == 0 and "Traceback" not in run.log, run.log[-3000:]
        assert "resumed from" in run.log, run.log[-2000:]
        assert_same_weights(d[name] / "model.ckpt", d[f"{name}-part"] / "model.ckpt")
    assert "Evaluation: total_steps 20" in runs[1].log

    copied, lagrange, actor_lr, old_rates, other_data, other_env, context, dt_other, iql_env = runs[
        2:
    ]
    assert copied.code == 0, copied.log[-3000:]
    assert "Evaluation: total_steps 40" in copied.log
    assert value_error(lagrange) == (
        f"ValueError: the checkpoint in {extended} was written without --with_lagrange; "
        "this run is with --with_lagrange: resume with the flags of the run that wrote it"
    )
    assert "written with --actor_lr 3e-05; this run is with --actor_lr 0.0001" in value_error(
        actor_lr
    )
    assert "written with --actor_lr 0.0001; this run is with --actor_lr 3e-05" in value_error(
        old_rates
    )
    error = value_error(other_data)  # the resume on the copy recorded the copy's path
    assert f"trained on --dataset {copy}, and --dataset {other} holds other data" in error
    assert value_error(other_env) == other_env_error(dataset)
    assert value_error(context) == (
        f"ValueError: the checkpoint in {d['dt-part']} was written with --context 4; this run "
        "is with --context 5: resume with the flags of the run that wrote it"
    )
    assert f"--dataset {other} holds other data" in value_error(dt_other)
    assert value_error(iql_env) == other_env_error(dataset)


def other_env_error(dataset: Path) -> str:
    return (
        f"ValueError: --dataset {dataset} has observations of 3 values and actions of 1, but "
        "MountainCarContinuous-v0 has 2 and 1: pass the --env the dataset was collected on"
    )


def test_iql_example_scales_rewards_by_the_spread_of_episode_returns() -> None:
    obs = np.arange(6, dtype=np.float32)[:, None]
    dataset = {
        "observations": obs,
        "next_observations": obs + 1,
        "rewards": np.array([1, 1, 1, 2, 2, 5], dtype=np.float32),
        "terminals": np.array([0, 0, 1, 0, 0, 0], dtype=bool),
    }
    dataset["next_observations"][3] = 99.0  # the episode 3..3 is cut: step 4 starts elsewhere
    with imported_example("examples/IQL") as train:
        np.testing.assert_allclose(train.episode_returns(dataset), [3.0, 2.0, 7.0])
        train.scale_rewards(dataset)
    np.testing.assert_allclose(dataset["rewards"], np.array([1, 1, 1, 2, 2, 5]) * 200.0)


OUT_OF_RANGE_FLAGS = {
    "CQL": [("--hidden", "0"), ("--batch_size", "-4"), ("--num_random", "0"),
            ("--policy_eval_start", "-1"), ("--min_q_weight", "nan"),
            ("--lagrange_thresh", "inf"), ("--actor_lr", "0"), ("--critic_lr", "nan")],
    "IQL": [("--hidden", "0"), ("--batch_size", "0"), ("--beta", "-1")],
    "DT": [("--context", "0"), ("--embed_dim", "0"), ("--rew_scale", "0"),
           ("--max_ep_len", "0"), ("--pct_traj", "2"), ("--dropout", "1"),
           ("--learning_rate", "-1e-4"), ("--target_return", "nan")],
    "OAC": [("--hidden", "0"), ("--batch_size", "0"), ("--warmup_steps", "-1"),
            ("--beta", "-1"), ("--alpha", "nan")],
}  # fmt: skip


def test_an_offline_examples_number_out_of_range_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--hidden 0`` would train a model of no hidden units without a word, and the other values
    fail only after the dataset is read, naming the library's argument instead of the flag: each
    is refused on the command line, naming the flag."""
    for name, cases in OUT_OF_RANGE_FLAGS.items():
        with imported_example(f"examples/{name}") as train:
            parser = train.make_parser()
            for flag, value in cases:
                with pytest.raises(SystemExit) as exit_:
                    parser.parse_args(["--dataset", "d", f"{flag}={value}"])
                message = capsys.readouterr().err.strip().splitlines()[-1]
                assert exit_.value.code == 2, f"{name} took {flag} {value}"
                assert f"argument {flag}: must be" in message and value in message, (name, message)
