"""The GA3C example with real simulator processes: its predictor answers several simulators in
one batch, serves them oldest call first (none starved) and never waits for a straggler; a
segment's advantages match numbers worked by hand; a time limit bootstraps where a fallen
pole does not; the CartPole critic fits returns up to 100 rather than one value for every
state; the Atari preset trains on Pong. A run end to end with 2 local simulators (where the
time went, how the predictor batched), a killed simulator, a resumed run, counts below one, an
env it cannot run, the flags and Ray are tested with the other distributed examples
(``test_distributed_examples.py``, ``test_example_flags.py``, ``test_examples_on_ray.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, RunPython
from .test_distributed_examples import _run_main

pytestmark = pytest.mark.slow  # the example, on worker processes

GA3C_DIR = REPO_ROOT / "examples" / "GA3C"


BATCHING_SCRIPT = """
import json, sys, torch
sys.path.insert(0, {folder!r})
torch.set_num_threads(1)
import train
for max_batch in (16, 4):
    config = {{**train.cartpole_config, "seed": 0, "actor_num": 3, "env_num": 2,
              "max_predict_batch_size": max_batch, "logdir": {logdir!r}}}
    learner = train.Learner(config)
    try:
        for _ in range(300):
            learner.step()
    finally:
        learner.close()
    stats = {{**learner.predictor.stats(), "served": learner.predictor.served}}
    print("STATS" + json.dumps(stats))
"""


def test_predictor_batches_several_simulators_oldest_call_first_and_starves_none(
    run_python: RunPython, tmp_path: Path
) -> None:
    """3 simulators of 2 envs, the two predictor sizes run one after the other in one
    interpreter. Room for every request (batches of up to 16 observations): the simulators that
    have answered share one forward pass, and a request that has arrived is answered by the next
    batch (passed over 0 times). Room for 2 of 3 requests per batch (4 observations): a request
    may be passed over once (the two ahead of it fill the batch), never twice, since the
    simulators just answered go behind it. How often each is served also depends on how fast its
    process gets the CPU: checked loosely."""
    script = BATCHING_SCRIPT.format(folder=str(GA3C_DIR), logdir=str(tmp_path / "log"))
    proc = run_python(script, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    roomy, tight = (
        json.loads(ln[len("STATS") :]) for ln in proc.stdout.splitlines() if ln.startswith("STATS")
    )
    stats = roomy
    assert stats["max_requests"] >= 2, stats  # several simulators in one batch
    assert stats["mean_requests"] > 1.0, stats
    assert stats["max_wait"] == 0, stats
    assert stats["mean_batch_size"] <= 6, stats  # whole requests of 2 observations
    # mean_requests is requests / batches: equal up to the float's rounding
    assert sum(stats["served"]) == pytest.approx(stats["batches"] * stats["mean_requests"])
    stats = tight
    assert stats["max_requests"] == 2, stats  # the cap: 4 observations, whole requests of 2
    assert stats["max_wait"] <= 1, stats
    served = stats["served"]
    assert min(served) >= 0.25 * max(served), served


SEGMENT_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {folder!r})
from learner import Segment, Trainer

for done, next_value in ((1.0, 10.0), (0.0, 10.0)):
    segment = Segment(2, 1, np.zeros((1, 3), np.float32))
    segment.act(np.full((1, 3), 7.0), np.array([1]), np.array([1.0]))
    segment.outcome(np.array([1.0]), np.array([0.0]))
    segment.act(np.full((1, 3), 8.0), np.array([0]), np.array([2.0]))
    segment.outcome(np.array([2.0]), np.array([done]))
    assert segment.full()
    part = segment.close(np.array([next_value]), gamma=0.5, lam=1.0)
    print("SEGMENT", part["advantages"].tolist(), part["target_values"].tolist(),
          part["actions"].tolist(), part["obs"][:, 0].tolist(), segment.t)

trainer = Trainer(128)
for start in (0, 50, 100):
    steps = np.arange(start, start + 50)
    trainer.add({{"obs": steps[:, None], "actions": steps, "advantages": steps * 1.0,
                 "target_values": steps * 1.0}})
    print("READY", trainer.ready())
batch = trainer.batch()
print("BATCH", batch["actions"][0], batch["actions"][-1], len(batch["obs"]), trainer.size,
      trainer.ready(), trainer.parts[0]["actions"][0])
"""


def test_segments_bootstrap_from_the_next_value_and_batches_keep_the_rest(
    run_python: RunPython,
) -> None:
    """Two steps, gamma 0.5, lambda 1, values 1 and 2, rewards 1 and 2, bootstrap value 10:
    ended by the second step, A = (1 + 0.5*2 - 1 + 0.5*0, 2 - 2) = (1, 0); not ended,
    A1 = 2 + 0.5*10 - 2 = 5 and A0 = 1 + 0.5*2 - 1 + 0.5*5 = 3.5. The trainer hands out
    exactly 128 steps in the order they came and keeps the other 22 for the next batch."""
    proc = run_python(SEGMENT_SCRIPT.format(folder=str(GA3C_DIR)), timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "SEGMENT [1.0, 0.0] [2.0, 2.0] [1, 0] [7.0, 8.0] 0" in lines, proc.stdout
    assert "SEGMENT [3.5, 5.0] [4.5, 7.0] [1, 0] [7.0, 8.0] 0" in lines, proc.stdout
    assert lines.count("READY False") == 2 and "READY True" in lines
    assert "BATCH 0 127 128 22 False 128" in lines, proc.stdout


TIME_LIMIT_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {folder!r})
from learner import bootstrap_time_limits
from simulator import Simulator

