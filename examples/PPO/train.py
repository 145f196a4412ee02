"""PPO on CartPole (default, about a minute), MuJoCo (``--env HalfCheetah-v5
--continuous_action``) or Atari (``--env PongNoFrameskip-v4``), PARL's flags.

    python examples/PPO/train.py                                   # CartPole-v1, 8 envs
    python examples/PPO/train.py --env HalfCheetah-v5 --continuous_action
    python examples/PPO/train.py --env HalfCheetah-v5 --continuous_action --config zoo
    python examples/PPO/train.py --env PongNoFrameskip-v4 --env_num 8 --num_workers 2
    python examples/PPO/train.py --env_num 8 --xparl_addr localhost:8010   # envs on a cluster
    tensorboard --logdir train_log

Every ``--test_every_steps`` the greedy policy is evaluated and a checkpoint (model, optimizer,
random states, normalisation statistics, counters) is written; ``--resume`` continues from it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import torch
from agent import PPOAgent
from config import PRESETS, config_for
from env_utils import kind_of, make_env, make_train_envs
from model import AtariModel, MLPModel
from numpy_update import set_blas_threads
from storage import RolloutStorage
from tqdm import tqdm

from parl.algorithms import PPO
from parl.utils import logger, set_seed, summary
from parl.utils.train_flags import (
    add_common_flags,
    example_parser,
    refuse_as_usage,
    refuse_resume_without_checkpoint,
    require_checkpoint,
)


@dataclass
class TrainResult:
    total_steps: int = 0
    eval_history: list[tuple[int, float]] = field(default_factory=list)  # (steps, mean return)
    train_seconds: float = 0.0  # wall time without evaluations
    train_cpu_seconds: float = 0.0  # CPU time (this process and its children), same span
    steps_to_target: int | None = None  # first evaluation at or above config["target_return"]
    seconds_to_target: float | None = None
    cpu_seconds_to_target: float | None = None
    checkpoint: str = ""


def cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its live children (env actors): with the
    machine shared, it says more about the cost of training than the wall time does."""
    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


def check_action_kind(env_id: str, act_space: gym.Space, continuous: bool) -> None:
    """A ValueError naming the fix unless ``--continuous_action`` matches the env's actions."""
    if continuous != isinstance(act_space, gym.spaces.Box):
        fix = "leave out --continuous_action" if continuous else "add --continuous_action"
        raise ValueError(
            f"--env {env_id}: its actions are {act_space}; {fix} (it is for a Box action "
            "space, a discrete one goes without it)"
        )


def _env_action_space(env_id: str) -> gym.Space:
    env = gym.make(env_id)
    try:
        return env.action_space
    finally:
        env.close()


def build_agent(config: dict[str, Any], obs_space: gym.Space, act_space: gym.Space) -> PPOAgent:
    if kind_of(config) == "atari":
        model: Any = AtariModel(int(act_space.n))
    else:
        continuous = bool(config["continuous_action"])
        check_action_kind(config["env"], act_space, continuous)
        act_dim = int(np.prod(act_space.shape)) if continuous else int(act_space.n)
        model = MLPModel(
            int(np.prod(obs_space.shape)),
            act_dim,
            continuous,
            config.get("hidden_sizes", (64, 64)),
            config.get("activation", "tanh"),
            config.get("log_std_init", 0.0),
            config.get("ortho_init", True),
        )
    alg = PPO(
        model,
        clip_param=config["clip_param"],
        entropy_coef=config["entropy_coef"],
        initial_lr=config["initial_lr"],
        use_clipped_value_loss=config["use_clipped_value_loss"],
        continuous_action=bool(config["continuous_action"]),
        value_loss_coef=config.get("value_loss_coef", 0.5),
        max_grad_norm=config.get("max_grad_norm", 0.5),
        device=config.get("device", "cpu"),
    )
    return PPOAgent(alg, config, obs_space.shape)


def run_evaluate_episodes(agent: PPOAgent, env: gym.Env, episodes: int, seed: int) -> float:
    """Mean raw return of ``episodes`` greedy episodes (whole games for Atari)."""
    returns = []
    obs, _ = env.reset(seed=seed)
    while len(returns) < episodes:
        obs, _, terminated, truncated, info = env.step(agent.predict(obs))
        if "episode" in info:
            returns.append(float(info["episode"]["r"]))
        if terminated or truncated:
            obs, _ = env.reset()
    return float(np.mean(returns))


def _episode_returns(info: dict[str, Any]) -> list[float]:
    final = info.get("final_info", {})
    if "episode" not in final:
        return []
    mask = final.get("_episode", np.ones(len(final["episode"]["r"]), bool))
    return [float(r) for r in np.asarray(final["episode"]["r"])[mask]]


