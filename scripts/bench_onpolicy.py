"""On-policy benchmark: our PPO and vector envs against Stable-Baselines3, gymnasium and EnvPool,
all measured in the same run, with ratios.

    pip install stable-baselines3==2.9.2       # by hand, only for this script
    pip install envpool==1.2.5                 # optional: the native vector-env ceiling
    python scripts/bench_onpolicy.py                       # everything, about 5 minutes
    python scripts/bench_onpolicy.py --only vector         # vector envs only
    python scripts/bench_onpolicy.py --only roundtrip      # the 2-env step round trip only
    python scripts/bench_onpolicy.py --only cartpole --seeds 0 1 2 3 4
    python scripts/bench_onpolicy.py --only halfcheetah --cheetah_rounds 3

``cartpole``: PPO with rl-zoo's CartPole-v1 hyperparameters (8 envs, n_steps 32, batch 256,
20 epochs, lr and clip decaying linearly from 1e-3 and 0.2, gamma 0.98, lambda 0.8); both
evaluate 10 deterministic episodes every 1024 steps (at the same points: after the same number
of updates) and the clock, which excludes evaluations, stops at the first mean >= 475. Both the
wall time and the CPU time (this process and its children, evaluations excluded) are given, and
their ratios: on a shared machine the CPU time says more about the cost than the wall time.
``halfcheetah``: PPO training throughput with rl-zoo's HalfCheetah configuration (1 env,
normalised, n_steps 512, batch 64, 20 epochs, 256x256 ReLU), ``torch.set_num_threads(1)``;
steps per second of wall time and of CPU time, ours and SB3 in turn ``--cheetah_rounds`` times.
``vector``: random-action steps per second of ``RemoteVectorEnv.make`` (fast path) and of
``RemoteVectorEnv(env_fns)`` (generic path), 2 actors x 64 CartPole / x 16 HalfCheetah envs,
against gymnasium's Sync/Async (8 envs) and EnvPool (8 envs, and as many envs as
ours; 2 threads), and the round trip of a 2-env CartPole step; each of our rows also gives the
Python-level calls the caller makes per step (machine-independent).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from benchrecord import Report, Table, add_record_flag

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "PPO"))

EVAL_EVERY = 1024
TARGET = 475.0


# -- CartPole: time to 475 ------------------------------------------------------------------------
Hit = tuple[int | None, float | None, float | None]  # steps, wall seconds, CPU seconds to 475


def ours_cartpole(seed: int) -> Hit:
    import train as ppo_train
    from config import cartpole_config

    config = {
        **cartpole_config,
        "seed": seed,
        "test_every_steps": EVAL_EVERY,
        "target_return": TARGET,
        "stop_at_target": True,
        "progress": False,
        "tensorboard": False,
        "logdir": f"/tmp/bench_onpolicy_ppo_{seed}",
    }
    result = ppo_train.train(config)
    return result.steps_to_target, result.seconds_to_target, result.cpu_seconds_to_target


def sb3_cartpole(seed: int) -> Hit:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    eval_env = gym.make("CartPole-v1")

    class TimeToTarget(BaseCallback):
        """Evaluates before a rollout (after k updates, as ours does) off the clock."""

        def __init__(self) -> None:
            super().__init__()
            self.eval_seconds, self.next_eval, self.hit = 0.0, EVAL_EVERY, None
            self.eval_cpu = 0.0
            self.start, self.cpu_start = time.perf_counter(), _cpu_seconds()

        def _on_rollout_start(self) -> None:
            if self.num_timesteps < self.next_eval or self.hit is not None:
                return
            self.next_eval += EVAL_EVERY
            tic, cpu_tic = time.perf_counter(), _cpu_seconds()
            mean = _evaluate(lambda o: self.model.predict(o, deterministic=True)[0], eval_env, seed)
            self.eval_seconds += time.perf_counter() - tic
            self.eval_cpu += _cpu_seconds() - cpu_tic
            if mean >= TARGET:
                elapsed = time.perf_counter() - self.start - self.eval_seconds
                cpu = _cpu_seconds() - self.cpu_start - self.eval_cpu
                self.hit = (self.num_timesteps, elapsed, cpu)

        def _on_step(self) -> bool:
            return self.hit is None

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=lambda p: 1e-3 * p,
        clip_range=lambda p: 0.2 * p,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    callback = TimeToTarget()
    model.learn(100_000, callback=callback)
    return callback.hit if callback.hit is not None else (None, None, None)


def _evaluate(policy: Any, env: gym.Env, seed: int, episodes: int = 10) -> float:
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + 10_000 + i)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(np.asarray(policy(obs))))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


# -- HalfCheetah: training throughput ---------------------------------------------------------------
ZOO_CHEETAH = {
    "n_steps": 512,
    "batch_size": 64,
    "gamma": 0.98,
    "learning_rate": 2.0633e-05,
    "ent_coef": 0.000401762,
    "clip_range": 0.1,
    "n_epochs": 20,
    "gae_lambda": 0.92,
    "max_grad_norm": 0.8,
    "vf_coef": 0.58096,
}


def ours_cheetah(steps: int) -> tuple[float, float]:
    """Training steps per second of wall time and per second of CPU time."""
    import train as ppo_train
    from config import mujoco_config

    z = ZOO_CHEETAH
    config = {
        **mujoco_config,
        "seed": 0,
        "env_num": 1,
        "step_nums": z["n_steps"],
        "num_minibatches": z["n_steps"] // z["batch_size"],
        "update_epochs": z["n_epochs"],
        "initial_lr": z["learning_rate"],
        "lr_decay": False,
        "clip_param": z["clip_range"],
        "entropy_coef": z["ent_coef"],
        "gamma": z["gamma"],
        "gae_lambda": z["gae_lambda"],
        "max_grad_norm": z["max_grad_norm"],
        "value_loss_coef": z["vf_coef"],
        "use_clipped_value_loss": False,
        "hidden_sizes": (256, 256),
        "activation": "relu",
        "log_std_init": -2.0,
        "train_total_steps": steps,
        "test_every_steps": 10**9,
        "eval_episodes": 1,
        "progress": False,
        "tensorboard": False,
        "logdir": "/tmp/bench_onpolicy_cheetah",
    }
    result = ppo_train.train(config)
    return result.total_steps / result.train_seconds, result.total_steps / result.train_cpu_seconds


def sb3_cheetah(steps: int) -> tuple[float, float]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env("HalfCheetah-v5", n_envs=1, seed=0), gamma=0.98)
    model = PPO(
        "MlpPolicy",
        env,
        seed=0,
        device="cpu",
        verbose=0,
        policy_kwargs={
            "log_std_init": -2,
            "ortho_init": False,
            "activation_fn": torch.nn.ReLU,
            "net_arch": {"pi": [256, 256], "vf": [256, 256]},
        },
        **ZOO_CHEETAH,
    )
    tic, cpu_tic = time.perf_counter(), _cpu_seconds()
    model.learn(steps)
    return steps / (time.perf_counter() - tic), steps / (_cpu_seconds() - cpu_tic)


# -- vector envs ------------------------------------------------------------------------------------
def _cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its children (actors, workers)."""
    import psutil

    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def _steps_per_second(envs: Any, n: int, seconds: float, cpu: list[float] | None = None) -> float:
    """Random-action steps per second; appends the CPU µs per env step to ``cpu``."""
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    space = envs.action_space
    if space != getattr(envs, "single_action_space", None):  # gymnasium's, ours: batched
        actions = [space.sample() for _ in range(64)]
    else:  # EnvPool: its action_space is one env's
        actions = [
            np.stack([space.sample() for _ in range(n)]).astype(
                np.int32 if isinstance(space, gym.spaces.Discrete) else np.float64
            )
            for _ in range(64)
        ]
    for a in actions[:8]:
        envs.step(a)
    count, tic, cpu_tic = 0, time.perf_counter(), _cpu_seconds() if cpu is not None else 0.0
    while time.perf_counter() - tic < seconds:
        envs.step(actions[int(rng.integers(64))])
        count += 1
    elapsed = time.perf_counter() - tic
    if cpu is not None:
        cpu.append((_cpu_seconds() - cpu_tic) / (count * n) * 1e6)
    return count * n / elapsed


