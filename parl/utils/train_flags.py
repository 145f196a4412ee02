"""The command-line flags every training example shares, spelt as PARL's scripts spell them.

``example_parser(__doc__)`` makes a parser whose description is the first paragraph of the
module's docstring with its reStructuredText markup removed, and whose help shows each flag's
default. ``add_common_flags`` adds ``--env``, ``--seed``, ``--train_total_steps``,
``--test_every_steps``, ``--eval_episodes``, ``--logdir``, ``--resume``, ``--device``,
``--torch_threads``, ``--no_progress`` and ``--xparl_addr``; an example leaves out the ones that
do not apply and keeps its older spellings working as hidden aliases.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

COMMON_FLAGS: tuple[str, ...] = (
    "env",
    "seed",
    "train_total_steps",
    "test_every_steps",
    "eval_episodes",
    "logdir",
    "resume",
    "device",
    "torch_threads",
    "no_progress",
    "xparl_addr",
)

_HELP: dict[str, str] = {
    "env": "gymnasium environment id",
    "seed": "random seed of the run (actors and envs derive theirs from it)",
    "train_total_steps": "environment steps to train for",
    "test_every_steps": "evaluate and write a checkpoint every this many environment steps",
    "eval_episodes": "greedy episodes per evaluation",
    "logdir": "folder of the TensorBoard logs, the checkpoint and the final model",
    "resume": "continue from the checkpoint in --logdir written by an earlier run",
    "device": "torch device of the learner: cpu, cuda, cuda:1 or auto",
    "torch_threads": "threads torch may use in this process",
    "no_progress": "hide the progress bar",
    "xparl_addr": "address (host:port) of an xparl cluster to run the actors on (default: none, "
    "they run on this machine)",
}

_MARKUP = re.compile(r":[a-z]+:`~?([^`]+)`|``([^`]+)``|`([^`]+)`")


def plain_text(text: str) -> str:
    """``text`` without reStructuredText inline markup: ````x````, ``:class:`x``` and ```x```
    become ``x``."""
    return _MARKUP.sub(lambda m: next(g for g in m.groups() if g is not None), text)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks and appends ``(default: ...)`` to each flag's help,
    unless the help already names its default or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS):
            return text
        if action.nargs == 0:  # a switch: off unless given
            return text
        return text + " (default: %(default)s)"


def example_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser for a training script: the description is the first paragraph of ``doc``, the
    usage examples (indented lines) follow it, all without markup."""
    paragraphs = (doc or "").strip().split("\n\n")
    usage = [p for p in paragraphs[1:] if p.startswith("    ")]
    description = "\n\n".join(plain_text(p) for p in paragraphs[:1] + usage[:1])
    return argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)


