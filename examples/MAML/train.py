"""MAML++ (or MAML) on 5-shot sine-wave regression, PARL's MAML++ benchmark made resumable.

    python examples/MAML/train.py                                  # MAML++, PARL's protocol
    python examples/MAML/train.py --algo maml --logdir train_log/MAML_plain
    python examples/MAML/train.py --resume                         # continue where it stopped
    tensorboard --logdir train_log

A step is one meta-update from a batch of ``--training_batch_size`` tasks; an epoch is
``--total_iter_per_epoch`` steps, the unit of the cosine schedule of the outer learning rate, of
the multi-step loss's annealing and of the derivative-order annealing. Every
``--test_every_steps`` steps the model adapts to each held-out task from its support points and
is scored by the MSE on its query points; a checkpoint is written then and at the end, and
``--resume`` continues from it exactly (the batches depend only on ``--seed`` and the step).
"""

from __future__ import annotations

import argparse
import math
import os

import torch
from agent import MAMLAgent
from data import SineTasks
from model import MAMLModel
from tqdm import tqdm

from parl.algorithms import MAML
from parl.utils import logger, set_seed, summary
from parl.utils.train_flags import (
    add_common_flags,
    example_parser,
    refuse_resume_without_checkpoint,
    require_checkpoint,
)

CHECKPOINT = "checkpoint.pt"


def build_agent(args: argparse.Namespace) -> MAMLAgent:
    plain = args.algo == "maml"  # MAML: fixed rates, fixed outer rate, final-step loss only
    model = MAMLModel(args.network_dims)
    algorithm = MAML(
        model,
        args.device,
        num_updates_per_iter=args.num_updates_per_iter,
        num_layers=len(args.network_dims) - 1,
        task_learning_rate=args.task_learning_rate,
        learnable_learning_rates=not plain,
        meta_learning_rate=args.meta_learning_rate,
        total_epochs=total_epochs(args),
        min_learning_rate=args.min_learning_rate,
        learning_rate_scheduler=not plain,
        second_order=not args.first_order,
        use_multi_step_loss_optimization=not plain,
        multi_step_loss_num_epochs=args.multi_step_loss_num_epochs,
        first_order_to_second_order_epoch=args.first_order_to_second_order_epoch,
        max_grad_norm=args.max_grad_norm or None,
    )
    return MAMLAgent(algorithm)


def total_epochs(args: argparse.Namespace) -> int:
    return math.ceil(args.train_total_steps / args.total_iter_per_epoch)


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    if args.env != "sine":
        raise SystemExit(f"--env: the only task family is 'sine', got {args.env!r}")
    torch.set_num_threads(args.torch_threads)
    set_seed(args.seed)
    logger.info(
        "%s on 5-shot sine regression, %d steps (%d epochs), seed %d",
        "MAML" if args.algo == "maml" else "MAML++",
        args.train_total_steps,
        total_epochs(args),
        args.seed,
    )
    train_tasks = SineTasks(
        args.num_training_tasks, args.num_training_support, args.num_training_query, args.seed
    )
    # held-out tasks from another seed: never seen in training
    test_tasks = SineTasks(
        args.num_test_tasks, args.num_test_support, args.num_test_query, args.seed + 10_000_000
    )
    test_batches = test_tasks.test_batches(args.test_batch_size)
    agent = build_agent(args)
    summary.set_dir(args.logdir)
    checkpoint = os.path.join(args.logdir, CHECKPOINT)
    step = 0
    if args.resume:
        require_checkpoint(checkpoint)
        state = agent.restore_checkpoint(checkpoint)
        step = int(state.counters["steps"])
        logger.info("resumed from %s at step %d", checkpoint, step)
    stop_at = min(args.train_total_steps, args.stop_after_steps or args.train_total_steps)
    bar = tqdm(total=args.train_total_steps, initial=step, disable=not args.progress)
    test_loss = math.nan
    while step < stop_at:
        epoch = step // args.total_iter_per_epoch
        batch = train_tasks.train_batch(step, args.training_batch_size)
        loss = agent.learn(batch, epoch)
        step += 1
        bar.update(1)
        if step % 100 == 0:
            summary.add_scalar("train/meta_loss", loss, step)
            summary.add_scalar("train/outer_lr", agent.alg.optimizer.param_groups[0]["lr"], step)
        if step % args.test_every_steps == 0 or step == args.train_total_steps:
            test_loss, half_width = agent.evaluate(test_batches)
            summary.add_scalar("test/loss", test_loss, step)
            bar.set_postfix(train=f"{loss:.3f}", test=f"{test_loss:.3f}")
            logger.info(
                "step %d (epoch %d): test MSE on %d held-out tasks %.3f +- %.3f",
                step,
                epoch + 1,
                args.num_test_tasks,
                test_loss,
                half_width,
            )
            agent.save_checkpoint(checkpoint, counters={"steps": step})
    bar.close()
    agent.save_checkpoint(checkpoint, counters={"steps": step})
    agent.save(os.path.join(args.logdir, "model.pt"))
    if math.isnan(test_loss):
        test_loss, _ = agent.evaluate(test_batches)
    logger.info(
        "done: %d steps; test MSE on %d held-out tasks %.4f", step, args.num_test_tasks, test_loss
    )
    summary.flush()
    return test_loss