# two CartPole envs in one simulator: env 0 cut by a 3-step time limit, env 1 pushed right
# until its pole falls
sim = Simulator._original({{"env_name": "CartPole-v1", "env_num": 2}}, 0)
sim.envs.envs[0].env._max_episode_steps = 3
sim.reset()
for t in range(50):
    before = sim.envs.envs[0].unwrapped.state.copy()
    out = sim.step(np.array([t % 2, 1]))
    rewards = bootstrap_time_limits(out["rewards"], out["truncated_obs"],
                                    np.full(len(out["truncated_obs"]), 10.0), 0.5)
    if t == 2:  # the time limit: done, bootstrapped from the last observation (not the reset one)
        last = out["truncated_obs"][0]
        print("CUT", out["dones"].tolist(), list(out["truncated_obs"]), rewards.tolist(),
              bool(np.abs(last - before).max() < 0.5), bool(np.array_equal(last, out["obs"][0])))
    if out["dones"][1]:  # the pole fell: done, no bootstrap
        print("FELL", out["dones"][1], 1 in out["truncated_obs"], rewards[1])
        break
"""


def test_a_time_limit_bootstraps_from_the_last_value_and_a_fallen_pole_does_not(
    run_python: RunPython,
) -> None:
    """CartPole's 500-step limit truncates a balanced pole: that step ends the segment's GAE
    (done) but its reward gets ``gamma * V(last observation)``, the observation before the
    reset, so the critic learns returns of up to 100 rather than a countdown to the limit.
    An episode that terminated gets no bootstrap (reward 1, gamma 0.5, value 10 here)."""
    proc = run_python(TIME_LIMIT_SCRIPT.format(folder=str(GA3C_DIR)), timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CUT [True, False] [0] [6.0, 1.0] True False" in proc.stdout, proc.stdout
    assert "FELL True False 1.0" in proc.stdout, proc.stdout


CRITIC_SCRIPT = """
import sys
import gymnasium as gym
import numpy as np
import torch
sys.path.insert(0, {folder!r})
torch.set_num_threads(1)
from agent import build_agent
from ga3c_config import cartpole_config

torch.manual_seed(0)
rng = np.random.default_rng(0)
env = gym.make("CartPole-v1")
agent = build_agent(cartpole_config, env.observation_space, env.action_space)
high = np.array([2.4, 1.0, 0.21, 1.0], np.float32)
# one fixed batch, returns from 100 (upright pole) down to 10 (about to fall)
obs = rng.uniform(-1, 1, (128, 4)).astype(np.float32) * high
target = (100 - 90 * np.abs(obs[:, 2]) / high[2]).astype(np.float32)
for _ in range({updates}):  # the critic alone: zero advantages
    agent.learn(obs, np.zeros(128, np.int64), np.zeros(128, np.float32), target)
values = agent.alg.value(torch.as_tensor(obs)).numpy()
print("EXPLAINED", 1 - np.var(target - values) / np.var(target))
print("SPREAD", values.max() - values.min())
"""


def test_the_cartpole_critic_fits_returns_up_to_100_instead_of_a_constant(
    run_python: RunPython,
) -> None:
    """The preset's critic, trained as the example trains it (sums, Adam at 1e-3, clipped to a
    norm of 40) for 200 updates on one fixed batch of returns from 10 to 100: its values spread
    over more than 30 and explain part of the returns' variance, which no constant does (the
    best constant explains none). An unscaled tanh network saturates at one value for every
    state here (about 54, as it did in training), which left GA3C's policy gradient without a
    baseline."""
    proc = run_python(CRITIC_SCRIPT.format(folder=str(GA3C_DIR), updates=200), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {ln.split()[0]: float(ln.split()[1]) for ln in proc.stdout.splitlines() if ln}
    assert lines["EXPLAINED"] > 0.1, proc.stdout
    assert lines["SPREAD"] > 30, proc.stdout


def test_ga3c_trains_on_pong_with_42_pixel_frames(run_python: RunPython, tmp_path: Path) -> None:
    """The Atari preset: DeepMind's wrappers at 42 x 42 (PARL's GA3C), uint8 frames from the
    simulator, a whole segment of 5 steps of 2 envs trained on."""
    args = ["--env", "PongNoFrameskip-v4", "--actor_num", "1", "--env_num", "2",
            "--train_batch_size", "10", "--max_sample_steps", "20", "--test_every_steps",
            "1000000", "--no_progress", "--logdir", str(tmp_path / "pong")]  # fmt: skip
    result = _run_main(run_python, GA3C_DIR, args)
    assert result["sample_steps"] == 20 and result["train_steps"] >= 1, result
    assert result["predictor"]["mean_batch_size"] == 2.0, result["predictor"]
