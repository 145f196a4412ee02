"""Quality runs of the one-process examples: each experiment runs the example's own command line
(one CPU thread per run), reads its evaluations back from TensorBoard and writes a JSON record
(``scripts/results.py``) and a curve.

    python scripts/quality.py --list
    python scripts/quality.py sac_HalfCheetah-v5                       # train, then record
    python scripts/quality.py dqn_CartPole-v1 pg_CartPole-v1 --parallel 2
    python scripts/quality.py sac_HalfCheetah-v5 --report              # record finished runs
    python scripts/quality.py sac_HalfCheetah-v5 --record_dir docs/results --plot_dir docs/curves

Seed ``k`` of an experiment logs under ``--logroot/<example>/<env>/seed<k>``, and its output
goes to ``seed<k>.log`` beside that folder. ``--report`` trains nothing: it reads the runs that
reached the experiment's budget under ``--logroot`` (started by this script or by hand with the
command it prints), so a long run can be recorded after the fact; the wall time then comes from
the TensorBoard events (first to last). ``--resume`` continues seeds stopped before their budget
(or given a larger ``--steps``) from their examples' checkpoints, then records them; each seed's
wall time is then the time its parts ran. It continues as the example's own ``--resume`` does:
an off-policy example run without ``--save_rpm`` continues with an empty replay memory. The budget, the evaluation interval and the number of
evaluation episodes are the experiment's (``--steps`` and ``--seeds`` change the first and the
seeds). ``baseline`` is a reference figure stated beside ours: for DDPG, TD3 and SAC, PARL's
published curve read at the same step count. A baseline may also be read when the run is
recorded: ``{"record": NAME}`` is the mean final figure of the published record
``docs/results/NAME.json`` over the seeds of this run (OAC against SAC), ``{"dataset": PATH}``
the mean episode return of the offline dataset the run trained on (its ``generation.json``).

Records go to ``--record_dir`` (default: ``--logroot``) as ``<experiment>.json``;
``--record_dir docs/results`` publishes them to the tables ``scripts/render_results.py`` renders.
``--keep docs/results/<experiment>.json`` adds seeds to a published record: the seeds it holds
that this run does not train stay in the new record, and in its curve from their recorded
evaluations (their logs need not exist any more).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

PARL_CURVES = "PARL's published curve at the same step (HalfCheetah-v4, 3 seeds)"


@dataclass(frozen=True)
class Experiment:
    """One example trained on one task for a fixed budget."""

    algorithm: str
    page: str  # the docs page (docs/algorithms/<page>.md) whose table shows it
    example: str  # the folder under examples/
    env: str
    steps: int  # the budget: environment steps, or episodes where ``unit`` says so
    every: int  # evaluate every this many steps (episodes)
    metric: str
    configuration: str | None = None
    flags: tuple[str, ...] = ()  # the example's own flags beyond the shared ones
    tag: str = "eval/episode_reward"
    seeds: tuple[int, ...] = (0, 1, 2)
    unit: str = "steps"  # "episodes" for the QuickStart, which counts episodes
    baseline: dict[str, Any] | None = None
    note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    variant: str = ""  # tells apart two experiments of one example on one task
    lower_is_better: bool = False  # a loss: the best evaluation is the smallest
    every_flag: str = ""  # the example's flag for ``every``, where it is not the usual one
    bin: int = 0  # a per-episode tag: one point per this many steps (the mean of the bin)
    folder: str = ""  # the runs' folder, where two experiments read two tags of the same runs

    @property
    def name(self) -> str:
        return "_".join(part for part in (self.page, self.variant, self.env) if part)

    @property
    def checkpoint(self) -> str:
        """The file that says the example left a checkpoint to resume from (MADDPG and MAPPO
        write one per agent, agent 0's first)."""
        return "checkpoint_agent0.pt" if self.example in ("MADDPG", "MAPPO") else "checkpoint.pt"

    def command(self, seed: int, logdir: str, steps: int) -> list[str]:
        """The example's command line for ``seed``."""
        script = f"examples/{self.example}/train.py"
        if self.unit == "episodes":
            every = self.every_flag or "--eval_every"
            budget = ["--max_episodes", str(steps), every, str(self.every)]
        else:
            every = self.every_flag or "--test_every_steps"
            budget = ["--train_total_steps", str(steps), every, str(self.every)]
        return ["python", script, "--env", self.env, "--seed", str(seed), *budget, *self.flags,
                "--logdir", logdir, "--torch_threads", "1", "--no_progress"]  # fmt: skip


PARL_MADDPG_METRIC = (
    "mean return of the training episodes, summed over the agents, per 1,000 episodes (the "
    "measure of PARL's published curves)"
)
LBF_METRIC = (
    "mean over the agents of the return of 10 greedy evaluation episodes (lbforaging's rewards "
    "are normalised: the 2 agents' returns sum to 1 when all the food is collected)"
)
LBF_NOTE = (
    "one seed; EPyMARL's tables report the sum over the agents, twice this figure; the wall time "
    "was measured while other training runs shared the 2 cores"
)
# EPyMARL's QMIX (src/config/algs/qmix.yaml at uoe-agents/epymarl cbc38c0) with its agent
QMIX_EPYMARL_FC_FLAGS = (
    "--optimizer", "adam", "--standardise_rewards", "--exploration_steps", "50000", "--agent",
    "fc", "--no_last_action",
)  # fmt: skip
# EPyMARL's COMA (src/config/algs/coma.yaml at uoe-agents/epymarl cbc38c0): Adam at 3e-4 for both
# networks, an entropy bonus of 0.001, standardised rewards, batches of 10 episodes, and
# sampling from the policy itself (its "soft_policies" selector: no epsilon)
COMA_EPYMARL_FLAGS = (
    "--optimizer", "adam", "--actor_lr", "3e-4", "--critic_lr", "3e-4", "--entropy_coef",
    "0.001", "--standardise_rewards", "--episodes_per_iteration", "10", "--epsilon", "0",
    "--min_epsilon", "0",
)  # fmt: skip
SPREAD_METRIC = "the team's return (the mean over the agents) of 10 greedy evaluation episodes"
SPREAD_NOTE = (
    "with local_ratio 0 every agent gets the team's distance term, so this is that term summed "
    "over the episode; EPyMARL's MPE figures are on another scale (the MAPPO page converts them)"
)
ALPHAZERO_METRIC = (
    "share of 100 games won against {player}, the network moving first in every other game"
)
ALPHAZERO_CONFIGURATION = "the example's defaults (80 games per iteration, 50 simulations per move)"
ALPHAZERO_FLAGS = ("--eval_episodes", "100")
ALPHAZERO_NOTE = (
    "one seed; a step is one iteration (self-play, training, arena); PARL's run is 200 "
    "iterations of 500 games with 800 simulations per move; the wall time was measured while a "
    "DQN run and tests shared the 2 cores"
)
# The offline datasets, made by: python scripts/make_offline_dataset.py --env <task> --out
# datasets --kinds medium medium-replay --samples 100000 (datasets/ is not kept in git)
OFFLINE_METRIC = "mean return of 10 deterministic evaluation episodes"
OFFLINE_NOTE = (
    "a step is one update; the wall times were measured while other runs shared the 2 cores"
)
SAC_HALFCHEETAH = {
    "name": "SAC, the same budget and seeds (sac_HalfCheetah-v5), their mean",
    "record": "sac_HalfCheetah-v5",
}
MUJOCO_NOTE = "the wall time was measured while other training runs shared the 2 cores"
# DDPG and TD3 on Pendulum-v1 at a budget of a few thousand steps: learning starts after 1,000
# random steps (the examples' 10,000 would leave no budget), with smaller networks and batches
PENDULUM_FLAGS = (
    "--eval_episodes", "5", "--warmup_steps", "1000", "--batch_size", "128", "--hidden", "64",
)  # fmt: skip
PENDULUM_NOTE = (
    "a random policy scores about -1,200; the wall time was measured while other work shared "
    "the 2 cores"
)


def offline_experiments(env: str, kind: str) -> tuple[Experiment, ...]:
    """IQL, behaviour cloning and CQL on the dataset ``datasets/<task>-<kind>-v0`` of ``env``."""
    dataset = f"datasets/{env.lower().split('-')[0]}-{kind}-v0"
    made_here = f"the {dataset.split('/')[1]} dataset made here"
    variant = kind.replace("-", "_")
    common: dict[str, Any] = {
        "baseline": {"name": "the dataset's mean episode return", "dataset": dataset},
        "note": OFFLINE_NOTE,
    }
    return (
        Experiment(
            "IQL", "iql", "IQL", env, 50_000, 5_000, OFFLINE_METRIC,
            f"PARL's settings (tau 0.7, beta 3), {made_here}",
            flags=("--dataset", dataset), variant=variant, **common,
        ),
        Experiment(
            "Behaviour cloning", "iql", "IQL", env, 50_000, 5_000, OFFLINE_METRIC,
            f"IQL's actor with beta 0 (every transition weighed alike), {made_here}",
            flags=("--dataset", dataset, "--beta", "0"), variant=f"bc_{variant}", **common,
        ),
        Experiment(
            "CQL", "cql", "CQL", env, 50_000, 5_000, OFFLINE_METRIC.replace("10 ", "5 "),
            "the example's CPU preset (2 sampled actions per proposal), a learned temperature, "
            "IQL's budget of 50k updates with the first 10k cloning the dataset (the preset's "
            f"share, 40k of 200k), {made_here}",
            flags=("--dataset", dataset, "--with_automatic_entropy_tuning",
                   "--policy_eval_start", "10000"), variant=variant,
            **common,
        ),
        *(() if (env, kind) != ("Hopper-v5", "medium") else tuple(Experiment(
            f"CQL ({label})", "cql", "CQL", env, 50_000, 5_000, OFFLINE_METRIC.replace("10 ", "5 "),
            f"the example's CPU preset with {setting}, a learned temperature, IQL's budget of 50k "
            f"updates with the first 10k cloning the dataset, {made_here}",
            flags=("--dataset", dataset, "--with_automatic_entropy_tuning",
                   "--policy_eval_start", "10000", *flags), variant=f"{name}_{variant}",
            **common,
        ) for name, label, setting, flags in (
            ("weight10", "weight 10", "twice the conservative term's weight (10)",
             ("--min_q_weight", "10")),
            ("corl", "CORL's weights", "CORL's weights for hopper-medium (conservative weight 10, "
             "actor learning rate 3e-5)", ("--min_q_weight", "10", "--actor_lr", "3e-5")),
        ))),
        *(() if kind != "medium" else (Experiment(
            "Decision Transformer", "dt", "DT", env, 20_000, 2_000,
            "mean return of 5 evaluation episodes (the preset's), each asking for the paper's "
            "target return",
            f"the example's CPU preset (context 10, 2 layers of width 64, batch 32), {made_here}",
            flags=("--dataset", dataset), variant=variant, **common,
        ),)),
    )  # fmt: skip


EXPERIMENTS = {
    e.name: e
    for e in (
        Experiment(
            "Policy gradient", "pg", "QuickStart", "CartPole-v1", 1000, 50,
            "mean return of 10 greedy evaluation episodes",
            flags=("--eval_episodes", "10", "--target_return", "1000"), tag="eval/mean_return",
            unit="episodes", note="the budget is 1,000 episodes, not steps; "
            "--target_return 1000 keeps the run from stopping once solved",
        ),
        Experiment(
            "DQN", "dqn", "DQN", "CartPole-v1", 50_000, 2_500,
            "mean return of 10 greedy evaluation episodes", "rl-zoo's settings",
            flags=("--eval_episodes", "10"), tag="eval/episode_return",
        ),
        Experiment(
            "Dueling DDQN", "dqn", "DQN", "CartPole-v1", 50_000, 2_500,
            "mean return of 10 greedy evaluation episodes",
            "dueling network, Double DQN, rl-zoo's settings",
            flags=("--algo", "DDQN", "--dueling", "--eval_episodes", "10"),
            tag="eval/episode_return", variant="dueling",
        ),
        Experiment(
            "DQN", "dqn", "DQN", "PongNoFrameskip-v4", 500_000, 50_000,
            "mean score of 5 greedy evaluation games",
            "the Nature network, 100k replay, learning from 100k steps",
            flags=("--eval_episodes", "5"), tag="eval/episode_return", seeds=(0,),
            baseline={"name": "random play", "value": -20.7},
            note="one seed and 500k steps (2M frames): DQN on Pong usually needs 1M-2M steps "
            "to score above 0; the run shows the climb from random play",
        ),
        Experiment(
            "Dueling DDQN", "dqn", "DQN", "PongNoFrameskip-v4", 500_000, 50_000,
            "mean score of 5 greedy evaluation games",
            "dueling network, Double DQN, the Nature network's convolutions, 100k replay, "
            "learning from 100k steps",
            flags=("--algo", "DDQN", "--dueling", "--eval_episodes", "5"),
            tag="eval/episode_return", seeds=(0,), variant="dueling",
            baseline={"name": "random play", "value": -20.7},
            note="one seed and 500k steps (2M frames), the budget of the DQN run beside it; "
            "the run shows the climb from random play",
        ),
        Experiment(
            "DDPG", "ddpg", "DDPG", "HalfCheetah-v5", 100_000, 5_000,
            "mean return of 10 deterministic evaluation episodes", "PARL's settings",
            flags=("--eval_episodes", "10"), seeds=(0,),
            baseline={"name": PARL_CURVES, "value": 5000}, note=MUJOCO_NOTE,
        ),
        Experiment(
            "TD3", "td3", "TD3", "HalfCheetah-v5", 100_000, 5_000,
            "mean return of 10 deterministic evaluation episodes", "PARL's settings",
            flags=("--eval_episodes", "10"), seeds=(0,),
            baseline={"name": PARL_CURVES, "value": 3300}, note=MUJOCO_NOTE,
        ),
        Experiment(
            "SAC", "sac", "SAC", "HalfCheetah-v5", 100_000, 5_000,
            "mean return of 10 deterministic evaluation episodes", "PARL's settings (alpha 0.2)",
            flags=("--eval_episodes", "10"),
            baseline={"name": PARL_CURVES, "value": 4000}, note=MUJOCO_NOTE,
        ),
        Experiment(
            "OAC", "oac", "OAC", "HalfCheetah-v5", 100_000, 5_000,
            "mean return of 10 deterministic evaluation episodes",
            "PARL's settings (alpha 0.2, beta 4.66, delta 23.53)",
            flags=("--eval_episodes", "10"), note=MUJOCO_NOTE,
            baseline=SAC_HALFCHEETAH,
        ),
        Experiment(
            "OAC", "oac", "OAC", "HalfCheetah-v5", 100_000, 5_000,
            "mean return of 10 deterministic evaluation episodes",
            "the paper's centre (the policy's mean), else PARL's settings",
            flags=("--eval_episodes", "10", "--centre", "mean"), note=MUJOCO_NOTE,
            variant="mean",
            baseline=SAC_HALFCHEETAH,
        ),
        Experiment(
            "OAC", "oac", "OAC", "HalfCheetah-v5", 100_000, 5_000,
            "mean return of 10 deterministic evaluation episodes",
            "the paper's centre (the policy's mean) and delta 1 (PARL's 23.53 is its Humanoid "
            "setting), else PARL's settings",
            flags=("--eval_episodes", "10", "--centre", "mean", "--delta", "1"),
            note=MUJOCO_NOTE, variant="mean_delta1", baseline=SAC_HALFCHEETAH,
        ),
        Experiment(
            "OAC", "oac", "OAC", "HalfCheetah-v5", 100_000, 5_000,
            "mean return of 10 deterministic evaluation episodes",
            "the paper's centre (the policy's mean) and delta 4 (PARL's 23.53 is its Humanoid "
            "setting), else PARL's settings",
            flags=("--eval_episodes", "10", "--centre", "mean", "--delta", "4"),
            note=MUJOCO_NOTE, variant="mean_delta4", baseline=SAC_HALFCHEETAH,
        ),
        Experiment(
            "DDPG", "ddpg", "DDPG", "Pendulum-v1", 4_000, 1_000,
            "mean return of 5 deterministic evaluation episodes",
            "PARL's learning rates, 1,000 random warm-up steps, batches of 128, hidden width 64",
            flags=PENDULUM_FLAGS, note=PENDULUM_NOTE,
        ),
        Experiment(
            "TD3", "td3", "TD3", "Pendulum-v1", 6_000, 1_000,
            "mean return of 5 deterministic evaluation episodes",
            "PARL's learning rates, 1,000 random warm-up steps, batches of 128, hidden width 64",
            flags=PENDULUM_FLAGS, note=PENDULUM_NOTE,
        ),
        Experiment(
            "A2C", "a2c", "A2C", "CartPole-v1", 40_000, 5_000,
            "mean return of 10 greedy evaluation episodes (the preset's)",
            "the example's CartPole preset, 2 actors of 4 envs",
            note="a random policy scores about 22; the wall time was measured while other work "
            "shared the 2 cores",
        ),
        Experiment(
            "MAPPO", "mappo", "MAPPO", "simple_speaker_listener", 6_000, 1_200,
            "mean over the agents of the summed return of 3 greedy evaluation episodes",
            "PARL's settings, 16 envs in 1 actor, 6,000 steps (15 updates)",
            flags=("--env_num", "16", "--num_workers", "1", "--eval_episodes", "3"),
            variant="short",
            note="random speakers and listeners score about -50 per episode; the wall time was "
            "measured while other work shared the 2 cores",
        ),
        Experiment(
            "MAPPO", "mappo", "MAPPO", "simple_speaker_listener", 6_000, 1_200,
            "mean over the agents and the 16 envs of the summed return of each update's "
            "training episodes",
            "PARL's settings, 16 envs in 1 actor, 6,000 steps (15 updates), the training "
            "episodes",
            flags=("--env_num", "16", "--num_workers", "1", "--eval_episodes", "3"),
            tag="train/episode_reward", variant="short_train", folder="MAPPO-short",
            note="random speakers and listeners score about -50 per episode; the same runs as "
            "mappo_short_simple_speaker_listener, recorded with --report",
        ),
        Experiment(
            "GA3C", "ga3c", "GA3C", "CartPole-v1", 100_000, 10_000,
            "mean return of 10 greedy evaluation episodes",
            "the example's CartPole preset, 2 simulators of 4 envs",
            flags=("--target_return", "1000"),
            note="which simulators share a prediction batch depends on timing, so a run differs "
            "from another at the same seed; --target_return 1000 keeps a solved run going",
        ),
        Experiment(
            "GA3C", "ga3c", "GA3C", "PongNoFrameskip-v4", 3_250_000, 250_000,
            "mean score of 3 greedy evaluation games (the preset's)",
            "the example's Atari preset (PARL's: 42 x 42 frames, segments of 5 steps, batches "
            "of 128) with 12 simulators of 4 envs and predictions of up to 32 observations; "
            "the learner on a GPU where there is one",
            flags=("--actor_num", "12", "--env_num", "4", "--max_predict_batch_size", "32",
                   "--device", "auto"),
            seeds=(0,), baseline={"name": "random play", "value": -20.7},
            note="one seed, on a machine with one H100 GPU and 16 cores (5,500 steps/s); "
            "3.25M steps (13M frames), stopped at 2.25M and resumed from its checkpoint; the "
            "mean return of the training games, printed with each evaluation, went from -20.5 "
            "at 250k steps to -14.6 at 3.25M: the climb from random play, not a solved game",
        ),
        Experiment(
            "MAPPO", "mappo", "MAPPO", "simple_speaker_listener", 1_000_000, 50_000,
            "mean over the agents of the summed return of 10 greedy evaluation episodes",
            "PARL's settings, 32 envs in 1 actor",
            flags=("--env_num", "32", "--num_workers", "1", "--eval_episodes", "10"),
            baseline={"name": "PARL's published curve at 1M steps", "value": -12},
        ),
        Experiment(
            "MAPPO", "mappo", "MAPPO", "simple_spread", 1_000_000, 50_000,
            "mean over the agents of the summed return of 10 greedy evaluation episodes",
            "PARL's settings, 32 envs in 1 actor",
            flags=("--env_num", "32", "--num_workers", "1", "--eval_episodes", "10"),
            baseline={"name": "random play (200 episodes)", "value": -53},
            note=SPREAD_NOTE,
        ),
        Experiment(
            "MADDPG", "maddpg", "MADDPG", "simple_speaker_listener", 25_000, 1_000,
            PARL_MADDPG_METRIC, "PARL's settings, discrete actions", unit="episodes",
            every_flag="--test_every_episodes", tag="train/episode_reward_wrt_episode", bin=1_000,
            baseline={"name": "PARL's published training curve (discrete actions)", "value": -35},
            note="the budget is PARL's 25,000 episodes of 25 steps",
        ),
        Experiment(
            "MADDPG", "maddpg", "MADDPG", "simple", 25_000, 1_000,
            PARL_MADDPG_METRIC, "PARL's settings, discrete actions", unit="episodes",
            every_flag="--test_every_episodes", tag="train/episode_reward_wrt_episode", bin=1_000,
            baseline={"name": "PARL's published training curve (discrete actions)", "value": -20},
            note="the budget is PARL's 25,000 episodes of 25 steps",
        ),
        Experiment(
            "MADDPG", "maddpg", "MADDPG", "simple_spread", 100_000, 1_000,
            PARL_MADDPG_METRIC, "PARL's settings, discrete actions", unit="episodes",
            every_flag="--test_every_episodes", tag="train/episode_reward_wrt_episode", bin=1_000,
            seeds=(0,),
            baseline={"name": "PARL's published training curve (discrete actions)", "value": -57},
            note="one seed; the budget is PARL's 100,000 episodes of 25 steps",
        ),
        Experiment(
            "QMIX", "qmix", "QMIX", "Foraging-8x8-2p-2f-coop-v3", 2_000_000, 20_000,
            LBF_METRIC, "the example's defaults", tag="eval/episode_return", seeds=(0,),
            baseline={"name": "all food collected", "value": 0.5}, note=LBF_NOTE,
        ),
        Experiment(
            "QMIX", "qmix", "QMIX", "Foraging-8x8-2p-2f-coop-v3", 2_000_000, 20_000,
            LBF_METRIC,
            "EPyMARL's QMIX settings: Adam, standardised rewards, epsilon annealed over 50k "
            "steps; else the example's defaults",
            flags=("--optimizer", "adam", "--standardise_rewards", "--exploration_steps",
                   "50000"),
            tag="eval/episode_return", seeds=(0,), variant="epymarl",
            baseline={"name": "all food collected", "value": 0.5}, note=LBF_NOTE,
        ),
        Experiment(
            "QMIX", "qmix", "QMIX", "Foraging-8x8-2p-2f-coop-v3", 2_000_000, 20_000,
            LBF_METRIC,
            "EPyMARL's QMIX settings and agent: Adam, standardised rewards, epsilon annealed over "
            "50k steps, a feed-forward agent network whose inputs leave out the last action; "
            "else the example's defaults",
            flags=QMIX_EPYMARL_FC_FLAGS,
            tag="eval/episode_return", seeds=(0,), variant="epymarl_fc",
            baseline={"name": "all food collected", "value": 0.5}, note=LBF_NOTE,
        ),
        Experiment(
            "QMIX", "qmix", "QMIX", "Foraging-8x8-2p-2f-coop-v3", 2_000_000, 20_000,
            LBF_METRIC,
            "EPyMARL's QMIX settings, agent and action selector: Adam, standardised rewards, "
            "epsilon annealed over 50k steps and drawn by each agent for itself, a feed-forward "
            "agent network whose inputs leave out the last action; else the example's defaults",
            flags=(*QMIX_EPYMARL_FC_FLAGS, "--exploration_draws", "agent"),
            tag="eval/episode_return", seeds=(0,), variant="epymarl_fc_agent_draws",
            baseline={"name": "all food collected", "value": 0.5}, note=LBF_NOTE,
        ),
        Experiment(
            "COMA", "coma", "COMA", "Foraging-8x8-2p-2f-coop-v3", 2_000_000, 20_000,
            LBF_METRIC, "the example's defaults", tag="eval/episode_return", seeds=(0,),
            baseline={"name": "all food collected", "value": 0.5}, note=LBF_NOTE,
        ),
        Experiment(
            "COMA", "coma", "COMA", "Foraging-8x8-2p-2f-coop-v3", 2_000_000, 20_000,
            LBF_METRIC,
            "EPyMARL's COMA settings: Adam at 3e-4, an entropy bonus of 0.001, standardised "
            "rewards, 10 episodes per update, no epsilon exploration; else the example's defaults",
            flags=COMA_EPYMARL_FLAGS, tag="eval/episode_return", seeds=(0,), variant="epymarl",
            baseline={"name": "all food collected", "value": 0.5}, note=LBF_NOTE,
        ),
        Experiment(
            "QMIX", "qmix", "QMIX", "simple_spread", 2_000_000, 20_000, SPREAD_METRIC,
            "the example's defaults", tag="eval/episode_return", seeds=(0,),
            baseline={"name": "random play (200 episodes)", "value": -53},
            note="one seed; " + SPREAD_NOTE,
        ),
        Experiment(
            "QMIX", "qmix", "QMIX", "simple_spread", 2_000_000, 20_000, SPREAD_METRIC,
            "EPyMARL's QMIX settings and agent: Adam, standardised rewards, epsilon annealed over "
            "50k steps, a feed-forward agent network whose inputs leave out the last action; "
            "else the example's defaults",
            flags=QMIX_EPYMARL_FC_FLAGS,
            tag="eval/episode_return", seeds=(0,), variant="epymarl_fc",
            baseline={"name": "random play (200 episodes)", "value": -53},
            note="one seed; " + SPREAD_NOTE,
        ),
        Experiment(
            "COMA", "coma", "COMA", "simple_spread", 2_000_000, 20_000, SPREAD_METRIC,
            "the example's defaults", tag="eval/episode_return", seeds=(0,),
            baseline={"name": "random play (200 episodes)", "value": -53},
            note="one seed; " + SPREAD_NOTE,
        ),
        Experiment(
            "COMA", "coma", "COMA", "simple_spread", 2_000_000, 20_000, SPREAD_METRIC,
            "EPyMARL's COMA settings: Adam at 3e-4, an entropy bonus of 0.001, standardised "
            "rewards, 10 episodes per update, no epsilon exploration; else the example's defaults",
            flags=COMA_EPYMARL_FLAGS, tag="eval/episode_return", seeds=(0,), variant="epymarl",
            baseline={"name": "random play (200 episodes)", "value": -53},
            note="one seed; " + SPREAD_NOTE,
        ),
        Experiment(
            "MADDPG", "maddpg", "MADDPG", "simple", 25_000, 1_000,
            PARL_MADDPG_METRIC, "PARL's settings, continuous actions", unit="episodes",
            flags=("--continuous_actions",), every_flag="--test_every_episodes",
            tag="train/episode_reward_wrt_episode", bin=1_000, variant="continuous",
            baseline={"name": "PARL's published training curve (continuous actions)",
                      "value": -15},
            note="the budget is PARL's 25,000 episodes of 25 steps",
        ),
        Experiment(
            "MADDPG", "maddpg", "MADDPG", "simple_speaker_listener", 25_000, 1_000,
            PARL_MADDPG_METRIC, "PARL's settings, continuous actions", unit="episodes",
            flags=("--continuous_actions",), every_flag="--test_every_episodes",
            tag="train/episode_reward_wrt_episode", bin=1_000, variant="continuous",
            baseline={"name": "PARL's published training curve (continuous actions)",
                      "value": -27},
            note="the budget is PARL's 25,000 episodes of 25 steps",
        ),
        Experiment(
            "MADDPG", "maddpg", "MADDPG", "simple_speaker_listener", 25_000, 1_000,
            PARL_MADDPG_METRIC,
            "PARL's settings, continuous actions, the time limit stored as terminal (as PARL's "
            "runs stored it)", unit="episodes",
            flags=("--continuous_actions", "--time_limit_as_terminal"),
            every_flag="--test_every_episodes", tag="train/episode_reward_wrt_episode",
            bin=1_000, variant="continuous_terminal",
            baseline={"name": "PARL's published training curve (continuous actions)",
                      "value": -27},
            note="the budget is PARL's 25,000 episodes of 25 steps",
        ),
        Experiment(
            "MADDPG", "maddpg", "MADDPG", "simple_speaker_listener", 25_000, 1_000,
            PARL_MADDPG_METRIC,
            "PARL's settings, continuous actions, PettingZoo 1.22's dynamics (those of PARL's "
            "runs)", unit="episodes",
            flags=("--continuous_actions", "--legacy_dynamics"),
            every_flag="--test_every_episodes", tag="train/episode_reward_wrt_episode",
            bin=1_000, variant="continuous_legacy", seeds=(0, 1, 2),
            baseline={"name": "PARL's published training curve (continuous actions)",
                      "value": -27},
            note="the budget is PARL's 25,000 episodes of 25 steps",
        ),
        Experiment(
            "MADDPG", "maddpg", "MADDPG", "simple_spread", 100_000, 1_000,
            PARL_MADDPG_METRIC,
            "PARL's settings, discrete actions, PettingZoo 1.22's dynamics (those of PARL's runs)",
            unit="episodes", flags=("--legacy_dynamics",), every_flag="--test_every_episodes",
            tag="train/episode_reward_wrt_episode", bin=1_000, variant="legacy", seeds=(0,),
            baseline={"name": "PARL's published training curve (discrete actions)", "value": -57},
            note="one seed; the budget is PARL's 100,000 episodes of 25 steps",
        ),
        Experiment(
            "MADDPG", "maddpg", "MADDPG", "simple_spread", 100_000, 1_000,
            PARL_MADDPG_METRIC,
            "PARL's settings, continuous actions, PettingZoo 1.22's dynamics (those of PARL's "
            "runs)", unit="episodes", flags=("--continuous_actions", "--legacy_dynamics"),
            every_flag="--test_every_episodes", tag="train/episode_reward_wrt_episode",
            bin=1_000, variant="continuous_legacy", seeds=(0,),
            baseline={"name": "PARL's published training curve (continuous actions)",
                      "value": -72},
            note="one seed; PARL's budget is 100,000 episodes of 25 steps",
        ),
        Experiment(
            "MAML++", "maml", "MAML", "sine", 40_000, 500,
            "test MSE on 10,000 held-out 5-shot tasks (lower is better)",
            "PARL's full protocol (80 epochs of 500 meta-updates of 16 tasks), the "
            "meta-gradient clipped to 10",
            flags=("--algo", "maml++"), tag="test/loss", seeds=(0,), lower_is_better=True,
            baseline={"name": "PARL's published MAML++ figure", "value": 0.34},
            note="one seed; a step is one meta-update",
        ),
        Experiment(
            "AlphaZero", "alphazero", "AlphaZero", "connect4", 50, 10,
            ALPHAZERO_METRIC.format(player="the one-move-lookahead player (it wins when it can, "
                                    "blocks when it must, else plays at random)"),
            ALPHAZERO_CONFIGURATION + "; against the lookahead player", flags=ALPHAZERO_FLAGS,
            tag="alphazero/win_rate_vs_lookahead",
            seeds=(0,), variant="lookahead", folder="AlphaZero",
            baseline={"name": "the target", "value": 0.8}, note=ALPHAZERO_NOTE,
        ),
        Experiment(
            "AlphaZero", "alphazero", "AlphaZero", "connect4", 50, 10,
            ALPHAZERO_METRIC.format(player="a uniformly random player"),
            ALPHAZERO_CONFIGURATION + "; against the random player", flags=ALPHAZERO_FLAGS,
            tag="alphazero/win_rate_vs_random",
            seeds=(0,), variant="random", folder="AlphaZero",
            baseline={"name": "the target", "value": 0.95},
            note=ALPHAZERO_NOTE + "; the same run as alphazero_lookahead_connect4, recorded with "
            "--report",
        ),
        *offline_experiments("HalfCheetah-v5", "medium"),
        *offline_experiments("HalfCheetah-v5", "medium-replay"),
        *offline_experiments("Hopper-v5", "medium"),
        *offline_experiments("Hopper-v5", "medium-replay"),
        Experiment(
            "ES", "es", "ES", "CartPole-v1", 200_000, 20_000,
            "mean return of 3 greedy evaluation episodes (the preset's)",
            "the example's CartPole preset, 2 actors",
            tag="eval/episode_reward",
        ),
        Experiment(
            "ES", "es", "ES", "HalfCheetah-v5", 1_600_000, 200_000,
            "return of one greedy evaluation episode (the preset's)",
            "the example's MuJoCo preset (40 episodes per update), 2 actors",
            tag="eval/episode_reward", seeds=(0,),
            note="one seed; 40 updates of 40 episodes; the wall time was measured while other "
            "work shared the 2 cores",
        ),
    )
}  # fmt: skip


def logdir(logroot: str, experiment: Experiment, seed: int) -> str:
    folder = experiment.folder or "-".join(
        part for part in (experiment.example, experiment.variant) if part
    )
    return os.path.join(logroot, folder, experiment.env, f"seed{seed}")


def train(
    experiment: Experiment,
    seeds: list[int],
    steps: int,
    logroot: str,
    parallel: int,
    resume: bool = False,
) -> float:
    """Run the seeds, ``parallel`` at a time; returns the wall time of them all. With
    ``resume``, a seed whose folder holds its example's checkpoint continues from it
    (``--resume``, its log appended to); one that has not started starts."""
    started = time.perf_counter()
    jobs, running = list(seeds), []
    while jobs or running:
        while jobs and len(running) < parallel:
            seed = jobs.pop(0)
            folder = logdir(logroot, experiment, seed)
            os.makedirs(os.path.dirname(folder), exist_ok=True)
            command = experiment.command(seed, folder, steps)
            again = resume and os.path.exists(os.path.join(folder, experiment.checkpoint))
            if resume and not again and os.path.isdir(folder) and os.listdir(folder):
                raise SystemExit(
                    f"--resume: {folder} holds a run of {experiment.name} seed {seed} but no "
                    f"{experiment.checkpoint} to continue from; move it away to start that seed "
                    "again"
                )
            if again:
                command.append("--resume")
            print("$ " + shlex.join(command), flush=True)
            with open(folder + ".log", "a" if again else "w") as log:
                process = subprocess.Popen(
                    [sys.executable, *command[1:]], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
                )
            running.append((seed, process))
        seed, process = running.pop(0)
        if process.wait() != 0:
            raise SystemExit(
                f"{experiment.name} seed {seed} failed (exit {process.returncode}); see "
                f"{logdir(logroot, experiment, seed)}.log"
            )
    return time.perf_counter() - started


def busy_seconds(spans: list[tuple[float, float]]) -> float:
    """The time covered by ``spans`` (first, last), overlaps counted once: the wall time of a
    run resumed from its checkpoint is the time its parts ran, not the pause between them."""
    total, end = 0.0, None
    for first, last in sorted(spans):
        if end is None or first > end:
            total, end = total + last - first, last
        elif last > end:
            total, end = total + last - end, last
    return total


def finished(
    experiment: Experiment, seeds: list[int], steps: int, logroot: str
) -> list[dict[str, Any]]:
    """Each seed's evaluations and wall time, for the runs under ``logroot`` that reached
    ``steps``. A run resumed from its checkpoint wrote one events file per part: an evaluation
    logged twice (the part stopped after it and before its checkpoint) counts as the later
    part's, and the wall time sums the parts' spans."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = []
    for seed in seeds:
        folder = logdir(logroot, experiment, seed)
        by_step: dict[int, tuple[float, float]] = {}  # step -> (wall time, value)
        spans: list[tuple[float, float]] = []
        # a run that went on past the budget (stopped by hand later) is read up to the budget:
        # binned values to it exactly, evaluations with the slack of a last episode past it
        limit = steps if experiment.bin else steps + experiment.every // 2
        for path in sorted(Path(folder).rglob("*tfevents*")) if os.path.isdir(folder) else []:
            events = EventAccumulator(str(path), size_guidance={"scalars": 0})
            events.Reload()
            first = last = None
            for tag in events.Tags()["scalars"]:
                for event in events.Scalars(tag):
                    if event.step > limit:
                        continue
                    first = event.wall_time if first is None else min(first, event.wall_time)
                    last = event.wall_time if last is None else max(last, event.wall_time)
                    step = int(event.step)
                    if tag == experiment.tag and event.wall_time >= by_step.get(step, (0.0,))[0]:
                        by_step[step] = (event.wall_time, float(event.value))
            if first is not None and last is not None:
                spans.append((first, last))
        points = sorted((step, value) for step, (_, value) in by_step.items())
        if experiment.bin:
            import plot_curves

            points = [(int(x), y) for x, y in plot_curves.bin_points(points, experiment.bin)]
        # the last episode may stop a few steps short of the budget, or run past it
        if not points or points[-1][0] < steps - experiment.every // 2:
            print(f"{experiment.name} seed {seed}: not finished under {folder}", flush=True)
            continue
        runs.append({
            "seed": seed,
            "final": points[-1][1],
            "best": (min if experiment.lower_is_better else max)(value for _, value in points),
            "wall_seconds": round(busy_seconds(spans), 1) if spans else None,
            "evaluations": [[step, round(value, 2)] for step, value in points],
        })  # fmt: skip
    return runs


def kept_runs(experiment: Experiment, path: str, seeds: list[int], steps: int
              ) -> tuple[list[dict[str, Any]], str]:  # fmt: skip
    """The seeds of the earlier record at ``path`` that are not among ``seeds``, with the
    commit they were measured at; the record must be of this experiment and budget."""
    from results import validate_record

    try:
        with open(path) as f:
            record = validate_record(json.load(f), where=path)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--keep {path}: not a readable record ({exc})") from exc
    budget = record["budget"]["env_steps" if experiment.unit == "steps" else "episodes"]
    mine = (experiment.algorithm, experiment.env, experiment.configuration, steps)
    theirs = (record["algorithm"], record["env"], record["configuration"], budget)
    if theirs != mine:
        raise SystemExit(
            f"--keep {path}: a record of {theirs} (algorithm, env, configuration, budget), not "
            f"of this run's {mine}; keep only seeds of the same experiment and budget"
        )
    kept = [dict(run) for run in record["figures"]["per_seed"] if run["seed"] not in seeds]
    return kept, str(record.get("commit") or "unknown")[:12]


def resolve_baseline(baseline: dict[str, Any] | None, seeds: list[int]
                     ) -> tuple[dict[str, Any] | None, list[str]]:  # fmt: skip
    """``baseline`` with its value, and notes on where the value came from: a ``record``
    baseline is the mean final figure of that published record over ``seeds`` (those of them it
    holds), a ``dataset`` baseline the dataset's mean episode return."""
    if baseline is None or "value" in baseline:
        return baseline, []
    if "record" in baseline:
        path = ROOT / "docs" / "results" / f"{baseline['record']}.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"baseline: cannot read the record {path} ({exc}); publish "
                             f"{baseline['record']} first") from exc  # fmt: skip
        finals = {run["seed"]: run["final"] for run in record["figures"]["per_seed"]}
        shared = [seed for seed in seeds if seed in finals]
        if not shared:
            raise SystemExit(f"baseline: {path} holds seeds {sorted(finals)}, none of this "
                             f"run's {seeds}; run those seeds of {baseline['record']} first")  # fmt: skip
        value = sum(finals[seed] for seed in shared) / len(shared)
        notes = []
        if shared != seeds:
            notes.append(f"the baseline is over seeds {', '.join(map(str, shared))}, the ones "
                         f"{baseline['record']} holds")  # fmt: skip
        return {"name": baseline["name"], "value": round(value, 2)}, notes
    if "dataset" in baseline:
        path = ROOT / baseline["dataset"] / "generation.json"
        try:
            made = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"baseline: cannot read {path} ({exc}); make the dataset with "
                             "scripts/make_offline_dataset.py") from exc  # fmt: skip
        how = made.get("algorithm", "made by scripts/make_offline_dataset.py")
        policy = made.get("policy") or {}
        if policy.get("eval_return") is not None:
            how += f", a policy that evaluates at {policy['eval_return']:,.0f}"
            if policy.get("steps_trained"):
                how += f" after {policy['steps_trained']:,} steps of training"
        note = (f"the dataset: {made['episodes']} episodes, {made['samples']:,} steps, "
                f"{how}; its mean episode return {made['mean_episode_return']:,.1f}")  # fmt: skip
        value = round(made["mean_episode_return"], 1)
        return {"name": baseline["name"], "value": value,
                "dataset": made.get("dataset_id", path.parent.name)}, [note]  # fmt: skip
    raise ValueError(f"baseline {baseline!r}: give a value, a record or a dataset")


