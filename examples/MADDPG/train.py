"""MADDPG on MPE's multi-agent scenarios (simple_speaker_listener by default), PARL 2.x's example
made resumable.

    python examples/MADDPG/train.py --env simple_speaker_listener --seed 0
    python examples/MADDPG/train.py --env simple_spread --continuous_actions
    python examples/MADDPG/train.py --resume --save_rpm       # continue where it stopped
    tensorboard --logdir train_log

The env is ``parl.env.multiagent_env.MAenv`` (one list entry per agent). Every agent has its own
``MADDPG``, model and replay memory; all of them act at every step, and each learns every
``--learn_every`` steps from a batch of the same transitions of every agent. Episode ``k`` is
seeded with ``--seed + k``, so a run is reproducible and a resumed run continues exactly. A
checkpoint (models, optimizers, random states, counters, and with ``--save_rpm`` the replay
memories) is written after each evaluation and at the end; ``--resume`` continues from it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import torch
from agent import MAAgent
from model import MAModel
from tqdm import tqdm

from parl.algorithms import MADDPG
from parl.core.checkpoint import load_file
from parl.env.multiagent_env import MAenv
from parl.env.multiagent_scenarios import check_env_id
from parl.utils import ReplayMemory, logger, set_seed, summary
from parl.utils.interrupts import ctrl_c_deferred
from parl.utils.train_flags import (
    add_common_flags,
    add_legacy_dynamics_flag,
    example_parser,
    non_negative_int,
    positive_int,
    refuse_as_usage,
    refuse_other_flags,
    refuse_resume_without_checkpoint,
)

CRITIC_LR = 0.01  # learning rate of the critics
ACTOR_LR = 0.01  # learning rate of the actors
GAMMA = 0.95  # reward discount factor
TAU = 0.01  # soft target update rate
EVAL_EPISODES = 3
# flags a resumed run must share with the run that wrote the checkpoint (their values for a
# checkpoint that does not record them)
CHECKED_FLAGS = {"continuous_actions": False, "time_limit_as_terminal": False,
                 "legacy_dynamics": False}  # fmt: skip


def checked_flags(args: Any) -> dict[str, Any]:
    """``CHECKED_FLAGS`` and ``--env``: another env's checkpoint would load wherever its networks
    have the same shapes (taken as this run's env where a checkpoint does not record it)."""
    return {**CHECKED_FLAGS, "env": args.env}


def build_agents(args: argparse.Namespace, env: MAenv) -> list[MAAgent]:
    critic_in_dim = sum(env.obs_shape_n) + sum(env.act_shape_n)
    agents = []
    for i in range(env.n):
        model = MAModel(
            env.obs_shape_n[i], env.act_shape_n[i], critic_in_dim, args.continuous_actions
        )
        algorithm = MADDPG(
            model,
            agent_index=i,
            act_space=env.action_space,
            gamma=GAMMA,
            tau=TAU,
            actor_lr=ACTOR_LR,
            critic_lr=CRITIC_LR,
            device=args.device,
        )
        agent = MAAgent(
            algorithm,
            agent_index=i,
            obs_dim_n=env.obs_shape_n,
            act_dim_n=env.act_shape_n,
            batch_size=args.batch_size,
            memory_size=args.memory_size,
            learn_every=args.learn_every,
            warmup_size=args.warmup_size,
        )
        agents.append(agent)
    return agents


def env_actions(env: MAenv, action_n: list[np.ndarray]) -> list[Any]:
    """The actions ``env.step`` gets: the agents' own, except a discrete one whose argmax is not
    available now (foraging forbids a move into a wall or a load with no food beside), which
    becomes the first available action (none): what lbforaging itself does with a forbidden
    one. MPE allows every action, so nothing changes there."""
    if env.continuous_actions:
        return list(action_n)
    out: list[Any] = []
    for i, action in enumerate(action_n):
        avail = env.get_avail_agent_actions(i)
        out.append(action if avail[int(np.argmax(action))] else int(np.argmax(avail)))
    return out


def run_episode(
    env: MAenv, agents: list[MAAgent], seed: int, time_limit_as_terminal: bool = False
) -> tuple[float, list[float], int]:
    """One exploring episode; every agent stores its transitions and learns at every step.

    The last step of an episode cut at its length is stored as non-terminal (the critic
    bootstraps there), unless ``time_limit_as_terminal``: then it is stored as PARL's MPE runs
    stored it, as terminal (PettingZoo 1.17 reported ``done`` at ``max_cycles``)."""
    obs_n = env.reset(seed=seed)
    done, steps = False, 0
    agents_reward = [0.0] * env.n
    while not done:
        steps += 1
        action_n = [agent.sample(obs) for agent, obs in zip(agents, obs_n, strict=True)]
        next_obs_n, reward_n, done_n, _ = env.step(env_actions(env, action_n))
        done = all(done_n)
        terminal_n = done_n if time_limit_as_terminal else env.terminations
        for i, agent in enumerate(agents):
            agent.add_experience(obs_n[i], action_n[i], reward_n[i], next_obs_n[i], terminal_n[i])
            agents_reward[i] += reward_n[i]
        obs_n = next_obs_n
        for agent in agents:
            critic_loss = agent.learn(agents)
            if critic_loss is not None and agent.global_train_step % 1000 == 0:
                summary.add_scalar(
                    f"train/critic_loss_agent{agent.agent_index}",
                    critic_loss,
                    agent.global_train_step,
                )
    return sum(agents_reward), agents_reward, steps


def run_evaluate_episodes(env: MAenv, agents: list[MAAgent], episodes: int, seed: int) -> float:
    """The mean over ``episodes`` greedy episodes of the team's total reward."""
    totals = []
    for k in range(episodes):
        obs_n, done, total = env.reset(seed=seed + k), False, 0.0
        while not done:
            action_n = [agent.predict(obs) for agent, obs in zip(agents, obs_n, strict=True)]
            obs_n, reward_n, done_n, _ = env.step(env_actions(env, action_n))
            done = all(done_n)
            total += sum(reward_n)
        totals.append(total)
    return float(np.mean(totals))


def save_checkpoint(args: argparse.Namespace, agents: list[MAAgent], counters: Any) -> None:
    flags = {flag: getattr(args, flag) for flag in checked_flags(args)}
    # without --save_rpm, memory files on disk are from an earlier checkpoint: a resume must
    # know not to take them for this one's
    flags["rpm_written"] = bool(args.save_rpm)
    with ctrl_c_deferred():
        for i, agent in enumerate(agents):
            own = {**counters, "global_train_step": agent.global_train_step}
            path = os.path.join(args.logdir, f"checkpoint_agent{i}.pt")
            # the memory written with it, by its size and next row: a resume can tell it from
            # an older file (a run killed between the two)
            memory = agent.rpm.stamp() if args.save_rpm else None
            agent.save_checkpoint(path, own, {**flags, "rpm": memory})
            if args.save_rpm:
                agent.rpm.save(os.path.join(args.logdir, f"rpm_agent{i}.npz"))


def restore_checkpoint(args: argparse.Namespace, agents: list[MAAgent]) -> dict[str, Any]:
    # another episode treatment or dynamics would load and silently change the run
    written = load_file(os.path.join(args.logdir, "checkpoint_agent0.pt")).get("extra", {})
    refuse_other_flags(make_parser(), args, written, checked_flags(args), args.logdir)
    counters: dict[str, Any] = {}
    memories: list[list[int] | None] = []  # each agent's [size, next row], None if none
    for i, agent in enumerate(agents):
        # every file holds the same random states (saved together): the last one restored wins
        path = os.path.join(args.logdir, f"checkpoint_agent{i}.pt")
        own, extra = agent.restore_checkpoint(path)
        agent.global_train_step = int(own["global_train_step"])
        own = {k: v for k, v in own.items() if k != "global_train_step"}
        if i > 0 and own != counters:  # a run killed while it wrote them (SIGKILL, power loss)
            raise RuntimeError(
                f"the checkpoint files in {args.logdir} are from different points of the run "
                f"(agent 0 at {counters}, agent {i} at {own}): it was stopped while writing "
                "them; start again without --resume"
            )
        counters = own
        rpm_path = os.path.join(args.logdir, f"rpm_agent{i}.npz")
        stale = extra.get("rpm_written", True) is False and os.path.exists(rpm_path)
        if stale:
            logger.warning(
                "%s is from an earlier checkpoint (the last one was written without "
                "--save_rpm): agent %d resumes with an empty memory",
                rpm_path,
                i,
            )
        if os.path.exists(rpm_path) and not stale:
            held = ReplayMemory.saved_stamp(rpm_path)
            if extra.get("rpm", held) != held:
                raise RuntimeError(
                    f"{rpm_path} (size and next row {held}) is not the memory written with "
                    f"{path} ({extra['rpm']}): the run was stopped while writing them; move the "
                    "rpm_agent*.npz files away to resume with empty memories, or start again "
                    "without --resume"
                )
            agent.rpm.load(rpm_path)
            memories.append(agent.rpm.stamp())
        else:
            memories.append(None)
            if not stale:
                logger.warning(
                    "no replay memory in %s: agent %d resumes with an empty one", rpm_path, i
                )
    # the agents append together and learn from the same rows of every memory: memories of
    # different lengths (a run killed between two of them) would give some agents empty rows
    if any(m != memories[0] for m in memories):
        held = ", ".join(
            f"agent {i}: {'none' if m is None else f'{m[0]} transitions'}"
            for i, m in enumerate(memories)
        )
        raise RuntimeError(
            f"the replay memories in {args.logdir} are from different points of the run "
            f"({held}): it was stopped while writing them; move the rpm_agent*.npz files away "
            "to resume with empty memories, or start again without --resume"
        )
    logger.info("resumed from %s at episode %d", args.logdir, counters["episodes"])
    return counters


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    logger.info(
        "MADDPG, env %s (continuous actions: %s), seed %d",
        args.env,
        args.continuous_actions,
        args.seed,
    )
    env, eval_env = (
        MAenv(args.env, args.continuous_actions, legacy_dynamics=args.legacy_dynamics),
        MAenv(args.env, args.continuous_actions, legacy_dynamics=args.legacy_dynamics),
    )
    set_seed(args.seed)
    agents = build_agents(args, env)
    summary.set_dir(args.logdir)
    c: dict[str, Any] = {"episodes": 0, "total_steps": 0}
    if args.resume:
        c = restore_checkpoint(args, agents)
    eval_seed = args.seed + 10_000_000
    stop_at = min(args.max_episodes, args.stop_after_episodes or args.max_episodes)
    bar = tqdm(total=args.max_episodes, initial=int(c["episodes"]), disable=not args.progress)
    while c["episodes"] < stop_at:
        ep_reward, agents_reward, steps = run_episode(
            env, agents, args.seed + c["episodes"], args.time_limit_as_terminal
        )
        c["episodes"] += 1
        c["total_steps"] += steps
        bar.update(1)
        summary.add_scalar("train/episode_reward_wrt_episode", ep_reward, c["episodes"])
        summary.add_scalar("train/episode_reward_wrt_step", ep_reward, c["total_steps"])
        if c["episodes"] % args.test_every_episodes == 0:
            avg_reward = run_evaluate_episodes(eval_env, agents, args.eval_episodes, eval_seed)
            summary.add_scalar("eval/episode_reward", avg_reward, c["episodes"])
            bar.set_postfix(train=f"{ep_reward:.1f}", eval=f"{avg_reward:.1f}")
            logger.info(
                "episode %d, steps %d: evaluation over %d episodes: %.2f (agents in training: %s)",
                c["episodes"],
                c["total_steps"],
                args.eval_episodes,
                avg_reward,
                [round(r, 2) for r in agents_reward],
            )
            save_checkpoint(args, agents, c)
    bar.close()
    save_checkpoint(args, agents, c)
    for i, agent in enumerate(agents):
        agent.save(os.path.join(args.logdir, f"agent_{i}.ckpt"))
    final = run_evaluate_episodes(eval_env, agents, args.eval_episodes, eval_seed)
    logger.info(
        "done: %d episodes, %d steps; evaluation over %d episodes: %.2f",
        c["episodes"],
        c["total_steps"],
        args.eval_episodes,
        final,
    )
    summary.flush()
    return final


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="simple_speaker_listener",
        gym_env=False,
        defaults={"eval_episodes": EVAL_EPISODES, "logdir": os.path.join("train_log", "MADDPG")},
        skip=["train_total_steps", "test_every_steps", "xparl_addr"],
        help={"env": "MPE scenario of parl.env.multiagent_env.MAenv (PARL's names) or foraging id"},
    )
    parser.add_argument(
        "--continuous_actions",
        action="store_true",
        help="continuous actions (a squashed Gaussian) instead of discrete ones",
    )
    parser.add_argument(
        "--time_limit_as_terminal",
        action="store_true",
        help="store an episode's last step, cut at its length, as terminal, as PARL's MPE runs "
        "did (by default the critic bootstraps there)",
    )
    add_legacy_dynamics_flag(parser)
    parser.add_argument(
        "--max_episodes", type=positive_int, default=25_000, help="episodes to train for"
    )
    parser.add_argument(
        "--test_every_episodes",
        type=positive_int,
        default=1000,
        help="evaluate and write a checkpoint every this many episodes",
    )
    parser.add_argument(
        "--batch_size", type=positive_int, default=1024, help="transitions per update"
    )
    parser.add_argument(
        "--learn_every",
        type=positive_int,
        default=100,
        help="env steps between two updates of an agent",
    )
    parser.add_argument(
        "--warmup_size",
        type=non_negative_int,
        default=None,
        help="transitions stored before learning starts (default: batch_size * 25, PARL's)",
    )
    parser.add_argument(
        "--memory_size", type=positive_int, default=int(1e5), help="replay memory size per agent"
    )
    parser.add_argument(
        "--save_rpm", action="store_true", help="checkpoint the replay memories too"
    )
    parser.add_argument(
        "--stop_after_episodes",
        type=non_negative_int,
        default=0,
        help="end this run early, as if interrupted",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    warmup = args.batch_size * 25 if args.warmup_size is None else args.warmup_size
    if warmup >= args.memory_size:  # learning starts once a memory holds more than the warm-up
        parser.error(
            f"--memory_size {args.memory_size} holds no more than the warm-up of {warmup} "
            f"transitions{'' if args.warmup_size is not None else ' (--batch_size * 25)'}, so "
            "no agent would ever learn: raise --memory_size or lower --warmup_size"
        )
    refuse_as_usage(
        parser,
        lambda: check_env_id(
            args.env,
            continuous_actions=args.continuous_actions,
            legacy_dynamics=args.legacy_dynamics,
            importable=True,
        ),
    )
    refuse_resume_without_checkpoint(parser, args.resume, args.logdir, "checkpoint_agent0.pt")
    return args


if __name__ == "__main__":
    main()
