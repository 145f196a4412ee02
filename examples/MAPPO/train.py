"""MAPPO on the multi-agent particle worlds (``simple_speaker_listener`` by default, or
``--env simple_spread``), one MAPPO per agent with a centralised critic, the envs stepped in
actors; PARL's MAPPO benchmark, on ``parl.env.multiagent_env.MAenv``.

    python examples/MAPPO/train.py                                  # simple_speaker_listener
    python examples/MAPPO/train.py --env simple_spread --env_num 64 --num_workers 2
    python examples/MAPPO/train.py --resume
    tensorboard --logdir train_log

Every rollout is one episode of each env (25 steps), reset with a seed derived from the run's
seed and the rollout's index, so a resumed run sees the envs a straight run would. Every
``--test_every_steps`` the greedy policies are evaluated and a checkpoint per agent (models,
PopArt statistics, optimizers, random states, counters) is written; ``--resume`` continues
from it.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from agent import MAPPOAgent
from buffer import AgentBuffer
from model import MAPPOModel
from tqdm import tqdm

import parl
from parl.algorithms import MAPPO
from parl.core.checkpoint import load_file
from parl.env.multiagent_env import MAenv
from parl.env.multiagent_scenarios import check_env_id
from parl.env.multiagent_vector_env import MultiAgentVectorEnv
from parl.utils import logger, set_seed, summary
from parl.utils.interrupts import ctrl_c_deferred
from parl.utils.train_flags import (
    add_common_flags,
    add_legacy_dynamics_flag,
    example_parser,
    no_checkpoint_message,
    positive_float,
    positive_int,
    refuse_as_usage,
    refuse_other_flags,
    refuse_resume_without_checkpoint,
)

# flags a resumed run must share with the run that wrote the checkpoint (their values for a
# checkpoint that does not record them)
CHECKED_FLAGS = {
    "continuous_actions": False, "legacy_dynamics": False, "use_popart": True,
    "use_centralized_V": True,
}  # fmt: skip


def checked_flags(args: Any) -> dict[str, Any]:
    """``CHECKED_FLAGS``, ``--env`` and ``--env_num``: another env's checkpoint would load
    wherever its networks have the same shapes (taken as this run's env where a checkpoint does
    not record it), and another number of envs would count the steps and seed the rollouts of
    the updates done as if they had had this run's (see :func:`written_flags`)."""
    return {**CHECKED_FLAGS, "env": args.env, "env_num": args.env_num}


def written_flags(payload: dict[str, Any], episode_length: int) -> dict[str, Any]:
    """The flags a checkpoint recorded, with ``env_num`` worked out from its counters where it
    does not record it: each update counts one episode of every env."""
    written = dict(payload.get("extra", {}))
    counters = payload.get("counters", {})
    if "env_num" not in written and {"total_steps", "update"} <= counters.keys():
        per_update = (int(counters["update"]) + 1) * episode_length
        written["env_num"] = int(counters["total_steps"]) // per_update
    return written


@dataclass
class Config:
    """The run's settings: the flags, with PARL's MAPPO hyperparameters as defaults."""

    env: str = "simple_speaker_listener"
    seed: int = 0
    train_total_steps: int = 1_000_000
    test_every_steps: int = 50_000
    eval_episodes: int = 10
    logdir: str | None = None
    resume: bool = False
    device: str = "cpu"
    torch_threads: int = 1
    progress: bool = True
    xparl_addr: str | None = None
    env_num: int = 32
    num_workers: int = 2
    continuous_actions: bool = False
    legacy_dynamics: bool = False
    lr: float = 7e-4
    value_loss_coef: float = 1.0
    entropy_coef: float = 0.01
    huber_delta: float = 10.0
    adam_eps: float = 1e-5
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_param: float = 0.2
    ppo_epoch: int = 15
    num_mini_batch: int = 1
    use_popart: bool = True
    use_centralized_V: bool = True
    use_value_active_masks: bool = True
    tensorboard: bool = True


@dataclass
class TrainResult:
    total_steps: int = 0
    eval_history: list[tuple[int, float]] = field(default_factory=list)  # (steps, mean return)
    train_returns: list[float] = field(default_factory=list)  # mean return of each rollout
    train_seconds: float = 0.0
    checkpoint: str = ""


