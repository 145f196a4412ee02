"""``parl.utils.global_config``: PARL's process-wide namespace for settings.

``from parl.utils import global_config as config`` then ``config.batch_size = 32`` or
``config.load_argument(parser.parse_args())``; every module that imports it sees the same object.
"""

from __future__ import annotations

import argparse
import types

from parl.utils import logger

__all__ = ["GlobalConfig", "global_config"]


class GlobalConfig(types.SimpleNamespace):
    """A namespace of settings shared by the modules of one process."""

    def load_argument(self, args: argparse.Namespace) -> None:
        """Copy every attribute of ``args`` (from ``ArgumentParser.parse_args``) onto this
        namespace; one that already exists is overwritten with a warning naming it."""
        if not isinstance(args, argparse.Namespace):
            raise TypeError(
                f"load_argument needs the argparse.Namespace that parse_args() returns, "
                f"got {type(args).__name__}"
            )
        for name, value in vars(args).items():
            if hasattr(self, name):
                logger.warning(f"global_config.{name} is overwritten by the argument {name}")
            setattr(self, name, value)


global_config = GlobalConfig()
