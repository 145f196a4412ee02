"""Tools around training: logging, TensorBoard, replay memory, schedules, returns, seeding,
and PARL's small helpers (numpy softmax and cross-entropy, paths, ports, processes).

Names are loaded on first access, so ``from parl.utils import logger`` loads neither torch nor
tensorboard; only ``get_device`` and the first ``summary`` write need torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parl._lazy import lazy_attributes

# name -> (module, attribute or None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "logger": ("parl.utils.logger", None),
    "summary": ("parl.utils.summary", None),
    "tensorboard": ("parl.utils.tensorboard", None),
    "np_utils": ("parl.utils.np_utils", None),
    "path_utils": ("parl.utils.path_utils", None),
    "np_softmax": ("parl.utils.np_utils", "np_softmax"),
    "np_cross_entropy": ("parl.utils.np_utils", "np_cross_entropy"),
    "format_uniform_path": ("parl.utils.path_utils", "format_uniform_path"),
    "kill_process": ("parl.utils.utils", "kill_process"),
    "isnotebook": ("parl.utils.utils", "isnotebook"),
    "get_port_from_range": ("parl.utils.machine_info", "get_port_from_range"),
    "CSVLogger": ("parl.utils.csv_logger", "CSVLogger"),
    "ReplayMemory": ("parl.utils.replay_memory", "ReplayMemory"),
    "PrioritizedReplayMemory": ("parl.utils.prioritized_replay_memory", "PrioritizedReplayMemory"),
    "Transitions": ("parl.utils.replay_memory", "Transitions"),
    "LinearDecayScheduler": ("parl.utils.scheduler", "LinearDecayScheduler"),
    "PiecewiseScheduler": ("parl.utils.scheduler", "PiecewiseScheduler"),
    "calc_gae": ("parl.utils.returns", "calc_gae"),
    "calc_discount_sum_rewards": ("parl.utils.returns", "calc_discount_sum_rewards"),
    "WindowStat": ("parl.utils.stats", "WindowStat"),
    "TimeStat": ("parl.utils.stats", "TimeStat"),
    "set_seed": ("parl.utils.seeding", "set_seed"),
    "seed_env": ("parl.utils.seeding", "seed_env"),
    "worker_seed": ("parl.utils.seeding", "worker_seed"),
    "get_device": ("parl.utils.device", "get_device"),
    "rl_utils": ("parl.utils.rl_utils", None),
    "time_stat": ("parl.utils.time_stat", None),
    "window_stat": ("parl.utils.window_stat", None),
    "machine_info": ("parl.utils.machine_info", None),
    "scheduler": ("parl.utils.scheduler", None),
    "get_gpu_count": ("parl.utils.machine_info", "get_gpu_count"),
    "get_ip_address": ("parl.utils.machine_info", "get_ip_address"),
    "get_free_tcp_port": ("parl.utils.machine_info", "get_free_tcp_port"),
    "is_port_available": ("parl.utils.machine_info", "is_port_available"),
    "is_gpu_available": ("parl.utils.machine_info", "is_gpu_available"),
    "_IS_WINDOWS": ("parl.utils.utils", "_IS_WINDOWS"),
    "_IS_MAC": ("parl.utils.utils", "_IS_MAC"),
    "TimeBreakdown": ("parl.utils.time_breakdown", "TimeBreakdown"),
    "SharedWeights": ("parl.utils.weight_sync", "SharedWeights"),
    "ObsNormalizer": ("parl.utils.obs_norm", "ObsNormalizer"),
    "TrajectoryBatch": ("parl.utils.trajectory_batch", "TrajectoryBatch"),
    "TrajectorySampler": ("parl.utils.trajectory_batch", "TrajectorySampler"),
    "trajectory_window": ("parl.utils.trajectory_batch", "trajectory_window"),
    "global_config": ("parl.utils.globvars", "global_config"),
    "GlobalConfig": ("parl.utils.globvars", "GlobalConfig"),
    "check_model_method": ("parl.utils.utils", "check_model_method"),
    "has_func": ("parl.utils.utils", "has_func"),
    "to_str": ("parl.utils.utils", "to_str"),
    "to_byte": ("parl.utils.utils", "to_byte"),
    "MAX_INT32": ("parl.utils.utils", "MAX_INT32"),
    "utils": ("parl.utils.utils", None),
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from parl.utils import logger, summary, tensorboard
    from parl.utils.csv_logger import CSVLogger
    from parl.utils.device import get_device
    from parl.utils.globvars import GlobalConfig, global_config
    from parl.utils.machine_info import (
        get_free_tcp_port,
        get_gpu_count,
        get_ip_address,
        get_port_from_range,
        is_gpu_available,
        is_port_available,
    )
    from parl.utils.np_utils import np_cross_entropy, np_softmax
    from parl.utils.obs_norm import ObsNormalizer
    from parl.utils.path_utils import format_uniform_path
    from parl.utils.prioritized_replay_memory import PrioritizedReplayMemory
    from parl.utils.replay_memory import ReplayMemory, Transitions
    from parl.utils.returns import calc_discount_sum_rewards, calc_gae
    from parl.utils.scheduler import LinearDecayScheduler, PiecewiseScheduler
    from parl.utils.seeding import seed_env, set_seed, worker_seed
    from parl.utils.stats import TimeStat, WindowStat
    from parl.utils.time_breakdown import TimeBreakdown
    from parl.utils.trajectory_batch import TrajectoryBatch, TrajectorySampler, trajectory_window
    from parl.utils.utils import (
        MAX_INT32,
        check_model_method,
        has_func,
        isnotebook,
        kill_process,
        to_byte,
        to_str,
    )
    from parl.utils.weight_sync import SharedWeights


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "CSVLogger",
    "GlobalConfig",
    "MAX_INT32",
    "check_model_method",
    "global_config",
    "has_func",
    "to_byte",
    "to_str",
    "LinearDecayScheduler",
    "PiecewiseScheduler",
    "ReplayMemory",
    "TimeStat",
    "Transitions",
    "WindowStat",
    "calc_discount_sum_rewards",
    "calc_gae",
    "get_device",
    "get_gpu_count",
    "get_free_tcp_port",
    "get_ip_address",
    "is_gpu_available",
    "is_port_available",
    "logger",
    "seed_env",
    "set_seed",
    "summary",
    "worker_seed",
]
__all__ += ["PrioritizedReplayMemory"]
__all__ += ["ObsNormalizer", "SharedWeights", "TimeBreakdown"]
__all__ += ["TrajectoryBatch", "TrajectorySampler", "trajectory_window"]
__all__ += ["tensorboard", "np_softmax", "np_cross_entropy", "format_uniform_path"]
__all__ += ["kill_process", "isnotebook", "get_port_from_range"]
