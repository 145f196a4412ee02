"""QMIX on cooperative multi-agent tasks through ``parl.env.multiagent_env.MAenv``: MPE's
simple_spread by default, or level-based foraging (whose action masks change every step).

    python examples/QMIX/train.py --env simple_spread --seed 0
    python examples/QMIX/train.py --env Foraging-8x8-2p-2f-coop-v3 --seed 0
    python examples/QMIX/train.py --resume --save_rpm       # continue where it stopped
    tensorboard --logdir train_log

Each agent's network input is its observation, its last action (one-hot) and its id (one-hot),
as in PARL's QMIX example; the team reward is the mean of the agents' rewards. Episodes are
stored whole, one slot longer than the episode limit: an episode cut by the limit keeps its
last observation there, so its last transition bootstraps from it instead of counting as a
terminal one. A checkpoint (networks, optimizer, random states, counters, exploration, and with
``--save_rpm`` the episode memory) is written after each evaluation and at the end;
``--resume`` continues exactly.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import torch
from qmix_agent import QMixAgent
from qmix_model import FCModel, QMixerModel, RNNModel
from tqdm import tqdm

from parl.algorithms import QMIX
from parl.core.checkpoint import load_file
from parl.env.multiagent_env import MAenv
from parl.env.multiagent_scenarios import check_env_id
from parl.utils import logger, set_seed, summary
from parl.utils.interrupts import ctrl_c_deferred
from parl.utils.train_flags import (
    add_common_flags,
    add_legacy_dynamics_flag,
    example_parser,
    fraction,
    non_negative_int,
    positive_float,
    positive_int,
    refuse_as_usage,
    refuse_other_flags,
    refuse_resume_without_checkpoint,
)

EVAL_EPISODES = 10
EVAL_SEED_OFFSET = 10_000
KEYS = ("state", "actions", "reward", "terminated", "obs", "available_actions", "filled")
# flags a resumed run must share with the run that wrote the checkpoint (their defaults for a
# checkpoint that does not record them)
CHECKED_FLAGS = {
    "optimizer": "rmsprop", "standardise_rewards": False, "agent": "gru", "last_action": True,
    "legacy_dynamics": False, "exploration_draws": "team",
}  # fmt: skip


def checked_flags(args: Any) -> dict[str, Any]:
    """``CHECKED_FLAGS`` and ``--env``: another env's checkpoint would load wherever its networks
    have the same shapes (taken as this run's env where a checkpoint does not record it)."""
    return {**CHECKED_FLAGS, "env": args.env}


class EpisodeMemory:
    """The last ``size`` episodes, each ``slots`` steps long (padding: ``filled = 1``)."""

    def __init__(self, size: int, slots: int, n_agents: int, obs_dim: int, state_dim: int,
                 n_actions: int) -> None:  # fmt: skip
        shapes = {
            "state": (state_dim,), "actions": (n_agents,), "reward": (1,), "terminated": (1,),
            "obs": (n_agents, obs_dim), "available_actions": (n_agents, n_actions),
            "filled": (1,),
        }  # fmt: skip
        self.data = {
            key: np.zeros((size, slots, *shape), np.float32) for key, shape in shapes.items()
        }
        self.size, self.count, self.next = size, 0, 0

    def add(self, episode: dict[str, np.ndarray]) -> None:
        for key in KEYS:
            self.data[key][self.next] = episode[key]
        self.next = (self.next + 1) % self.size
        self.count = min(self.count + 1, self.size)

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """``batch_size`` episodes drawn uniformly (numpy's global generator)."""
        index = np.random.randint(self.count, size=batch_size)
        return {key: value[index] for key, value in self.data.items()}

    def save(self, path: str) -> None:
        tmp = path + ".tmp.npz"
        np.savez(tmp, count=self.count, next=self.next, **self.data)
        os.replace(tmp, path)

    def load(self, path: str) -> None:
        """Replace the episodes with those ``save`` wrote. A memory of another ``size`` (a
        resumed run given another ``--buffer_size``) gets them in the order they were added,
        the newest ``size`` of them when there are more."""
        with np.load(path) as saved:
            count, next_, saved_size = int(saved["count"]), int(saved["next"]), len(saved["filled"])
            for key in KEYS:
                if saved[key].shape[1:] != self.data[key].shape[1:]:
                    raise ValueError(
                        f"{path}: its {key!r} episodes have shape {saved[key].shape[1:]}, this "
                        f"run's {self.data[key].shape[1:]}; resume with the flags of the run "
                        "that wrote it"
                    )
            if saved_size == self.size:
                for key in KEYS:
                    self.data[key][...] = saved[key]
                self.count, self.next = count, next_
                return
            oldest = next_ if count == saved_size else 0  # a full memory wrapped around
            kept = min(count, self.size)
            order = (oldest + np.arange(count - kept, count)) % saved_size
            for key in KEYS:
                self.data[key][:kept] = saved[key][order]
                self.data[key][kept:] = 0.0
            self.count, self.next = kept, kept % self.size


def stack_obs(obs_n: list[np.ndarray], width: int) -> np.ndarray:
    """``(n_agents, width)``: the agents' observations, a shorter one zero-padded (in
    ``simple_tag``, ``simple_crypto`` or ``simple_world_comm`` agents see different amounts)."""
    out = np.zeros((len(obs_n), width), np.float32)
    for i, obs in enumerate(obs_n):
        out[i, : np.size(obs)] = np.ravel(obs)
    return out


def input_width(env: MAenv, last_action: bool) -> int:
    """The agent network's input width: observation, last action (unless left out), id."""
    return env.get_env_info()["obs_shape"] + (env.n_actions if last_action else 0) + env.n


def agent_inputs(
    env: MAenv, obs_n: list[np.ndarray], last_actions: np.ndarray, last_action: bool = True
) -> np.ndarray:
    """``(n_agents, input_width)``: observation (padded to the longest), last action (one-hot,
    unless ``last_action`` is false), id (one-hot)."""
    n, n_actions = len(obs_n), env.n_actions
    parts = [stack_obs(obs_n, env.get_env_info()["obs_shape"])]
    if last_action:
        last = np.zeros((n, n_actions), np.float32)
        taken = last_actions >= 0
        last[np.flatnonzero(taken), last_actions[taken]] = 1.0
        parts.append(last)
    return np.concatenate([*parts, np.eye(n, dtype=np.float32)], axis=1)


def run_episode(
    env: MAenv, agent: QMixAgent, seed: int, explore: bool, last_action: bool = True
) -> tuple[dict[str, np.ndarray], float, int]:
    """One episode; returns it as ``slots = episode limit + 1`` steps, its team return and its
    length."""
    slots, n = env.max_step + 1, env.n
    episode = {
        "state": np.zeros((slots, env.state_shape), np.float32),
        "actions": np.zeros((slots, n), np.float32),
        "reward": np.zeros((slots, 1), np.float32),
        "terminated": np.ones((slots, 1), np.float32),
        "obs": np.zeros((slots, n, input_width(env, last_action)), np.float32),
        "available_actions": np.zeros((slots, n, env.n_actions), np.float32),
        "filled": np.ones((slots, 1), np.float32),
    }
    obs_n = env.reset(seed=seed)
    agent.reset_agent()
    last = np.full(n, -1)
    total, t, done = 0.0, 0, False
    while not done:
        inputs = agent_inputs(env, obs_n, last, last_action)
        avail = env.get_avail_actions().astype(np.float32)
        actions = agent.sample(inputs, avail) if explore else agent.predict(inputs, avail)
        state = env.state()
        obs_n, reward_n, done_n, _ = env.step([int(a) for a in actions])
        reward, done = float(np.mean(reward_n)), any(done_n)
        ended = any(env.terminations)
        for key, value in (
            ("state", state), ("actions", actions), ("reward", reward), ("terminated", ended),
            ("obs", inputs), ("available_actions", avail), ("filled", 0.0),
        ):  # fmt: skip
            episode[key][t] = value
        total, last, t = total + reward, np.asarray(actions), t + 1
    if not any(env.terminations):  # cut by the limit: the next step is real, not learned from
        avail = env.get_avail_actions().astype(np.float32)
        episode["state"][t] = env.state()
        episode["obs"][t] = agent_inputs(env, obs_n, last, last_action)
        episode["available_actions"][t] = avail
        episode["actions"][t] = avail.argmax(axis=1)
        episode["terminated"][t] = 0.0
        episode["filled"][t] = 0.0
    return episode, total, t


def evaluate(
    env: MAenv, agent: QMixAgent, episodes: int, seed: int, last_action: bool = True
) -> float:
    returns = [
        run_episode(env, agent, seed + i, explore=False, last_action=last_action)[1]
        for i in range(episodes)
    ]
    return float(np.mean(returns))


def build_agent(args: argparse.Namespace, env: MAenv) -> QMixAgent:
    network = {"gru": RNNModel, "fc": FCModel}[args.agent]
    agent_model = network(input_width(env, args.last_action), env.n_actions, args.rnn_hidden_dim)
    mixer = QMixerModel(env.n, env.state_shape, args.mixing_embed_dim)
    algorithm = QMIX(
        agent_model, mixer, double_q=True, gamma=args.gamma, lr=args.lr,
        clip_grad_norm=args.clip_grad_norm, optimizer=args.optimizer, device=args.device,
    )  # fmt: skip
    decay = (1.0 - args.min_exploration) / args.exploration_steps
    return QMixAgent(
        algorithm, 1.0, args.min_exploration, decay, args.update_target_interval,
        standardise_rewards=args.standardise_rewards, exploration_draws=args.exploration_draws,
    )  # fmt: skip


def save_checkpoint(args, agent, memory, counters) -> None:  # type: ignore[no-untyped-def]
    extra = {
        "exploration": agent.exploration, "global_step": agent.global_step,
        "reward_stats": agent.reward_stats_state(),
        # without --save_rpm, a memory file on disk is from an earlier checkpoint; with it, the
        # memory written with this checkpoint, by its count and next slot (a resume can tell
        # it from an older file: a run killed between the two)
        "rpm_written": bool(args.save_rpm),
        "rpm": [memory.count, memory.next] if args.save_rpm else None,
        **{flag: getattr(args, flag) for flag in checked_flags(args)},
    }  # fmt: skip
    with ctrl_c_deferred():
        agent.save_checkpoint(os.path.join(args.logdir, "checkpoint.pt"), counters, extra)
        if args.save_rpm:
            memory.save(os.path.join(args.logdir, "rpm.npz"))


def restore_checkpoint(args, agent, memory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    path = os.path.join(args.logdir, "checkpoint.pt")
    # an optimizer's state loads into either class, and another network would not load: name
    # the flags that differ before anything is restored
    written = load_file(path).get("extra", {})
    refuse_other_flags(make_parser(), args, written, checked_flags(args), args.logdir)
    counters, extra = agent.restore_checkpoint(path)
    agent.exploration, agent.global_step = extra["exploration"], extra["global_step"]
    agent.load_reward_stats_state(extra.get("reward_stats"))
    rpm_path = os.path.join(args.logdir, "rpm.npz")
    if extra.get("rpm_written", True) is False and os.path.exists(rpm_path):
        logger.warning(
            "%s is from an earlier checkpoint (the last one was written without --save_rpm): "
            "resuming with an empty episode memory",
            rpm_path,
        )
    elif os.path.exists(rpm_path):
        with np.load(rpm_path) as saved:
            held = [int(saved["count"]), int(saved["next"])]
        if extra.get("rpm", held) != held:
            raise RuntimeError(
                f"{rpm_path} (count and next slot {held}) is not the memory written with {path} "
                f"({extra['rpm']}): the run was stopped while writing them; move rpm.npz away "
                "to resume with an empty memory, or start again without --resume"
            )
        memory.load(rpm_path)
    else:
        logger.warning("no episode memory in %s: resuming with an empty one", args.logdir)
    logger.info("resumed from %s at step %d", args.logdir, counters["total_steps"])
    return dict(counters)


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    logger.info("QMIX, env %s, seed %d", args.env, args.seed)
    env, eval_env = (MAenv(args.env, legacy_dynamics=args.legacy_dynamics) for _ in range(2))
    set_seed(args.seed)
    agent = build_agent(args, env)
    memory = EpisodeMemory(
        args.buffer_size, env.max_step + 1, env.n, input_width(env, args.last_action),
        env.state_shape, env.n_actions,
    )  # fmt: skip
    summary.set_dir(args.logdir)
    c = {"total_steps": 0, "episodes": 0, "test_flag": 0}
    if args.resume:
        c = restore_checkpoint(args, agent, memory)
    avg_return = float("nan")
    stop_at = min(args.train_total_steps, args.stop_after_steps or args.train_total_steps)
    bar = tqdm(
        total=args.train_total_steps, initial=int(c["total_steps"]), disable=not args.progress
    )
    while c["total_steps"] < stop_at:
        # every episode has its own seed: a resumed run meets the same episodes
        episode, episode_return, steps = run_episode(
            env, agent, args.seed * 1_000_000 + int(c["episodes"]), explore=True,
            last_action=args.last_action,
        )  # fmt: skip
        memory.add(episode)
        c["total_steps"] += steps
        c["episodes"] += 1
        bar.update(steps)
        summary.add_scalar("train/episode_return", episode_return, c["total_steps"])
        if memory.count >= args.batch_size:
            loss, td_error = agent.learn(memory.sample(args.batch_size))
            if agent.global_step % 100 == 0:
                summary.add_scalar("train/loss", loss, c["total_steps"])
                summary.add_scalar("train/td_error", td_error, c["total_steps"])
                summary.add_scalar("train/exploration", agent.exploration, c["total_steps"])
        if c["total_steps"] // args.test_every_steps >= c["test_flag"]:
            while c["total_steps"] // args.test_every_steps >= c["test_flag"]:
                c["test_flag"] += 1
            avg_return = evaluate(
                eval_env, agent, args.eval_episodes, args.seed + EVAL_SEED_OFFSET, args.last_action
            )
            summary.add_scalar("eval/episode_return", avg_return, c["total_steps"])
            bar.set_postfix(train=f"{episode_return:.1f}", eval=f"{avg_return:.1f}")
            save_checkpoint(args, agent, memory, c)
    bar.close()
    save_checkpoint(args, agent, memory, c)
    agent.save(os.path.join(args.logdir, "model.ckpt"))
    agent.save(os.path.join(args.logdir, "mixer.ckpt"), model=agent.alg.qmixer_model)
    final = evaluate(
        eval_env, agent, args.eval_episodes, args.seed + EVAL_SEED_OFFSET, args.last_action
    )
    logger.info(
        "done: %d steps; evaluation over %d episodes: %.2f",
        c["total_steps"], args.eval_episodes, final,
    )  # fmt: skip
    summary.flush()
    return final


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="simple_spread",
        gym_env=False,
        defaults={
            "train_total_steps": 2_000_000,
            "test_every_steps": 20_000,
            "eval_episodes": EVAL_EPISODES,
            "logdir": os.path.join("train_log", "QMIX"),
        },
        skip=["xparl_addr"],
        aliases={"no_progress": ["--no_tqdm", "--no-progress"]},
        help={"env": "an MPE scenario (simple_spread, ...) or a foraging id"},
    )
    add_legacy_dynamics_flag(parser)
    parser.add_argument("--batch_size", default=32, type=positive_int, help="episodes per update")
    parser.add_argument(
        "--buffer_size", default=5000, type=positive_int, help="episodes kept for replay"
    )
    parser.add_argument(
        "--lr", default=5e-4, type=positive_float, help="the optimizer's learning rate"
    )
    parser.add_argument(
        "--optimizer", default="rmsprop", choices=["rmsprop", "adam"],
        help="RMSprop (PARL's) or Adam (EPyMARL's)",
    )  # fmt: skip
    parser.add_argument(
        "--standardise_rewards", action="store_true",
        help="learn the team rewards standardised by their running mean and deviation "
        "(EPyMARL's default)",
    )  # fmt: skip
    parser.add_argument("--gamma", default=0.99, type=fraction, help="discount factor")
    parser.add_argument(
        "--clip_grad_norm",
        default=10.0,
        type=positive_float,
        help="clip the gradients' global norm",
    )
    parser.add_argument(
        "--exploration_steps", default=100_000, type=positive_int,
        help="environment steps over which epsilon falls from 1 to --min_exploration",
    )  # fmt: skip
    parser.add_argument("--min_exploration", default=0.05, type=fraction, help="final epsilon")
    parser.add_argument(
        "--exploration_draws", default="team", choices=["team", "agent"],
        help="team: one epsilon draw sends every agent to a random action at once (PARL's); "
        "agent: each agent draws for itself (PyMARL's and EPyMARL's)",
    )  # fmt: skip
    parser.add_argument(
        "--update_target_interval", default=200, type=positive_int,
        help="updates between two copies into the target networks",
    )  # fmt: skip
    parser.add_argument(
        "--agent", default="gru", choices=["gru", "fc"],
        help="the agents' network: a GRU (PARL's) or feed-forward (EPyMARL's QMIX)",
    )  # fmt: skip
    parser.add_argument(
        "--no_last_action", dest="last_action", action="store_false",
        help="leave the last action out of the agents' inputs (EPyMARL's QMIX)",
    )  # fmt: skip
    parser.add_argument(
        "--rnn_hidden_dim", default=64, type=positive_int, help="the agents' network width"
    )
    parser.add_argument("--mixing_embed_dim", default=32, type=positive_int, help="mixer width")
    parser.add_argument("--save_rpm", action="store_true", help="checkpoint the episode memory too")
    parser.add_argument(
        "--stop_after_steps", type=non_negative_int, default=0,
        help="end this run early (at an episode's end), as if interrupted",
    )  # fmt: skip
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.batch_size > args.buffer_size:  # updates start once the memory holds a batch
        parser.error(
            f"--batch_size {args.batch_size} is more episodes than --buffer_size "
            f"{args.buffer_size} keeps, so no update would ever run: raise --buffer_size or "
            "lower --batch_size"
        )
    refuse_as_usage(
        parser,
        lambda: check_env_id(args.env, legacy_dynamics=args.legacy_dynamics, importable=True),
    )
    refuse_resume_without_checkpoint(parser, args.resume, args.logdir)
    return args


if __name__ == "__main__":
    main()