def _bootstrap_truncated(agent, info, rewards, terminated, truncated, gamma) -> None:
    """Time-limit truncation is not a terminal state: add ``gamma * V(final_obs)`` (as SB3)."""
    cut = truncated & ~terminated
    if cut.any() and "final_obs" in info:
        final_obs = np.stack([info["final_obs"][i] for i in np.nonzero(cut)[0]])
        rewards[cut] += gamma * agent.value(final_obs).reshape(-1)


def train(config: dict[str, Any]) -> TrainResult:
    """Run PPO as configured; see ``config.py`` for the keys."""
    ckpt_path = os.path.join(config["logdir"], "checkpoint.pt")
    if config.get("resume"):
        require_checkpoint(ckpt_path)
    seed = int(config["seed"])
    set_seed(seed)
    envs = make_train_envs(config)
    eval_env = make_env(config["env"], kind_of(config), config["gamma"], test=True)
    env_num, step_nums = int(config["env_num"]), int(config["step_nums"])
    config["batch_size"] = env_num * step_nums
    config["num_updates"] = max(1, int(config["train_total_steps"]) // config["batch_size"])
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    agent = build_agent(config, obs_space, act_space)
    rollout = RolloutStorage(
        step_nums, env_num, obs_space.shape, act_space.shape, obs_dtype=obs_space.dtype
    )
    logdir = config["logdir"]
    result = TrainResult(checkpoint=ckpt_path)
    start_update, counters = 1, {"total_steps": 0}
    if config.get("resume"):
        state = agent.restore_checkpoint(ckpt_path)
        counters = dict(state.counters)
        start_update = int(counters["update"]) + 1
        agent.lr_scheduler.load_state_dict(state.extra["lr"])
        agent.clip_scheduler.load_state_dict(state.extra["clip"])
        if "sample_rng" in state.extra:
            agent.sample_rng.bit_generator.state = state.extra["sample_rng"]
        if state.extra.get("rms") is not None:
            envs.call("set_rms_state", state.extra["rms"])
        logger.info("resumed from %s at step %d", ckpt_path, counters["total_steps"])
    if config.get("tensorboard", True):
        summary.set_dir(logdir)

    total_steps = int(counters["total_steps"])
    obs, _ = envs.reset(seed=seed)
    next_eval = (total_steps // config["test_every_steps"] + 1) * config["test_every_steps"]
    bar = tqdm(
        total=config["num_updates"] * config["batch_size"],
        initial=total_steps,
        unit="step",
        disable=not config.get("progress", True),
    )
    train_time, cpu_time, recent = 0.0, 0.0, []
    for update in range(start_update, config["num_updates"] + 1):
        tic, cpu_tic = time.perf_counter(), cpu_seconds()
        for _ in range(step_nums):
            value, action, logprob, _ = agent.sample(obs)
            env_action = (
                action
                if not config["continuous_action"]
                else np.clip(action, act_space.low, act_space.high)
            )
            next_obs, reward, terminated, truncated, info = envs.step(env_action)
            reward = reward.astype(np.float32)
            _bootstrap_truncated(agent, info, reward, terminated, truncated, config["gamma"])
            rollout.append(obs, action, logprob, reward, terminated | truncated, value)
            obs = next_obs
            recent.extend(_episode_returns(info))
        total_steps += config["batch_size"]
        rollout.compute_returns(agent.value(obs), config["gamma"], config["gae_lambda"])
        value_loss, action_loss, entropy, lr = agent.learn(rollout)
        seconds = time.perf_counter() - tic
        train_time += seconds
        cpu_time += cpu_seconds() - cpu_tic
        result.train_cpu_seconds = cpu_time
        bar.update(config["batch_size"])
        if config.get("tensorboard", True):
            _log_update(agent, total_steps, value_loss, action_loss, entropy, lr, recent, seconds)
        if recent:
            bar.set_postfix(ret=f"{np.mean(recent[-10:]):.1f}")
        recent = recent[-100:]
        if total_steps >= next_eval or update == config["num_updates"]:
            next_eval += config["test_every_steps"]
            _evaluate(agent, envs, eval_env, config, result, total_steps, train_time)
            agent.save_checkpoint(
                ckpt_path,
                counters={"total_steps": total_steps, "update": update},
                extra={
                    "lr": agent.lr_scheduler.state_dict(),
                    "clip": agent.clip_scheduler.state_dict(),
                    "rms": _rms_state(envs, config),
                    "sample_rng": agent.sample_rng.bit_generator.state,
                },
            )
            if result.steps_to_target is not None and config.get("stop_at_target"):
                break
    bar.close()
    result.total_steps, result.train_seconds = total_steps, train_time
    envs.close()
    eval_env.close()
    if config.get("tensorboard", True):
        summary.flush()
    return result


def _rms_state(envs: gym.vector.VectorEnv, config: dict[str, Any]) -> Any:
    return envs.call("get_rms_state")[0] if kind_of(config) == "mujoco" else None


def _log_update(agent, steps, value_loss, action_loss, entropy, lr, recent, seconds) -> None:
    summary.add_scalar("train/value_loss", value_loss, steps)
    summary.add_scalar("train/action_loss", action_loss, steps)
    summary.add_scalar("train/entropy", entropy, steps)
    summary.add_scalar("train/approx_kl", agent.last_stats["approx_kl"], steps)
    summary.add_scalar("train/clip_frac", agent.last_stats["clip_frac"], steps)
    summary.add_scalar("train/lr", lr, steps)
    summary.add_scalar("train/fps", agent.config["batch_size"] / max(seconds, 1e-9), steps)
    if recent:
        summary.add_scalar("train/episode_reward", float(np.mean(recent[-10:])), steps)


def _evaluate(agent, envs, eval_env, config, result, total_steps, train_time) -> None:
    if config["eval_episodes"] <= 0:  # --eval_episodes 0: training returns only
        return
    if kind_of(config) == "mujoco":
        eval_env.set_ob_rms(envs.call("get_ob_rms")[0])
    mean = run_evaluate_episodes(agent, eval_env, config["eval_episodes"], config["seed"] + 10_000)
    result.eval_history.append((total_steps, mean))
    target = config.get("target_return")
    if target is not None and mean >= target and result.steps_to_target is None:
        result.steps_to_target, result.seconds_to_target = total_steps, train_time
        result.cpu_seconds_to_target = result.train_cpu_seconds
    if config.get("tensorboard", True):
        summary.add_scalar("eval/episode_reward", mean, total_steps)
    logger.info(
        "step %d: evaluation over %d episodes: %.1f", total_steps, config["eval_episodes"], mean
    )


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="CartPole-v1",
        preset="the preset in config.py",
        aliases={"eval_episodes": ["--eval_episode"], "no_progress": ["--no-progress"]},
        help={
            "logdir": "folder of the TensorBoard logs, the checkpoint and the final model "
            "(default: train_log/PPO_<env>)",
            "eval_episodes": "greedy episodes per evaluation, 0 for none",
            "xparl_addr": "address (host:port) of an xparl cluster to run the envs on "
            "(with --env_num > 1; default: none, in this process)",
        },
        zero_eval_episodes=True,
    )
    parser.add_argument(
        "--config",
        dest="preset",
        choices=PRESETS,
        default="parl",
        help="hyperparameters: parl (PARL's per kind of env) or zoo (rl-baselines3-zoo's tuned "
        "MuJoCo setting, the HalfCheetah results of docs/algorithms/ppo.md)",
    )
    parser.add_argument(
        "--continuous_action", action="store_true", help="Gaussian policy (MuJoCo tasks)"
    )
    parser.add_argument(
        "--env_num", type=int, default=None, help="parallel envs (default: from the preset)"
    )
    parser.add_argument(
        "--num_workers", type=int, default=0, help="env actors (0: envs in this process)"
    )
    parser.add_argument(
        "--target_return",
        type=float,
        default=None,
        help="record when an evaluation first reaches this return (default: none)",
    )
    parser.add_argument(
        "--stop_at_target", action="store_true", help="stop once --target_return is reached"
    )
    return parser


def parse_config(argv: list[str] | None = None) -> dict[str, Any]:
    """The preset of ``--env`` with the flags given on the command line laid over it."""
    parser = make_parser()
    args = parser.parse_args(argv)
    if kind_of({"env": args.env, "continuous_action": args.continuous_action}) != "atari":
        # checked before anything starts: a usage error, not a traceback from the run
        refuse_as_usage(
            parser,
            lambda: check_action_kind(
                args.env, _env_action_space(args.env), args.continuous_action
            ),
        )
    config: dict[str, Any] = {}
    refuse_as_usage(
        parser, lambda: config.update(config_for(args.env, args.continuous_action, args.preset))
    )
    for key, value in vars(args).items():
        if value is not None and key != "env":
            config[key] = value
    config.setdefault("logdir", os.path.join("train_log", f"PPO_{args.env.replace('/', '_')}"))
    refuse_resume_without_checkpoint(parser, bool(config.get("resume")), config["logdir"])
    return config


def main(argv: list[str] | None = None) -> TrainResult:
    config = parse_config(argv)
    torch.set_num_threads(config["torch_threads"])
    set_blas_threads(config["torch_threads"])  # the numpy update's matrix products likewise
    logger.info("PPO on %s: %s", config["env"], config)
    result = train(config)
    last = result.eval_history[-1][1] if result.eval_history else float("nan")
    logger.info(
        "done: %d steps, %.1f s of training, last evaluation %.1f; checkpoint %s",
        result.total_steps,
        result.train_seconds,
        last,
        result.checkpoint,
    )
    return result


if __name__ == "__main__":
    main()
