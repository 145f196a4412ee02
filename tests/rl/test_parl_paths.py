"""PARL 2.x import paths of utilities and envs resolve, and behave."""

from __future__ import annotations

import time

import numpy as np
import pytest


def test_parl_utility_paths() -> None:
    from parl.utils import machine_info
    from parl.utils.rl_utils import calc_discount_sum_rewards, calc_gae
    from parl.utils.scheduler import LinearDecayScheduler, PiecewiseScheduler
    from parl.utils.time_stat import TimeStat
    from parl.utils.window_stat import WindowStat

    # GAE by hand: gamma 0.5, lam 1, values 0, next value 0 -> discounted returns.
    np.testing.assert_allclose(calc_gae([1.0, 1.0, 1.0], [0.0] * 3, 0.0, 0.5, 1.0), [1.75, 1.5, 1])
    np.testing.assert_allclose(calc_discount_sum_rewards([1.0, 1.0], 0.5), [1.5, 1.0])
    assert LinearDecayScheduler(1.0, 100).step(25) == 0.75
    assert PiecewiseScheduler([(0, 1.0), (10, 0.5)]).step(10) == 0.5
    stat = WindowStat(2)
    for value in (1.0, 2.0, 4.0):
        stat.add(value)
    assert stat.mean == 3.0
    timer = TimeStat()
    with timer:
        time.sleep(0.001)
    assert timer.mean is not None and timer.mean > 0
    assert isinstance(machine_info.get_ip_address(), str)
    assert machine_info.get_ip_address().count(".") == 3


def test_gpu_count_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from parl.utils.machine_info import get_gpu_count, is_gpu_available

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert get_gpu_count() == 2 and is_gpu_available()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert get_gpu_count() == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert get_gpu_count() == 0


def test_parl_env_paths() -> None:
    import parl
    from parl.env import ActionMappingWrapper, CompatWrapper, VectorEnv  # noqa: F401
    from parl.env.atari_wrappers import MonitorEnv, get_wrapper_by_cls, wrap_deepmind  # noqa: F401
    from parl.env.compat_wrappers import is_gym_version_ge
    from parl.env.mujoco_wrappers import wrap_rms  # noqa: F401
    from parl.env.vector_env import VectorEnv as SameVectorEnv

    assert SameVectorEnv is VectorEnv and is_gym_version_ge("0.26.0")
    assert parl.env.CompatWrapper is CompatWrapper
    assert issubclass(parl.WeightsMismatchError, RuntimeError)


def test_parl_core_and_utils_paths_that_algorithms_and_tutorials_import() -> None:
    import argparse
    import logging

    import torch

    import parl
    from parl.core.torch.agent import Agent
    from parl.core.torch.algorithm import Algorithm
    from parl.core.torch.model import Model
    from parl.utils import global_config, logger
    from parl.utils.utils import MAX_INT32, check_model_method, has_func, to_byte, to_str

    assert (Model, Algorithm, Agent) == (parl.Model, parl.Algorithm, parl.Agent)
    net = torch.nn.Linear(2, 2)
    check_model_method(net, "forward", "MyAlgorithm")
    with pytest.raises(TypeError, match=r"MyAlgorithm needs model to define policy\(\)"):
        check_model_method(net, "policy", "MyAlgorithm")
    assert has_func(net, "forward") and not has_func(net, "weight")

    class PlainPolicy:  # not an nn.Module: PARL checks only that the method is there
        def policy(self, obs: object) -> object:
            return obs

    check_model_method(PlainPolicy(), "policy", "MyAlgorithm")
    with pytest.raises(TypeError, match=r"needs model to define value\(\), but PlainPolicy"):
        check_model_method(PlainPolicy(), "value", "MyAlgorithm")
    assert to_str(b"ab") == "ab" == to_str("ab") and to_byte("ab") == b"ab"
    assert MAX_INT32 == 2**31 - 1
    from parl.utils import _IS_WINDOWS, get_free_tcp_port, is_port_available

    assert _IS_WINDOWS is False and is_port_available(get_free_tcp_port())
    assert (logger.DEBUG, logger.INFO, logger.WARNING) == (
        logging.DEBUG,
        logging.INFO,
        logging.WARNING,
    )
    import contextlib
    import io

    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        handler = logger.add_stdout_handler()
        logger.info("to stdout as well")
        logger.remove_handler(handler)
        logger.info("to the console only")
    assert "to stdout as well" in captured.getvalue()
    assert "console only" not in captured.getvalue()
    logger.setLevel(logger.WARNING)
    assert logger.get_logger().level == logging.WARNING
    logger.set_level(logger.INFO)

    global_config.load_argument(argparse.Namespace(embed_dim=128, n_head=1))
    from parl.utils.globvars import global_config as same

    assert same is global_config and (same.embed_dim, same.n_head) == (128, 1)
    with pytest.raises(TypeError, match="needs the argparse.Namespace"):
        global_config.load_argument({"embed_dim": 1})  # type: ignore[arg-type]