class Team:
    """The agents of one env, each with its own model, MAPPO, agent and rollout buffer."""

    def __init__(self, config: Config, envs: MultiAgentVectorEnv, episode_length: int) -> None:
        self.obs_dims = [int(d) for d in envs.obs_shape_n]
        self.act_dims = [int(d) for d in envs.act_shape_n]
        self.n = envs.n_agents
        self.centralized = config.use_centralized_V
        self.continuous = config.continuous_actions
        self.agents: list[MAPPOAgent] = []
        self.buffers: list[AgentBuffer] = []
        for i in range(self.n):
            cent_dim = envs.state_shape if self.centralized else self.obs_dims[i]
            model = MAPPOModel(self.obs_dims[i], cent_dim, self.act_dims[i], self.continuous)
            alg = MAPPO(
                model,
                config.clip_param,
                config.value_loss_coef,
                config.entropy_coef,
                config.lr,
                config.huber_delta,
                config.adam_eps,
                config.max_grad_norm,
                config.use_popart,
                config.use_value_active_masks,
                continuous_action=self.continuous,
                device=config.device,
            )
            self.agents.append(MAPPOAgent(alg, config.ppo_epoch, config.num_mini_batch))
            columns = self.act_dims[i] if self.continuous else 1
            self.buffers.append(
                AgentBuffer(episode_length, envs.num_envs, self.obs_dims[i], cent_dim, columns, 1)
            )

    def split(self, obs: np.ndarray, state: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(share_obs, obs)`` of each agent from the batched ``(N, n_agents, longest obs)``
        observations (zero-padded) and the global states ``(N, state_dim)``."""
        if obs.shape[1] != self.n:
            raise ValueError(
                f"the envs report {obs.shape[1]} agents per env, but the team has {self.n}"
            )
        own = [obs[:, i, : self.obs_dims[i]] for i in range(self.n)]
        return [(state if self.centralized else o, o) for o in own]

    def env_actions(self, actions: list[np.ndarray]) -> np.ndarray:
        """The agents' actions as the vector env takes them: ``(N, n_agents)`` indices, or
        ``(N, n_agents, longest action)`` floats in [-1, 1]."""
        if len(actions) != self.n:
            raise ValueError(f"got actions of {len(actions)} agents, the team has {self.n}")
        if not self.continuous:
            return np.stack([a[:, 0] for a in actions], axis=1)
        out = np.zeros((actions[0].shape[0], self.n, max(self.act_dims)), np.float32)
        for i, a in enumerate(actions):
            out[:, i, : self.act_dims[i]] = np.clip(a, -1.0, 1.0)
        return out


def available_or_first(actions: np.ndarray, avail: np.ndarray) -> np.ndarray:
    """``actions`` (any shape of indices), each one not available now replaced by the first
    available one: MAPPO's policies do not mask, and foraging forbids a move into a wall or a
    load with no food beside; its first action (none) does what lbforaging itself does with
    a forbidden one. MPE allows every action, so nothing changes there.

    Args:
        actions: ``(..., )`` action indices.
        avail: ``(..., n_actions)`` the available actions (bool), as the env gives them.
    """
    ok = np.take_along_axis(avail, actions[..., None].astype(np.intp), axis=-1)[..., 0]
    return np.where(ok, actions, avail.argmax(axis=-1))


def run_evaluate_episodes(team: Team, env: MAenv, episodes: int, seed: int) -> float:
    """Mean over ``episodes`` greedy episodes of the agents' mean return."""
    returns = []
    for k in range(episodes):
        obs_n = env.reset(seed=seed + k)
        total, done = np.zeros(team.n), False
        while not done:
            actions: list[Any] = []
            for i, agent in enumerate(team.agents):
                action = agent.predict(obs_n[i][None].astype(np.float32))[0]
                if team.continuous:
                    actions.append(np.clip(action, -1.0, 1.0))
                else:
                    avail = env.get_avail_agent_actions(i)
                    actions.append(int(available_or_first(np.asarray(action[0]), avail)))
            obs_n, reward_n, done_n, _ = env.step(actions)
            total += reward_n
            done = all(done_n)
        returns.append(float(total.mean()))
    return float(np.mean(returns))


def _checkpoint_paths(logdir: str, n: int) -> list[str]:
    return [os.path.join(logdir, f"checkpoint_agent{i}.pt") for i in range(n)]


def train(config: Config) -> TrainResult:
    """Run MAPPO as configured."""
    set_seed(config.seed)
    if config.xparl_addr:
        parl.connect(config.xparl_addr)
    eval_env = MAenv(config.env, config.continuous_actions, legacy_dynamics=config.legacy_dynamics)
    episode_length = eval_env.max_step
    logdir = logdir_of(config)
    paths = _checkpoint_paths(logdir, eval_env.n)
    # any file resumes (one missing is an error below): a run with another number of agents
    # must be refused, not start afresh over the checkpoint files it finds
    found = [p for p in paths if os.path.exists(p)]
    rows = episode_length * config.env_num
    if config.num_mini_batch > rows:  # before any actor starts, not after the first rollout
        eval_env.close()
        raise ValueError(
            f"--num_mini_batch {config.num_mini_batch} is more minibatches than a rollout has "
            f"rows ({episode_length} steps of {config.env_num} envs: {rows}); lower it or raise "
            "--env_num"
        )
    if config.resume and not found:  # a mistyped --logdir must not start a run afresh
        eval_env.close()
        raise FileNotFoundError(no_checkpoint_message(paths[0]))
    resuming = config.resume and bool(found)
    if resuming:  # before any actor starts
        written = written_flags(load_file(found[0]), episode_length)
        refuse_other_flags(make_parser(), config, written, checked_flags(config), logdir)
    envs = MultiAgentVectorEnv.make(
        config.env,
        config.env_num,
        config.num_workers,
        continuous_actions=config.continuous_actions,
        legacy_dynamics=config.legacy_dynamics,
    )
    team = Team(config, envs, episode_length)
    batch_steps = episode_length * config.env_num
    num_updates = max(1, config.train_total_steps // batch_steps)
    result = TrainResult(checkpoint=paths[0])
    start_update = 0
    if resuming:
        states = [
            agent.restore_checkpoint(path) for agent, path in zip(team.agents, paths, strict=True)
        ]
        state = states[-1]  # every file holds the same random states: the last one wins
        if any(s.counters != state.counters for s in states):  # killed while writing them
            raise RuntimeError(
                f"the checkpoint files in {logdir} are from different points of the run "
                f"({[dict(s.counters) for s in states]}): it was stopped while writing them; "
                "start again without --resume"
            )
        start_update = int(state.counters["update"]) + 1
        result.eval_history = [tuple(x) for x in state.extra["eval_history"]]
        logger.info("resumed from %s at update %d", logdir, start_update)
    if config.tensorboard:
        summary.set_dir(logdir)

    total_steps = start_update * batch_steps
    next_eval = (total_steps // config.test_every_steps + 1) * config.test_every_steps
    bar = tqdm(
        total=num_updates * batch_steps,
        initial=total_steps,
        unit="step",
        disable=not config.progress,
    )
    train_time = 0.0
    try:
        for update in range(start_update, num_updates):
            tic = time.perf_counter()
            episode_return = _rollout(team, envs, config, config.seed + update * config.env_num)
            losses = _learn(team, config)
            train_time += time.perf_counter() - tic
            total_steps += batch_steps
            result.train_returns.append(episode_return)
            bar.update(batch_steps)
            bar.set_postfix(ret=f"{episode_return:.1f}")
            if config.tensorboard:
                summary.add_scalar("train/episode_reward", episode_return, total_steps)
                for i, agent_losses in enumerate(losses):
                    for name, value in agent_losses.items():
                        summary.add_scalar(f"agent{i}/{name}", value, total_steps)
            if total_steps >= next_eval or update == num_updates - 1:
                next_eval += config.test_every_steps
                _evaluate(team, eval_env, config, result, total_steps)
                with ctrl_c_deferred():
                    for agent, path in zip(team.agents, paths, strict=True):
                        agent.save_checkpoint(
                            path,
                            counters={"total_steps": total_steps, "update": update},
                            extra={
                                "eval_history": result.eval_history,
                                **{flag: getattr(config, flag) for flag in checked_flags(config)},
                            },
                        )
    finally:
        bar.close()
        envs.close()
        eval_env.close()
    result.total_steps, result.train_seconds = total_steps, train_time
    if config.tensorboard:
        summary.flush()
    return result


def _rollout(team: Team, envs: MultiAgentVectorEnv, config: Config, seed: int) -> float:
    """One episode of every env into the buffers; returns the agents' mean episode return."""
    obs, _ = envs.reset(seed=seed)
    for buffer, (share_obs, own) in zip(team.buffers, team.split(obs, envs.state()), strict=True):
        buffer.share_obs[0], buffer.obs[0] = share_obs, own
        buffer.masks[0] = 1.0
    rewards_sum = np.zeros((envs.num_envs, team.n))
    for step in range(team.buffers[0].episode_length):
        samples = [
            agent.sample(buffer.share_obs[step], buffer.obs[step])
            for agent, buffer in zip(team.agents, team.buffers, strict=True)
        ]
        env_actions = team.env_actions([actions for _, actions, _ in samples])
        if not team.continuous:
            env_actions = available_or_first(env_actions, envs.get_avail_actions())
        obs, rewards, terminations, truncations, info = envs.step(env_actions)
        # an env that ended was reset in this step: its state is the new episode's
        state = envs.state()
        masks = 1.0 - (terminations | truncations).astype(np.float32)
        rewards_sum += rewards
        for i, (buffer, (share_obs, own)) in enumerate(
            zip(team.buffers, team.split(obs, state), strict=True)
        ):
            values, actions, log_probs = samples[i]
            buffer.insert(
                share_obs, own, actions, log_probs, values, rewards[:, i], masks[:, i, None]
            )
    for agent, buffer in zip(team.agents, team.buffers, strict=True):
        next_value = agent.value(buffer.share_obs[-1])
        buffer.compute_returns(next_value, agent.value_normalizer, config.gamma, config.gae_lambda)
    return float(rewards_sum.mean())


def _learn(team: Team, config: Config) -> list[dict[str, float]]:
    losses = []
    for agent, buffer in zip(team.agents, team.buffers, strict=True):
        losses.append(agent.learn(buffer))
        buffer.after_update()
    return losses


def _evaluate(
    team: Team, eval_env: MAenv, config: Config, result: TrainResult, total_steps: int
) -> None:
    if config.eval_episodes <= 0:
        return
    mean = run_evaluate_episodes(team, eval_env, config.eval_episodes, config.seed + 10_000)
    result.eval_history.append((total_steps, mean))
    if config.tensorboard:
        summary.add_scalar("eval/episode_reward", mean, total_steps)
    logger.info(
        "step %d: evaluation over %d episodes: %.2f", total_steps, config.eval_episodes, mean
    )


def _on_off(value: str) -> bool:
    """PARL's flags take a value: ``--use_popart False``."""
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"must be True or False, got {value!r}")


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    defaults = Config()
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env=defaults.env,
        gym_env=False,
        defaults={
            "train_total_steps": defaults.train_total_steps,
            "test_every_steps": defaults.test_every_steps,
            "eval_episodes": defaults.eval_episodes,
        },
        help={
            "env": "MPE scenario (simple_speaker_listener, simple_spread, ...) or foraging id",
            "logdir": "folder of the TensorBoard logs and the checkpoints "
            "(default: train_log/MAPPO_<env>)",
            "eval_episodes": "greedy episodes per evaluation, 0 for none",
            "xparl_addr": "address (host:port) of an xparl cluster to run the env actors on "
            "(default: none, on this machine)",
        },
        zero_eval_episodes=True,
    )
    parser.add_argument(
        "--env_num", type=positive_int, default=defaults.env_num, help="parallel envs"
    )
    parser.add_argument(
        "--num_workers",
        type=positive_int,
        default=defaults.num_workers,
        help="actors stepping the envs",
    )
    parser.add_argument(
        "--continuous_actions",
        action="store_true",
        help="Gaussian policies on MPE's continuous actions",
    )
    add_legacy_dynamics_flag(parser)
    parser.add_argument(
        "--ppo_epoch", type=positive_int, default=defaults.ppo_epoch, help="passes over a rollout"
    )
    parser.add_argument(
        "--num_mini_batch",
        type=positive_int,
        default=defaults.num_mini_batch,
        help="minibatches per pass",
    )
    parser.add_argument("--lr", type=positive_float, default=defaults.lr, help="Adam learning rate")
    for name, text in (
        ("use_popart", "normalise value targets with PopArt (the paper's suggestion 1)"),
        ("use_centralized_V", "critic on the global state (suggestion 2)"),
        ("use_value_active_masks", "value loss over active steps only (suggestion 5)"),
    ):
        parser.add_argument(f"--{name}", type=_on_off, default=True, metavar="BOOL", help=text)
    return parser


def logdir_of(flags: Any) -> str:
    """``--logdir``, or ``train_log/MAPPO_<env>`` when it is not given."""
    return flags.logdir or os.path.join("train_log", f"MAPPO_{flags.env}")


def parse_config(argv: list[str] | None = None) -> Config:
    parser = make_parser()
    args = parser.parse_args(argv)
    refuse_as_usage(
        parser,
        lambda: check_env_id(
            args.env,
            continuous_actions=args.continuous_actions,
            legacy_dynamics=args.legacy_dynamics,
            importable=True,
        ),
    )
    refuse_resume_without_checkpoint(parser, args.resume, logdir_of(args), "checkpoint_agent0.pt")
    return Config(**{k: v for k, v in vars(args).items() if k in Config.__dataclass_fields__})


def main(argv: list[str] | None = None) -> TrainResult:
    config = parse_config(argv)
    torch.set_num_threads(config.torch_threads)
    logger.info("MAPPO on %s: %s", config.env, asdict(config))
    result = train(config)
    logger.info(
        "done: %d steps, %.1f s of training, %s; checkpoints in %s",
        result.total_steps,
        result.train_seconds,
        evaluation_summary(result, config.eval_episodes),
        os.path.dirname(result.checkpoint),
    )
    return result


def evaluation_summary(result: TrainResult, eval_episodes: int) -> str:
    """The closing line's word on evaluation: the last one's return, or why there was none."""
    if result.eval_history:
        return f"last evaluation {result.eval_history[-1][1]:.2f}"
    if eval_episodes == 0:
        return "no evaluation (--eval_episodes 0)"
    # only a resume of a run that had finished without evaluations gets here: no update was
    # left, so none was evaluated
    return (
        "no evaluation (the run it resumed had finished without any; raise "
        "--train_total_steps to train and evaluate on)"
    )


if __name__ == "__main__":
    main()
