"""``MAenv(..., legacy_dynamics=True)`` moves MPE's particles as PettingZoo 1.22 did (the
scenarios PARL's ``MAenv`` opened): checked against the ``World.integrate_state`` of PettingZoo
1.22.3's published wheel, downloaded from PyPI when the tests run (never stored in this
repository), on the same worlds and actions. mpe2's own order shows a push one step later."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from filelock import FileLock

from parl.env.multiagent_env import MAenv

from .multiagent_support import require_multiagent

VERSION = "1.22.3"  # the last PettingZoo before the dynamics changed (1.23.0)
WHEEL = f"PettingZoo-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "75bad0f05a0167f2c7a08bfc691b7e8f14f474bff5fce0306b27745f301b9472"
CORE = "pettingzoo/mpe/_mpe_utils/core.py"  # imports numpy only


@pytest.fixture(autouse=True)
def _multiagent_extra() -> None:
    require_multiagent()


def _unavailable(message: str) -> None:
    """Skip, or fail under ``CI=true``: CI must compare with the real code."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: this comparison may not be skipped)", False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def old_core(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """PettingZoo 1.22.3's MPE ``core`` module, from its published wheel."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers of one run share the download
    folder = root / f"pettingzoo-{VERSION}-wheel"
    folder.mkdir(exist_ok=True)
    wheel = folder / WHEEL
    with FileLock(str(folder / "download.lock")):
        if not wheel.is_file():
            command = [
                sys.executable, "-m", "pip", "download", f"pettingzoo=={VERSION}", "--no-deps",
                "--only-binary=:all:", "--disable-pip-version-check", "-q", "-d", str(folder),
            ]  # fmt: skip
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as exc:
                _unavailable(f"could not download pettingzoo=={VERSION}: {exc}")
            if done.returncode != 0 or not wheel.is_file():
                _unavailable(f"could not download pettingzoo=={VERSION}: {done.stderr[-800:]}")
        if hashlib.sha256(wheel.read_bytes()).hexdigest() != WHEEL_SHA256:
            pytest.fail(f"{wheel} is not PyPI's PettingZoo {VERSION} (sha256 differs)", False)
        with zipfile.ZipFile(wheel) as archive:
            path = Path(archive.extract(CORE, folder))
    spec = importlib.util.spec_from_file_location("pettingzoo_1_22_mpe_core", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _positions(env: MAenv) -> np.ndarray:
    return np.array([entity.state.p_pos for entity in env.env.unwrapped.world.entities])


def _actions(env: MAenv, rng: np.random.Generator, push: bool) -> list:
    """Random actions, or with ``push`` every agent's action 2 (a push along x for the agents
    that move), held long enough to reach the top speeds."""
    if env.continuous_actions:
        if push:
            return [np.where(np.arange(size) == 2, 1.0, -1.0).astype(np.float32)
                    for size in env.act_shape_n]  # fmt: skip
        return [rng.uniform(-1.0, 1.0, size).astype(np.float32) for size in env.act_shape_n]
    return [2 if push else int(rng.integers(size)) for size in env.act_shape_n]


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize(
    "name", ["simple_spread", "simple_speaker_listener", "simple_tag", "simple_push"]
)
def test_legacy_dynamics_move_as_pettingzoo_1_22(
    old_core: ModuleType, name: str, continuous: bool
) -> None:
    """Whole episodes (collisions, a speaker that cannot move, top speeds): every observation,
    reward and position is the one PettingZoo 1.22's integration gives."""
    ours = MAenv(name, continuous, legacy_dynamics=True)
    theirs = MAenv(name, continuous)
    world = theirs.env.unwrapped.world
    world.integrate_state = types.MethodType(old_core.World.integrate_state, world)
    mpe2 = MAenv(name, continuous)
    rng = np.random.default_rng(7)
    for env in (ours, theirs, mpe2):
        env.reset(seed=11)
    differs = capped = False
    for step in range(ours.max_step):
        actions = _actions(ours, rng, push=step < ours.max_step // 2)
        a, b, c = (env.step(actions) for env in (ours, theirs, mpe2))
        for got, want in zip(a[0], b[0], strict=True):  # each agent's observation
            np.testing.assert_array_equal(got, want)
        assert a[1:3] == b[1:3]  # rewards, dones
        np.testing.assert_array_equal(_positions(ours), _positions(theirs))
        differs = differs or not np.array_equal(_positions(ours), _positions(mpe2))
        capped = capped or any(
            e.max_speed is not None and np.isclose(np.hypot(*e.state.p_vel), e.max_speed)
            for e in ours.env.unwrapped.world.entities
        )
    assert differs, "mpe2's own order moved every particle the same way"
    if name == "simple_tag":  # its agents have top speeds: the episode reached them
        assert capped


def test_mpe2_shows_a_push_one_step_later_and_legacy_in_the_same_step() -> None:
    moved = {}
    for legacy in (False, True):
        env = MAenv("simple", legacy_dynamics=legacy)
        env.reset(seed=3)
        start = _positions(env)[0].copy()
        env.step([2])  # a push along x, from rest
        first = _positions(env)[0] - start
        env.step([0])  # no push: the particle coasts
        moved[legacy] = (first, _positions(env)[0] - start)
    (mpe2_first, mpe2_second), (legacy_first, legacy_second) = moved[False], moved[True]
    assert np.all(mpe2_first == 0) and mpe2_second[0] > 0
    assert legacy_first[0] > 0 and legacy_second[0] > legacy_first[0]
    assert MAenv("simple", legacy_dynamics=True).legacy_dynamics


def test_legacy_dynamics_is_a_bool_and_for_mpe_only() -> None:
    with pytest.raises(TypeError, match="legacy_dynamics"):
        MAenv("simple", legacy_dynamics=1)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match="legacy dynamics .legacy_dynamics=True.*are for MPE's particle scenarios"
    ):
        MAenv("Foraging-8x8-2p-2f-coop-v3", legacy_dynamics=True)