def add_hidden_alias(parser: argparse.ArgumentParser, name: str, like: str) -> None:
    """Accept ``name`` (an older spelling) exactly as the visible flag ``like``, without listing
    it in ``--help``."""
    action = next(a for a in parser._actions if like in a.option_strings)
    if isinstance(action, argparse._StoreFalseAction | argparse._StoreTrueAction):
        kind = "store_false" if isinstance(action, argparse._StoreFalseAction) else "store_true"
        parser.add_argument(
            name, dest=action.dest, action=kind, default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        return
    parser.add_argument(
        name,
        dest=action.dest,
        type=action.type or str,
        choices=action.choices,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )


def add_common_flags(
    parser: argparse.ArgumentParser,
    *,
    env: str,
    defaults: Mapping[str, Any] | None = None,
    preset: str = "",
    skip: Collection[str] = (),
    dest: Mapping[str, str] | None = None,
    aliases: Mapping[str, Sequence[str]] | None = None,
    help: Mapping[str, str] | None = None,
    zero_eval_episodes: bool = False,
    gym_env: bool = True,
    action_space: str | None = None,
    algorithm: str = "",
) -> None:
    """Add the shared flags to ``parser``.

    ``env`` is the default environment; ``defaults`` gives the defaults of the step and episode
    counts and of ``logdir`` (a count missing there defaults to None and its help says the value
    comes from ``preset``, e.g. "the env's preset in config.py"; a ``logdir`` missing there
    needs a ``help`` text that says where the logs go). ``skip`` leaves flags out,
    ``dest`` renames where a value is stored, ``aliases`` maps a flag to its hidden older
    spellings (``{"no_progress": ["--no_tqdm"]}``) and ``help`` replaces a help text;
    ``zero_eval_episodes`` lets ``--eval_episodes 0`` turn evaluation off.

    ``--env`` is a gymnasium id unless ``gym_env`` is False, and is checked as it is parsed: an
    unknown id, or one whose extra is not installed, is a usage error (exit status 2) naming
    the id and gymnasium's suggestion or the install command. With ``action_space``
    (``"continuous"`` or ``"discrete"``) the env is made once to check that ``algorithm`` can
    act in it.
    """
    unknown = set(skip) | set(dest or {}) | set(aliases or {}) | set(help or {})
    unknown -= set(COMMON_FLAGS)
    if unknown:
        raise ValueError(f"add_common_flags: {sorted(unknown)} are not among {COMMON_FLAGS}")
    defaults, dest, texts = dict(defaults or {}), dict(dest or {}), {**_HELP, **(help or {})}
    if "env" in skip:
        raise ValueError("add_common_flags: every example takes --env")
    group = parser.add_argument_group("common flags (the same in every example)")

    def text(name: str) -> str:
        if defaults.get(name) is None and preset and name in _COUNTS:
            return f"{texts[name]} (default: {preset})"
        return texts[name]

    for name in COMMON_FLAGS:
        if name in skip:
            continue
        flag, where = f"--{name}", dest.get(name, name)
        if name == "env":
            env_type = gym_env_id(action_space, algorithm) if gym_env else str
            group.add_argument(flag, type=env_type, default=env, help=text(name), dest=where)
        elif name == "resume":
            group.add_argument(flag, action="store_true", help=text(name), dest=where)
        elif name == "no_progress":
            where = dest.get(name, "progress")
            group.add_argument(flag, action="store_false", help=text(name), dest=where)
        elif name == "device":
            group.add_argument(flag, type=_device, default="cpu", help=text(name), dest=where)
        elif name == "torch_threads":
            group.add_argument(flag, type=positive_int, default=1, help=text(name), dest=where)
        elif name == "seed":
            group.add_argument(flag, type=int, default=0, help=text(name), dest=where)
        elif name == "xparl_addr":
            group.add_argument(flag, default=None, metavar="HOST:PORT", help=text(name), dest=where)
        elif name == "logdir":
            group.add_argument(flag, default=defaults.get(name), help=text(name), dest=where)
        else:
            zero_ok = name == "eval_episodes" and zero_eval_episodes
            kind = non_negative_int if zero_ok else positive_int
            group.add_argument(
                flag, type=kind, default=defaults.get(name), help=text(name), dest=where
            )
    for name, olds in (aliases or {}).items():
        for old in olds:
            add_hidden_alias(parser, old, f"--{name}")


_COUNTS = ("train_total_steps", "test_every_steps", "eval_episodes")


def _device(value: str) -> str:
    """A device name this machine has (``cuda`` without a GPU is a usage error, not a
    traceback once the model is built); the name itself is kept."""
    from parl.utils.device import get_device  # torch is imported only when the flag is given

    try:
        get_device(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def gym_env_id(action_space: str | None = None, algorithm: str = "") -> Callable[[str], str]:
    """An argparse ``type`` for a gymnasium env id (see :mod:`parl.env.making`): unknown ids,
    missing extras and, with ``action_space``, envs whose actions ``algorithm`` cannot take are
    usage errors."""

    def env_id(value: str) -> str:
        try:
            _check_env(value, action_space, algorithm)
        except (ImportError, TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    return env_id


@functools.lru_cache(maxsize=16)
def _check_env(env_id: str, action_space: str | None, algorithm: str) -> None:
    from parl.env.making import check_action_space, check_env_id, make

    if action_space is None:
        check_env_id(env_id)
        return
    if action_space not in ("continuous", "discrete"):
        raise ValueError(f"action_space must be 'continuous' or 'discrete', got {action_space!r}")
    env = make(env_id)
    try:
        check_action_space(env.action_space, env_id, action_space, algorithm)  # type: ignore[arg-type]
    finally:
        env.close()


def _whole_number(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None


def positive_int(value: str) -> int:
    """An argparse ``type``: a whole number of 1 or more."""
    number = _whole_number(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    return number


def non_negative_int(value: str) -> int:
    """An argparse ``type``: a whole number of 0 or more (0 usually meaning none, or never)."""
    number = _whole_number(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (none) or more, got {number}")
    return number


def _number_in(value: str, requirement: str, ok: Callable[[float], bool]) -> float:
    """``value`` as a float if it is finite (NaN or infinity would turn every weight into NaN at
    the first update) and ``ok``, else the usage error ``must be <requirement>``."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {requirement}, got {value!r}") from None
    if not math.isfinite(number) or not ok(number):
        raise argparse.ArgumentTypeError(f"must be {requirement}, got {value}")
    return number


def non_negative_float(value: str) -> float:
    """An argparse ``type``: a finite number of 0 or more (a weight such as an entropy bonus's,
    a decay per iteration)."""
    return _number_in(value, "a finite number of 0 or more", lambda x: x >= 0.0)


def positive_float(value: str) -> float:
    """An argparse ``type``: a finite number above 0 (a learning rate, a gradient-norm bound)."""
    return _number_in(value, "a finite number above 0", lambda x: x > 0.0)


def fraction(value: str) -> float:
    """An argparse ``type``: a number in [0, 1] (a discount, a lambda, an exploration share)."""
    return _number_in(value, "a number in [0, 1]", lambda x: 0.0 <= x <= 1.0)


def rate_below_one(value: str) -> float:
    """An argparse ``type``: a number in [0, 1) (a dropout rate: 1 would drop everything)."""
    return _number_in(value, "a number in [0, 1)", lambda x: 0.0 <= x < 1.0)


def finite_float(value: str) -> float:
    """An argparse ``type``: any finite number (a target return, a threshold that may be
    negative), refusing NaN and infinity."""
    return _number_in(value, "a finite number", lambda x: True)


def add_legacy_dynamics_flag(parser: argparse.ArgumentParser) -> None:
    """``--legacy_dynamics`` (``MAenv(..., legacy_dynamics=True)``) for the multi-agent examples:
    MPE's particles moved as PettingZoo 1.22 and earlier moved them."""
    parser.add_argument(
        "--legacy_dynamics",
        action="store_true",
        help="move MPE's particles as PettingZoo 1.22 and earlier did, the MPE of PARL's and "
        "EPyMARL's published runs (by default mpe2's: a push shows one step later)",
    )


def refuse_as_usage(parser: argparse.ArgumentParser, check: Callable[[], object]) -> None:
    """Run ``check`` (a library's own argument check); the ``ValueError`` or ``TypeError`` it
    raises, or the ``ImportError`` naming a missing extra, becomes ``parser``'s usage error
    (the usage line, the message, exit status 2) instead of a traceback from deep in a run
    that has not started."""
    try:
        check()
    except (ValueError, TypeError, ImportError) as exc:
        parser.error(str(exc))


def flag_text(parser: argparse.ArgumentParser, dest: str, value: Any) -> str:
    """How ``dest`` set to ``value`` reads on ``parser``'s command line: ``with --optimizer
    adam``, ``with --standardise_rewards``, ``without --no_last_action``."""
    action = next((a for a in parser._actions if a.dest == dest), None)  # argparse's own list
    option = action.option_strings[0] if action and action.option_strings else f"--{dest}"
    if isinstance(action, argparse._StoreTrueAction):
        return f"{'with' if value else 'without'} {option}"
    if isinstance(action, argparse._StoreFalseAction):
        return f"{'without' if value else 'with'} {option}"
    return f"with {option} {value}"


def refuse_other_flags(
    parser: argparse.ArgumentParser,
    args: object,
    written: Mapping[str, Any],
    checked: Mapping[str, Any],
    where: str,
) -> None:
    """Refuse to resume, naming every flag that differs, when ``args`` sets one of ``checked``
    otherwise than the run that wrote a checkpoint did.

    Args:
        parser: the example's parser (for the flags' spellings).
        args: this run's flags, as attributes (the parsed namespace, or a config made from it).
        written: the flags the checkpoint recorded (its ``extra``).
        checked: the flags to compare, each with the value to assume when ``written`` lacks it
            (a checkpoint from before the flag existed).
        where: the checkpoint's folder, for the message.

    Raises:
        ValueError: a flag differs.
    """
    then = {dest: written.get(dest, default) for dest, default in checked.items()}
    differ = [dest for dest in checked if then[dest] != getattr(args, dest)]
    if differ:
        raise ValueError(
            f"the checkpoint in {where} was written "
            f"{' and '.join(flag_text(parser, d, then[d]) for d in differ)}; this run is "
            f"{' and '.join(flag_text(parser, d, getattr(args, d)) for d in differ)}: resume "
            "with the flags of the run that wrote it"
        )


def no_checkpoint_message(path: str) -> str:
    """What ``--resume`` says when the checkpoint ``path`` it would continue from is not there."""
    return (
        f"--resume: no checkpoint {path}; run without --resume first, or give the --logdir of "
        "the run to continue"
    )


def require_checkpoint(path: str) -> None:
    """Raise ``FileNotFoundError`` (``no_checkpoint_message``) unless the checkpoint ``path``
    exists: the check of a ``train(config)`` call that resumes, where there is no parser."""
    if not os.path.isfile(path):
        raise FileNotFoundError(no_checkpoint_message(path))


def refuse_resume_without_checkpoint(
    parser: argparse.ArgumentParser, resume: bool, logdir: str, name: str = "checkpoint.pt"
) -> None:
    """``--resume`` continues the run whose checkpoint ``name`` is in ``logdir``: with none there
    it is a usage error before anything starts (training afresh instead would seem to continue
    a run it never read, and then write over that folder)."""
    path = os.path.join(logdir, name)
    if resume and not os.path.isfile(path):
        parser.error(no_checkpoint_message(path))


def refuse_other_run(
    parser: argparse.ArgumentParser,
    args: Any,
    checkpoint: str,
    flags: Sequence[str],
    dataset_digest: str,
    assume: Mapping[str, Any] | None = None,
) -> None:
    """Refuse ``--resume`` from ``checkpoint`` when there is none, when it was written with other
    values of ``flags``, or when it trained on other data than ``dataset_digest`` (an offline
    example's ``parl.utils.offline_data.dataset_digest`` of its dataset, which the checkpoint
    records beside the flags; a checkpoint that records neither is taken to match).

    ``assume`` gives the value to read for a flag the checkpoint does not record, where that is
    known: a flag added after the checkpoint was written, every earlier run having used its
    default. Other unrecorded flags are taken to match.

    Raises:
        FileNotFoundError: no checkpoint.
        ValueError: a flag or the data differ.
    """
    from parl.core.checkpoint import load_file  # torch: only when resuming

    require_checkpoint(checkpoint)
    written = load_file(checkpoint).get("extra", {})
    where = os.path.dirname(checkpoint)
    checked = {flag: (assume or {}).get(flag, getattr(args, flag)) for flag in flags}
    refuse_other_flags(parser, args, written, checked, where)
    if written.get("dataset_digest", dataset_digest) != dataset_digest:
        raise ValueError(
            f"the checkpoint in {where} was trained on --dataset {written['dataset']}, and "
            f"--dataset {args.dataset} holds other data: resume with the dataset of the run "
            "that wrote it"
        )


def refuse_other_env(args: Any, env: Any, sizes: tuple[int, int]) -> None:
    """Refuse ``--dataset`` whose observation and action ``sizes`` are not those of ``env`` (made
    from ``--env``): the data was collected on another env.

    Raises:
        ValueError: the sizes differ.
    """
    wanted = (int(env.observation_space.shape[0]), int(env.action_space.shape[0]))
    if tuple(sizes) != wanted:
        raise ValueError(
            f"--dataset {args.dataset} has observations of {sizes[0]} values and actions of "
            f"{sizes[1]}, but {args.env} has {wanted[0]} and {wanted[1]}: pass the --env the "
            "dataset was collected on"
        )