def report(experiment: Experiment, runs: list[dict[str, Any]], args: argparse.Namespace,
           wall: float | None) -> None:  # fmt: skip
    import statistics

    from results import write_record

    kept: list[dict[str, Any]] = []
    if args.keep:
        kept, kept_commit = kept_runs(experiment, args.keep, args.seeds, args.steps)
    trained = [run["seed"] for run in runs]
    runs = sorted(runs + kept, key=lambda run: run["seed"])
    baseline, baseline_notes = resolve_baseline(experiment.baseline, [r["seed"] for r in runs])
    finals = [run["final"] for run in runs]
    unit = experiment.unit
    print(f"{experiment.algorithm} on {experiment.env}, {args.steps:,} {unit}: final "
          + ", ".join(f"{f:.1f}" for f in finals)
          + (f"; mean {statistics.mean(finals):.1f}" if finals else "")
          + (f" (sd {statistics.stdev(finals):.1f})" if len(finals) > 1 else "")
          + (f"; {baseline['name']}: {baseline['value']}" if baseline else ""),
          flush=True)  # fmt: skip
    if not runs:
        return
    curve = None
    if args.plot_dir:
        import plot_curves

        curve = os.path.join(args.plot_dir, f"{experiment.name}.svg")
        # every run's evaluations as recorded (a kept seed's logs may be gone; a run that went
        # on past the budget is drawn up to it)
        series = [
            (f"seed {run['seed']}", [(float(x), float(y)) for x, y in run.get("evaluations") or []])
            for run in runs
        ]
        plot_curves.write_svg(
            curve, series, f"{experiment.algorithm} on {experiment.env}",
            f"environment {unit}" if unit == "steps" else unit, experiment.metric.split(" (")[0],
            subtitle=experiment.configuration or "",
        )  # fmt: skip
        curve = os.path.relpath(curve, ROOT)
    notes = ([experiment.note] if experiment.note else []) + baseline_notes
    if kept:
        notes.append(
            "seed "
            + ", ".join(str(run["seed"]) for run in kept)
            + f" from an earlier run (commit {kept_commit}), kept from its record"
        )
    missing = len(args.seeds) - len(trained)
    if missing:
        notes.append(f"{missing} of {len(args.seeds)} seeds not finished")
    if getattr(args, "resume", False):
        notes.append("resumed from its checkpoint: each seed's wall time is the time its parts "
                     "ran, read from its TensorBoard events")  # fmt: skip
    elif wall is None:
        notes.append("recorded with --report: each seed's wall time is read from its "
                     "TensorBoard events, the whole experiment's is not known")  # fmt: skip
    if kept:  # this run's time covers its own seeds only: each seed's wall time stands
        wall = None
    # the command that repeats the run: where its logs, records and curves go does not matter
    argv = [experiment.name]
    if args.seeds != list(experiment.seeds):
        argv += ["--seeds", *map(str, args.seeds)]
    if kept:
        argv += ["--keep", f"docs/results/{experiment.name}.json"]
    if args.steps != experiment.steps:
        argv += ["--steps", str(args.steps)]
    write_record(
        os.path.join(args.record_dir or args.logroot, f"{experiment.name}.json"),
        algorithm=experiment.algorithm,
        page=experiment.page,
        env=experiment.env,
        configuration=experiment.configuration,
        metric=experiment.metric,
        command=shlex.join(["python", "scripts/quality.py", *argv]),
        budget_steps=args.steps if unit == "steps" else None,
        budget_episodes=args.steps if unit == "episodes" else None,
        per_seed=runs,
        wall_seconds=wall,
        baseline=baseline,
        curve=curve,
        note="; ".join(notes) or None,
        commit=getattr(args, "commit", None),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiments", nargs="*", help="names from --list")
    parser.add_argument("--list", action="store_true", help="the experiments and their commands")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: the experiment's")
    parser.add_argument("--steps", type=int, help="the budget; default: the experiment's")
    parser.add_argument("--parallel", type=int, default=1, help="seeds trained at once")
    parser.add_argument("--logroot", default="/tmp/quality")
    parser.add_argument("--record_dir", default=None, help="default: --logroot")
    parser.add_argument("--plot_dir", default=None, help="write <experiment>.svg curves here")
    parser.add_argument("--report", action="store_true", help="record finished runs, train none")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue each seed from the checkpoint its example left under --logroot (a run "
        "stopped before its budget, or given a larger --steps); seeds not started start",
    )
    parser.add_argument(
        "--keep",
        metavar="RECORD",
        help="an earlier record of the experiment: its seeds that this run does not train are "
        "kept in the new record and curve (one experiment at a time)",
    )
    args = parser.parse_args(argv)
    if args.list or not args.experiments:
        for name, experiment in EXPERIMENTS.items():
            command = experiment.command(experiment.seeds[0], "LOGDIR", experiment.steps)
            print(f"{name}: {experiment.steps:,} {experiment.unit}, seeds "
                  f"{list(experiment.seeds)}\n    {shlex.join(command)}")  # fmt: skip
        return
    if args.report and args.resume:
        raise SystemExit("--report records without training and --resume trains: give one")
    if args.keep and len(args.experiments) != 1:
        raise SystemExit("--keep takes the record of one experiment; name exactly one")
    unknown = [name for name in args.experiments if name not in EXPERIMENTS]
    if unknown:
        raise SystemExit(f"unknown experiment {unknown[0]!r}; --list shows them: "
                         + ", ".join(EXPERIMENTS))  # fmt: skip
    for name in args.experiments:
        experiment = EXPERIMENTS[name]
        run_args = argparse.Namespace(**vars(args))
        run_args.seeds = args.seeds or list(experiment.seeds)
        run_args.steps = args.steps or experiment.steps
        if args.keep:  # a record that cannot be kept is said before the training, not after
            kept_runs(experiment, args.keep, run_args.seeds, run_args.steps)
        wall, run_args.commit = None, None
        if not args.report:  # the record names the code that trained, not a later HEAD
            from results import current_commit

            run_args.commit = current_commit()
            wall = train(experiment, run_args.seeds, run_args.steps, args.logroot, args.parallel,
                         resume=args.resume)  # fmt: skip
            if args.resume:  # the whole experiment's time is that of its parts
                wall = None
        runs = finished(experiment, run_args.seeds, run_args.steps, args.logroot)
        report(experiment, runs, run_args, wall)


if __name__ == "__main__":
    main()