def _calls_per_step(envs: Any, steps: int = 100) -> float:
    """Python-level calls (functions and builtins) the caller makes per step: a count that does
    not depend on the machine or its load."""
    actions = envs.action_space.sample()
    envs.step(actions)
    return _python_calls(lambda: envs.step(actions), steps)


def _table_rows(
    report: Report,
    title: str,
    rows: dict[str, float],
    unit: str,
    calls: dict[str, float],
    cpu: dict[str, float],
) -> None:
    table = report.table(
        title,
        ["", "steps/s" if unit == "/s" else "µs", "first row / this", "CPU µs per env step",
         "caller's Python calls per step"],
        [46, 10, 16, 19, 30],
    )  # fmt: skip
    ours = next(iter(rows.values()))
    for name, value in rows.items():
        table.row(
            name,
            f"{value:,.0f}" if unit == "/s" else f"{value:.1f}",
            f"{ours / value:.2f}x",
            f"{cpu[name]:.1f}",
            f"{calls[name]:.0f}" if name in calls else "",
        )


def _envpool(env_id: str, n: int) -> Any:
    import envpool

    return envpool.make_gymnasium(env_id, num_envs=n, num_threads=2)


def _rounds(
    makers: dict[str, tuple[Any, int]], seconds: float, rounds: int
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Steps per second of every row: the median of ``rounds`` passes that take the rows in
    turn (so that a change in the machine's load falls on all of them); the caller's Python
    calls per step of our rows; the median CPU time (all processes and threads) per env step,
    which depends less on the load than the rate does."""
    envs = {name: (make(), n) for name, (make, n) in makers.items()}
    try:
        rates: dict[str, list[float]] = {name: [] for name in envs}
        cpu: dict[str, list[float]] = {name: [] for name in envs}
        for _ in range(rounds):
            for name, (env, n) in envs.items():
                rates[name].append(_steps_per_second(env, n, seconds / rounds, cpu[name]))
        calls = {
            name: _calls_per_step(env)
            for name, (env, _) in envs.items()
            if name.startswith(("make", "env_fns"))
        }
    finally:
        for env, _ in envs.values():
            if hasattr(env, "close"):
                env.close()
    median = statistics.median
    return (
        {name: median(r) for name, r in rates.items()},
        calls,
        {name: median(c) for name, c in cpu.items()},
    )


def bench_vector(report: Report, seconds: float, rounds: int = 3, throughput: bool = True) -> None:
    """Throughput rows: our fast path (make), our generic path (env_fns), gymnasium, EnvPool
    (8 envs, and as many envs as ours); then the 2-env round trip (alone when
    ``throughput`` is false)."""
    from parl.env import RemoteVectorEnv

    have_envpool = importlib.util.find_spec("envpool") is not None
    for env_id, per in (("CartPole-v1", 64), ("HalfCheetah-v5", 16)) if throughput else ():
        n = 2 * per
        fns = [functools.partial(gym.make, env_id)] * n
        makers: dict[str, tuple[Any, int]] = {
            f"make(), 2 actors x {per} envs": (
                functools.partial(RemoteVectorEnv.make, env_id, n, 2, infos=False),
                n,
            ),
            f"env_fns, 2 actors x {per} envs": (
                functools.partial(RemoteVectorEnv, fns, 2, infos=False),
                n,
            ),
            "gymnasium SyncVectorEnv, 8 envs": (
                functools.partial(gym.vector.SyncVectorEnv, fns[:8]),
                8,
            ),
            "gymnasium AsyncVectorEnv, 8 envs": (
                functools.partial(gym.vector.AsyncVectorEnv, fns[:8]),
                8,
            ),
        }
        if have_envpool:
            makers["EnvPool, 8 envs, 2 threads"] = (functools.partial(_envpool, env_id, 8), 8)
            makers[f"EnvPool, {n} envs, 2 threads"] = (functools.partial(_envpool, env_id, n), n)
        rows, calls, cpu = _rounds(makers, seconds * rounds, rounds)
        _table_rows(report, f"{env_id}: random-action steps per second", rows, "/s", calls, cpu)
    fns2 = [functools.partial(gym.make, "CartPole-v1")] * 2
    makers = {
        "make(), 2 actors x 1 env": (
            functools.partial(RemoteVectorEnv.make, "CartPole-v1", 2, 2, infos=False),
            2,
        ),
        # one wake-up per step instead of two: what a 2-env CartPole should use
        "make(), 1 actor x 2 envs": (
            functools.partial(RemoteVectorEnv.make, "CartPole-v1", 2, 1, infos=False),
            2,
        ),
        "env_fns, 2 actors x 1 env": (functools.partial(RemoteVectorEnv, fns2, 2, infos=False), 2),
        "gymnasium AsyncVectorEnv, 2 envs": (functools.partial(gym.vector.AsyncVectorEnv, fns2), 2),
    }
    if have_envpool:
        makers["EnvPool, 2 envs, 2 threads"] = (functools.partial(_envpool, "CartPole-v1", 2), 2)
    rates, calls, cpu = _rounds(makers, seconds * rounds, rounds)
    latency = {name: 2e6 / rate for name, rate in rates.items()}
    _table_rows(report, "2-env CartPole step round trip", latency, "us", calls, cpu)
    async_us = latency["gymnasium AsyncVectorEnv, 2 envs"]
    ratios = report.table(
        "2-env CartPole step round trip against the baselines",
        ["", "/ AsyncVectorEnv", "/ EnvPool", "aim"],
        [46, 16, 10, 24],
    )
    for name in ("make(), 1 actor x 2 envs", "make(), 2 actors x 1 env"):
        envpool_ratio = (
            f"{latency[name] / latency['EnvPool, 2 envs, 2 threads']:.2f}x" if have_envpool else "-"
        )
        ratios.row(name, f"{latency[name] / async_us:.2f}x", envpool_ratio, "<= 0.3x Async")
    if not have_envpool:
        report.note("EnvPool rows skipped: envpool is not installed.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", choices=("cartpole", "halfcheetah", "vector", "roundtrip"), default=None
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--cheetah_steps", type=int, default=2048)
    parser.add_argument("--cheetah_rounds", type=int, default=1, help="ours and SB3 in turn")
    parser.add_argument("--vector_seconds", type=float, default=1.0, help="per row and pass")
    parser.add_argument("--vector_rounds", type=int, default=3, help="passes over the rows")
    add_record_flag(parser)
    args = parser.parse_args()
    report = Report("bench_onpolicy")
    from numpy_update import set_blas_threads

    torch.set_num_threads(1)
    set_blas_threads(1)  # numpy's matrix products too (ours: the numpy update), as train.py does
    if args.only in (None, "vector", "roundtrip"):
        bench_vector(report, args.vector_seconds, args.vector_rounds, args.only != "roundtrip")
    if args.only in (None, "cartpole", "halfcheetah"):
        ppo = report.table(
            "PPO against SB3 (rl-zoo hyperparameters), ours and SB3 in turn",
            ["", "ours", "SB3, same run", "ratio wall / CPU", "aim"],
            [46, 12, 14, 16, 8],
        )
        if args.only in (None, "cartpole"):
            bench_cartpole(ppo, args.seeds)
        if args.only in (None, "halfcheetah"):
            bench_cheetah(ppo, args.cheetah_steps, args.cheetah_rounds)
    report.write(args.record)


def _top_level_op(event: Any) -> bool:
    """An operator the caller (Python or the autograd engine) called, not one inside another."""
    parent = event.cpu_parent
    return event.name.startswith("aten::") and (
        parent is None or not parent.name.startswith("aten::")
    )


def _op_counts(continuous: bool) -> tuple[str, str]:
    """What one PPO minibatch update with the example's model at the benchmark's sizes costs,
    and one acting step of the example's agent: top-level torch operator calls (``aten::``,
    counted by ``torch.profiler``) and Python-level calls (numpy's included) of the example's
    numpy paths, against ``PPO.learn``'s and ``PPO.sample``'s torch paths. Counts that do not
    depend on the machine."""
    from agent import PPOAgent
    from model import MLPModel
    from numpy_update import NumpyPPOUpdate
    from torch.profiler import ProfilerActivity, profile

    from parl.algorithms import PPO

    torch.manual_seed(0)
    if continuous:
        model, batch = MLPModel(17, 6, True, (256, 256), "relu", -2.0), 64
        act = torch.randn(64, 6)
    else:
        model, batch = MLPModel(4, 2, False, (64, 64), "tanh"), 256
        act = torch.randint(0, 2, (256,))
    entropy_coef = ZOO_CHEETAH["ent_coef"] if continuous else 0.0  # the benchmarks' settings
    alg = PPO(
        model,
        entropy_coef=entropy_coef,
        continuous_action=continuous,
        use_clipped_value_loss=False,
        device="cpu",
    )
    obs = torch.randn(batch, 17 if continuous else 4)
    args = (obs, act.float(), *torch.randn(4, batch))
    update = NumpyPPOUpdate(alg)
    np_args = [x.numpy() for x in (obs, act if continuous else act.long(), *args[2:])]
    counts = []
    calls = (
        lambda: alg.learn(*args),
        lambda: alg.sample(obs[:8]),
        lambda: update.learn(*np_args),
    )
    for call in calls:
        call(), call()  # Adam's state exists: the steady state
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            call()
        counts.append(sum(1 for event in prof.events() if _top_level_op(event)))
    learn = (
        f"{counts[2]} torch ops and {round(_python_calls(calls[2]))} Python-level calls per "
        f"minibatch update (the example's numpy update; PPO.learn's torch path: {counts[0]} "
        f"ops, {round(_python_calls(calls[0]))} calls)"
    )
    agent = PPOAgent(alg, {"num_updates": 1, "initial_lr": 1e-3, "clip_param": 0.2}, (0,))
    batch_obs = obs[: 1 if continuous else 8].numpy()
    agent.sample(batch_obs)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        agent.sample(batch_obs)
    agent_ops = sum(1 for event in prof.events() if _top_level_op(event))
    numpy_calls = round(_python_calls(lambda: agent.sample(batch_obs)))
    torch_calls = round(_python_calls(lambda: alg.sample(torch.from_numpy(batch_obs))))
    act = (
        f"{agent_ops} torch ops and {numpy_calls} Python-level calls per acting step (the "
        f"agent's numpy path; PPO.sample's torch path: {counts[1]} ops, {torch_calls} calls)"
    )
    return learn, act


def _python_calls(call: Any, repeat: int = 20) -> float:
    """Python-level calls (functions, builtins, numpy's functions) of ``call()``, averaged."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        count += event in ("call", "c_call")

    sys.setprofile(profile)
    for _ in range(repeat):
        call()
    sys.setprofile(None)
    return count / repeat


def bench_cartpole(table: Table, seeds: list[int]) -> None:
    """Ours and SB3 in turn for each seed; medians of the wall and CPU times to 475."""
    print(
        "\nCartPole-v1 PPO, time to a 10-episode deterministic mean of 475 (rl-zoo hyperparameters)"
    )
    learn_ops, act_ops = _op_counts(continuous=False)
    print(f"  ours: {learn_ops}; 8 envs: {act_ops}")
    inf = float("inf")
    ours: list[Hit] = []
    theirs: list[Hit] = []
    for seed in seeds:
        o, s = ours_cartpole(seed), sb3_cartpole(seed)
        print(
            f"  seed {seed}: ours {o[0]} steps {o[1] or inf:.2f} s ({o[2] or inf:.2f} s CPU) | "
            f"SB3 {s[0]} steps {s[1] or inf:.2f} s ({s[2] or inf:.2f} s CPU)"
        )
        ours.append(o)
        theirs.append(s)
    median = statistics.median
    mo, ms = (median(h[1] or inf for h in hits) for hits in (ours, theirs))
    co, cs = (median(h[2] or inf for h in hits) for hits in (ours, theirs))
    so, ss = (median(h[0] or inf for h in hits) for hits in (ours, theirs))
    print(
        f"  median: ours {mo:.2f} s ({co:.2f} s CPU, {so:,.0f} steps), SB3 {ms:.2f} s "
        f"({cs:.2f} s CPU, {ss:,.0f} steps); ours / SB3 = {mo / ms:.2f}x wall, "
        f"{co / cs:.2f}x CPU (target <= 0.5x)"
    )
    # the time per training step, free of the lottery of how many steps a seed takes
    per_step = [
        sum(h[1] for h in hits if h[1]) / max(1, sum(h[0] for h in hits if h[1]))
        for hits in (ours, theirs)
    ]
    print(
        f"  per training step, over the seeds that reached 475: ours {per_step[0] * 1e3:.3f} ms,"
        f" SB3 {per_step[1] * 1e3:.3f} ms; ours / SB3 = {per_step[0] / per_step[1]:.2f}x"
    )
    table.row(
        f"CartPole-v1: time to a return of 475, median of seeds {', '.join(map(str, seeds))}",
        f"{mo:.2f} s",
        f"{ms:.2f} s",
        f"{mo / ms:.2f}x / {co / cs:.2f}x",
        "<= 0.5x",
    )
    table.row(
        "the same, time per training step over the seeds",
        f"{per_step[0] * 1e3:.3f} ms",
        f"{per_step[1] * 1e3:.3f} ms",
        f"{per_step[0] / per_step[1]:.2f}x",
    )


def bench_cheetah(table: Table, steps: int, rounds: int) -> None:
    """Ours and SB3 in turn, ``rounds`` times; the medians of their rates."""
    rates: dict[str, list[tuple[float, float]]] = {"ours": [], "SB3": []}
    for _ in range(rounds):
        rates["ours"].append(ours_cheetah(steps))
        rates["SB3"].append(sb3_cheetah(steps))
    wall = {name: statistics.median(r[0] for r in rs) for name, rs in rates.items()}
    cpu = {name: statistics.median(r[1] for r in rs) for name, rs in rates.items()}
    print(f"\nHalfCheetah-v5 PPO training, rl-zoo configuration, {steps} steps, {rounds} rounds")
    learn_ops, act_ops = _op_counts(continuous=True)
    print(f"  ours: {learn_ops}; {act_ops}")
    print(
        f"  ours {wall['ours']:,.0f} steps/s ({cpu['ours']:,.0f} per CPU second), SB3 "
        f"{wall['SB3']:,.0f} steps/s ({cpu['SB3']:,.0f} per CPU second); ours / SB3 = "
        f"{wall['ours'] / wall['SB3']:.2f}x wall, {cpu['ours'] / cpu['SB3']:.2f}x CPU "
        "(target >= 2x)"
    )
    table.row(
        f"HalfCheetah-v5: training steps/s ({steps:,} steps, median of {rounds})",
        f"{wall['ours']:,.0f}",
        f"{wall['SB3']:,.0f}",
        f"{wall['ours'] / wall['SB3']:.2f}x / {cpu['ours'] / cpu['SB3']:.2f}x",
        ">= 2x",
    )


if __name__ == "__main__":
    main()