def _dims(text: str) -> list[int]:
    try:
        dims = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be widths separated by commas, got {text!r}"
        ) from None
    if len(dims) < 2 or dims[0] != 1 or dims[-1] != 1 or min(dims) < 1:
        raise argparse.ArgumentTypeError(
            f"must start and end with 1 (x in, y out), such as 1,40,40,40,1; got {text!r}"
        )
    return dims


def make_parser() -> argparse.ArgumentParser:
    """The example's command line (the docs build reads it too)."""
    parser = example_parser(__doc__)
    add_common_flags(
        parser,
        env="sine",
        gym_env=False,
        defaults={
            "train_total_steps": 40_000,
            "test_every_steps": 500,
            "logdir": os.path.join("train_log", "MAML"),
        },
        skip=["eval_episodes", "xparl_addr"],
        help={
            "env": "task family (only sine: 5-shot sine-wave regression)",
            "train_total_steps": "meta-updates to train for (PARL's 80 epochs of 500)",
            "test_every_steps": "evaluate on the held-out tasks and write a checkpoint every this "
            "many meta-updates",
        },
    )
    parser.add_argument(
        "--algo",
        choices=["maml++", "maml"],
        default="maml++",
        help="maml++: learned per-step rates, cosine outer schedule, multi-step loss; maml: "
        "none of them",
    )
    parser.add_argument(
        "--network_dims", type=_dims, default=[1, 40, 40, 40, 1], help="layer widths"
    )
    parser.add_argument(
        "--total_iter_per_epoch", type=int, default=500, help="meta-updates per epoch"
    )
    parser.add_argument("--num_updates_per_iter", type=int, default=3, help="inner steps per task")
    parser.add_argument(
        "--task_learning_rate", type=float, default=1e-3, help="starting inner learning rate"
    )
    parser.add_argument(
        "--meta_learning_rate", type=float, default=1e-3, help="Adam's outer learning rate"
    )
    parser.add_argument(
        "--min_learning_rate", type=float, default=1e-5, help="outer rate at the last epoch"
    )
    parser.add_argument(
        "--first_order", action="store_true", help="first-order MAML (no second derivatives)"
    )
    parser.add_argument(
        "--first_order_to_second_order_epoch",
        type=int,
        default=-1,
        help="train to first order up to this epoch, then to second order (-1: second order "
        "throughout, PARL's)",
    )
    parser.add_argument(
        "--max_grad_norm",
        type=float,
        default=10.0,
        help="clip the norm of the network's meta-gradient to this before Adam's step (0: "
        "never, PARL's; see the README)",
    )
    parser.add_argument(
        "--multi_step_loss_num_epochs",
        type=int,
        default=10,
        help="epochs during which every inner step's query loss counts",
    )
    parser.add_argument("--num_training_tasks", type=int, default=1600, help="training tasks")
    parser.add_argument("--training_batch_size", type=int, default=16, help="tasks per meta-update")
    parser.add_argument("--num_training_support", type=int, default=5, help="support points")
    parser.add_argument("--num_training_query", type=int, default=10, help="query points")
    parser.add_argument("--num_test_tasks", type=int, default=10_000, help="held-out tasks")
    parser.add_argument("--test_batch_size", type=int, default=100, help="tasks per test batch")
    parser.add_argument(
        "--num_test_support", type=int, default=5, help="support points of a held-out task"
    )
    parser.add_argument(
        "--num_test_query", type=int, default=100, help="query points of a held-out task"
    )
    parser.add_argument(
        "--stop_after_steps", type=int, default=0, help="end this run early, as if interrupted"
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    # each would fail later: a division by zero, an empty range() or no steps at all
    for name in ("total_iter_per_epoch", "training_batch_size", "test_batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be 1 or more, got {getattr(args, name)}")
    if args.stop_after_steps < 0:
        parser.error(f"--stop_after_steps must be 0 (never) or more, got {args.stop_after_steps}")
    if args.max_grad_norm < 0:
        parser.error(f"--max_grad_norm must be 0 (no clipping) or more, got {args.max_grad_norm}")
    refuse_resume_without_checkpoint(parser, args.resume, args.logdir)
    return args


if __name__ == "__main__":
    main()
