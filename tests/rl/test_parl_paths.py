"""PARL 2.x import paths of utilities and envs resolve, and behave."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp


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


# -- PARL's small helpers in parl.utils ------------------------------------------------------------
_logits = hnp.arrays(
    np.float64,
    hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
    elements=st.floats(-50, 50),
)


@settings(max_examples=40, deadline=None)
@given(logits=_logits, shift=st.floats(-100, 100))
def test_np_softmax_gives_probabilities_on_the_last_axis(logits: np.ndarray, shift: float) -> None:
    from parl.utils import np_softmax

    probs = np_softmax(logits)
    assert probs.shape == logits.shape and np.all(probs >= 0)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np_softmax(logits + shift), probs, atol=1e-12)  # shift-invariant
    naive = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)  # PARL's formula
    np.testing.assert_allclose(probs, naive, rtol=1e-9, atol=1e-300)


def test_np_softmax_does_not_overflow_and_names_bad_input() -> None:
    from parl.utils import np_softmax

    np.testing.assert_allclose(np_softmax([1000.0, 1000.0]), [0.5, 0.5])
    with pytest.raises(TypeError, match="logits must be a numeric array"):
        np_softmax(["a", "b"])


@settings(max_examples=40, deadline=None)
@given(
    logits=hnp.arrays(
        np.float64, st.tuples(st.integers(1, 4), st.integers(2, 5)), elements=st.floats(-5, 5)
    ),  # fmt: skip
    data=st.data(),
)
def test_np_cross_entropy_of_sparse_and_one_hot_labels_agree(
    logits: np.ndarray, data: st.DataObject
) -> None:
    from parl.utils import np_cross_entropy, np_softmax

    probs = np_softmax(logits)
    rows, classes = probs.shape
    labels = np.array(
        data.draw(st.lists(st.integers(0, classes - 1), min_size=rows, max_size=rows))
    )
    sparse = np_cross_entropy(probs, labels[:, None])
    dense = np_cross_entropy(probs, np.eye(classes)[labels])
    assert sparse.shape == (rows, 1)
    np.testing.assert_allclose(sparse, dense)
    np.testing.assert_allclose(sparse[:, 0], -np.log(probs[np.arange(rows), labels]))
    # Gibbs: a distribution's entropy is the least cross-entropy against it
    entropy = np_cross_entropy(probs, probs)
    assert np.all(entropy <= np_cross_entropy(np_softmax(logits[::-1]), probs) + 1e-9)


def test_np_cross_entropy_names_bad_labels() -> None:
    from parl.utils import np_cross_entropy

    probs = np.full((2, 3), 1 / 3)
    with pytest.raises(TypeError, match=r"must be integers.*astype\(int\)"):
        np_cross_entropy(probs, np.array([[0.0], [1.0]]))
    with pytest.raises(ValueError, match=r"outside \[0, 3\)"):
        np_cross_entropy(probs, np.array([[0], [3]]))
    with pytest.raises(ValueError, match=r"labels of shape \(2, 2\) do not match probs"):
        np_cross_entropy(probs, np.zeros((2, 2)))


@settings(max_examples=60, deadline=None)
@given(path=st.text(alphabet="ab/\\.", max_size=12))
def test_format_uniform_path_uses_only_this_systems_separator(path: str) -> None:
    import os

    from parl.utils import format_uniform_path

    uniform = format_uniform_path(path)
    assert "\\" not in uniform  # os.sep is "/" here
    assert uniform.replace(os.sep, "") == path.replace("/", "").replace("\\", "")
    # a doubled "//" counts as one separator; other runs keep one per character
    assert uniform.count(os.sep) == path.replace("//", "/").count("/") + path.count("\\")
    assert format_uniform_path(r"a\b//c/d") == "a/b/c/d"
    with pytest.raises(TypeError, match="path must be a str"):
        format_uniform_path(None)  # type: ignore[arg-type]


def test_kill_process_kills_the_matching_processes_only() -> None:
    import subprocess
    import sys
    import uuid

    from parl.utils import kill_process

    token = f"kill-me-{uuid.uuid4().hex}"
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    target = subprocess.Popen([*sleeper, token])
    bystander = subprocess.Popen([*sleeper, "keep-me-" + token[len("kill-me-") :]])
    try:
        assert kill_process(f"kill-me-{token[8:]}$") == [target.pid]
        assert target.wait(timeout=10) == -9
        assert bystander.poll() is None
        assert kill_process(token) == []  # nothing left to match
    finally:
        for process in (target, bystander):
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
    with pytest.raises(ValueError, match="is not a regular expression"):
        kill_process("(")
    with pytest.raises(TypeError, match="regex_pattern must be a non-empty str"):
        kill_process("")


def test_get_port_from_range_and_isnotebook() -> None:
    import socket

    from parl.utils import get_free_tcp_port, get_port_from_range, isnotebook

    port = get_free_tcp_port()
    assert get_port_from_range(port, port) == port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        with pytest.raises(OSError, match=rf"every port in \[{port}, {port}\] is taken"):
            get_port_from_range(port, port)
    assert 20000 <= get_port_from_range(20000, 20100) <= 20100
    with pytest.raises(ValueError, match="start 5001 is above end 5000"):
        get_port_from_range(5001, 5000)
    with pytest.raises(ValueError, match=r"end must be an int in \[1, 65535\]"):
        get_port_from_range(1, 70000)
    assert isnotebook() is False
