"""parl.Agent: numpy in/out, train/eval, model checkpoints and full training checkpoints."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

import parl
from parl.algorithms import PolicyGradient
from parl.core import checkpoint
from parl.utils import ReplayMemory

from .conftest import MakeAgent
from .nets import PGAgent, PolicyNet


def test_numpy_in_numpy_out(make_agent: MakeAgent) -> None:
    agent = make_agent()
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    probs = agent.predict(obs)
    assert isinstance(probs, np.ndarray) and probs.shape == (5, 2)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-6)
    actions = agent.sample(obs)
    assert actions.shape == (5,) and actions.dtype == np.int64
    assert set(actions.tolist()) <= {0, 1}
    loss = agent.learn(obs, actions, np.ones(5, dtype=np.float32))
    assert isinstance(loss, float) and np.isfinite(loss)


def test_agent_needs_an_algorithm() -> None:
    with pytest.raises(
        TypeError, match=r"PGAgent\(algorithm\): algorithm must be a parl.Algorithm, got PolicyNet"
    ):
        PGAgent(PolicyNet())  # type: ignore[arg-type]


def test_base_agent_methods_say_what_is_missing(make_agent: MakeAgent) -> None:
    agent = parl.Agent(make_agent().alg)
    with pytest.raises(NotImplementedError, match="Agent does not implement learn"):
        agent.learn()


def test_save_restore_gives_identical_predictions(make_agent: MakeAgent, tmp_path: Path) -> None:
    agent = make_agent(seed=0)
    obs = np.random.default_rng(1).standard_normal((64, 4)).astype(np.float32)
    agent.learn(obs, agent.sample(obs), np.ones(64, dtype=np.float32))
    path = tmp_path / "deep" / "folders" / "model.ckpt"  # parents are created
    assert agent.save(path) == path
    fresh = make_agent(seed=123)
    assert not np.array_equal(fresh.predict(obs), agent.predict(obs))
    fresh.restore(path)
    np.testing.assert_array_equal(fresh.predict(obs), agent.predict(obs))
    # A plain state_dict: readable without parl.
    state = torch.load(path, weights_only=True)
    assert sorted(state) == sorted(agent.alg.model.state_dict())


def test_save_and_restore_an_explicit_model(make_agent: MakeAgent, tmp_path: Path) -> None:
    agent = make_agent(seed=0)
    other = PolicyNet()
    agent.save(tmp_path / "other.ckpt", model=other)
    target = PolicyNet()
    agent.restore(tmp_path / "other.ckpt", model=target, map_location="cpu")
    for name, array in other.get_weights().items():
        np.testing.assert_array_equal(target.get_weights()[name], array)
    with pytest.raises(TypeError, match="model must be a parl.Model or None"):
        agent.save(tmp_path / "x.ckpt", model="model")  # type: ignore[arg-type]


def test_restore_other_architecture_names_the_tensor(make_agent: MakeAgent, tmp_path: Path) -> None:
    make_agent(hidden=16).save(tmp_path / "wide.ckpt")
    with pytest.raises(
        ValueError, match=r"'fc1.weight' has shape \(16, 4\) but PolicyNet expects \(8, 4\)"
    ):
        make_agent(hidden=8).restore(tmp_path / "wide.ckpt")
    with pytest.raises(FileNotFoundError, match="no checkpoint file"):
        make_agent().restore(tmp_path / "missing.ckpt")
    with pytest.raises(TypeError, match="save_path must be a str or os.PathLike"):
        make_agent().save(42)  # type: ignore[arg-type]


def test_a_crash_mid_save_keeps_the_old_checkpoint(
    make_agent: MakeAgent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.ckpt"
    agent = make_agent(seed=0)
    agent.save(path)
    good = path.read_bytes()

    def crash(obj: object, handle: object) -> None:
        handle.write(b"half a checkpoint")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        make_agent(seed=1).save(path)
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["model.ckpt"]  # no temporary file left behind


def test_saved_files_get_the_permissions_a_plain_write_gives(
    make_agent: MakeAgent, tmp_path: Path
) -> None:
    """Atomic saves go through a temporary file; the result still has the mode torch.save
    would give it (0666 less the umask, so a shared cluster folder's readers can read it), and
    an existing file keeps its own mode when it is saved over."""
    agent = make_agent()
    old_umask = os.umask(0o022)
    try:
        agent.save(tmp_path / "model.ckpt")
        agent.save_checkpoint(tmp_path / "checkpoint.pt")
        memory = ReplayMemory(max_size=4, obs_dim=2, act_dim=1)
        memory.save(tmp_path / "rpm.npz")
        for name in ("model.ckpt", "checkpoint.pt", "rpm.npz"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
        os.chmod(tmp_path / "model.ckpt", 0o640)
        agent.save(tmp_path / "model.ckpt")
        assert stat.S_IMODE((tmp_path / "model.ckpt").stat().st_mode) == 0o640
        os.umask(0o077)
        agent.save(tmp_path / "private.ckpt")
        assert stat.S_IMODE((tmp_path / "private.ckpt").stat().st_mode) == 0o600
    finally:
        os.umask(old_umask)
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


@pytest.mark.parametrize("damage", ["empty", "cut in half", "cut at the end", "text"])
def test_a_damaged_checkpoint_is_named_as_such_by_restore_and_restore_checkpoint(
    make_agent: MakeAgent, tmp_path: Path, damage: str
) -> None:
    """torch.load used to say only "[Errno 22] Invalid argument", nothing (an empty EOFError),
    "PytorchStreamReader failed..." or "Unsupported operand 103"."""
    agent = make_agent()
    for save, load in (
        (agent.save, agent.restore),
        (agent.save_checkpoint, agent.restore_checkpoint),
    ):
        path = tmp_path / "damaged.pt"
        save(path)
        data = path.read_bytes()
        damaged = {"empty": b"", "cut in half": data[: len(data) // 2],
                   "cut at the end": data[:-10], "text": b"garbage\n"}[damage]  # fmt: skip
        path.write_bytes(damaged)
        with pytest.raises(ValueError, match=r"damaged.pt' \(\d+ bytes\) cannot be read: it is "
                           r"truncated or corrupted"):  # fmt: skip
            load(path)


def test_train_and_eval_switch_dropout(make_agent: MakeAgent) -> None:
    agent = make_agent(dropout=0.5, hidden=64)
    obs = np.random.default_rng(0).standard_normal((32, 4)).astype(np.float32)
    assert agent.training and agent.alg.model.training
    assert not np.array_equal(agent.predict(obs), agent.predict(obs))  # dropout is on
    agent.eval()
    assert not agent.training and not agent.alg.model.training
    first = agent.predict(obs)
    np.testing.assert_array_equal(agent.predict(obs), first)
    model = agent.alg.model
    with torch.no_grad():  # eval mode is the network without dropout
        expected = torch.softmax(model.fc2(torch.tanh(model.fc1(torch.from_numpy(obs)))), dim=-1)
    np.testing.assert_allclose(first, expected.numpy(), rtol=1e-6)
    agent.train()
    assert agent.training and agent.alg.model.training


def test_weights_round_trip_between_agents(make_agent: MakeAgent) -> None:
    learner, actor = make_agent(seed=0), make_agent(seed=1)
    actor.set_weights(learner.get_weights())
    obs = np.ones((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(actor.predict(obs), learner.predict(obs))
    assert list(learner.get_weights()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    actor.alg.model.set_weights(learner.get_weights())  # PARL's pattern on a bare model too
    assert list(learner.get_all_weights()) == [f"model.{n}" for n in learner.get_weights()]


def _train_steps(agent: PGAgent, steps: int) -> None:
    """Updates whose data come from numpy's and Python's global generators and whose actions
    come from torch's, so a resumed run matches only if every generator was restored."""
    for _ in range(steps):
        obs = np.random.standard_normal((16, 4)).astype(np.float32) * random.uniform(0.5, 2.0)
        agent.learn(obs, agent.sample(obs), np.random.standard_normal(16).astype(np.float32))


def test_training_checkpoint_extra_takes_numpy_data_and_refuses_what_cannot_load(
    make_agent: MakeAgent, tmp_path: Path
) -> None:
    """Numpy arrays and scalars in ``extra`` (``wrap_rms``'s ``get_rms_state()``, a numpy
    generator's state) come back as they went in; they used to be saved and then refused by
    the ``weights_only`` load when resuming. An object no load could read is refused when
    saving, with the key that holds it."""
    from parl.env.mujoco_wrappers import wrap_rms

    agent = make_agent(seed=0)
    env = wrap_rms(gymnasium.make("Pendulum-v1"), 0.99, compat=False)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    rms = env.get_rms_state()
    extra = {
        "rms": rms,
        "rng": np.random.default_rng(3).bit_generator.state,
        "mixed": [np.int32(4), np.arange(3, dtype=np.uint8), (np.float32(0.5), "s", None)],
    }
    path = tmp_path / "checkpoint.pt"
    agent.save_checkpoint(path, extra=extra)
    back = make_agent(seed=1).restore_checkpoint(path).extra
    for key in ("ob_rms", "ret_rms"):
        for field in ("mean", "var"):
            got, want = back["rms"][key][field], rms[key][field]
            assert isinstance(got, np.ndarray) and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
        assert back["rms"][key]["count"] == rms[key]["count"]
    assert back["rng"] == extra["rng"]
    scalar, array, inner = back["mixed"]
    assert type(scalar) is np.int32 and scalar == 4
    assert array.dtype == np.uint8 and array.tolist() == [0, 1, 2]
    assert type(inner[0]) is np.float32 and inner[1:] == ("s", None)
    env.set_rms_state(back["rms"])  # what the PPO example does on --resume
    with pytest.raises(TypeError, match=r"extra\['bad'\]\[0\] is a object"):
        agent.save_checkpoint(tmp_path / "bad.pt", extra={"bad": [object()]})
    with pytest.raises(TypeError, match="dtype <U1"):
        agent.save_checkpoint(tmp_path / "bad.pt", extra={"s": np.array(["a"])})
    assert not (tmp_path / "bad.pt").exists()


def test_training_checkpoint_resumes_exactly(
    make_agent: MakeAgent, tmp_path: Path, single_thread: None
) -> None:
    path = tmp_path / "run" / "checkpoint.pt"
    parl.utils.set_seed(7)
    agent = make_agent(seed=7)
    _train_steps(agent, 3)
    agent.save_checkpoint(path, counters={"step": 3, "episode": np.int64(1)}, extra={"note": "x"})
    _train_steps(agent, 3)
    reference = agent.get_all_weights()

    parl.utils.set_seed(99)  # a different state everywhere
    resumed = make_agent(seed=99)
    state = resumed.restore_checkpoint(path)
    assert state.counters == {"step": 3, "episode": 1}
    assert state.extra == {"note": "x"}
    _train_steps(resumed, 3)
    for name, array in resumed.get_all_weights().items():
        np.testing.assert_array_equal(array, reference[name], err_msg=name)

    # Without the optimizer and generator states the run diverges: the test can fail.
    parl.utils.set_seed(99)
    weights_only = make_agent(seed=99)
    weights_only.alg.model.load_state_dict(torch.load(path, weights_only=True)["models"]["model"])
    _train_steps(weights_only, 3)
    assert not np.array_equal(
        weights_only.get_all_weights()["model.fc1.weight"], reference["model.fc1.weight"]
    )


class _OnAnotherDevice:
    """Stands for a tensor that ``map_location`` put on a GPU: numpy cannot read it until it is
    copied to the CPU (``Tensor.numpy`` on a CUDA tensor raises this ``TypeError``)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def cpu(self) -> torch.Tensor:
        return self.tensor

    def numpy(self) -> np.ndarray:
        raise TypeError("can't convert cuda:0 device type tensor to numpy")


def test_generator_states_restore_from_tensors_a_map_location_moved() -> None:
    """``restore_checkpoint(path, map_location="cuda")`` lands the saved generator states on the
    GPU with everything else; they are restored from CPU copies."""
    parl.utils.set_seed(3)
    state = checkpoint.capture_rng_state()
    expected = (random.random(), float(np.random.random()), float(torch.rand(())))
    moved = {
        **state,
        "numpy": {**state["numpy"], "key": _OnAnotherDevice(state["numpy"]["key"])},
        "torch": _OnAnotherDevice(state["torch"]),
    }
    parl.utils.set_seed(99)
    checkpoint.restore_rng_state(moved)
    assert (random.random(), float(np.random.random()), float(torch.rand(()))) == expected


def test_training_checkpoint_bad_input(make_agent: MakeAgent, tmp_path: Path) -> None:
    agent = make_agent()
    with pytest.raises(TypeError, match=r"counters\['step'\] must be an int or float, got str"):
        agent.save_checkpoint(tmp_path / "c.pt", counters={"step": "3"})
    agent.save(tmp_path / "model.ckpt")
    with pytest.raises(ValueError, match="is not a training checkpoint"):
        agent.restore_checkpoint(tmp_path / "model.ckpt")
    make_agent(hidden=16).save_checkpoint(tmp_path / "wide.pt")
    with pytest.raises(ValueError, match=r"is a training checkpoint.*restore_checkpoint\(path\)"):
        agent.restore(tmp_path / "wide.pt")
    with pytest.raises(ValueError, match=r"model 'model'.*'fc1.weight' has shape \(16, 4\)"):
        agent.restore_checkpoint(tmp_path / "wide.pt")


def test_learning_rate_scheduler_is_checkpointed(make_agent: MakeAgent, tmp_path: Path) -> None:
    agent = make_agent()
    alg = agent.alg
    alg.lr_scheduler = torch.optim.lr_scheduler.StepLR(alg.optimizer, step_size=1, gamma=0.5)
    alg.optimizer.step()
    alg.lr_scheduler.step()
    agent.save_checkpoint(tmp_path / "c.pt")
    other = make_agent()
    other.alg.lr_scheduler = torch.optim.lr_scheduler.StepLR(other.alg.optimizer, 1, gamma=0.5)
    other.restore_checkpoint(tmp_path / "c.pt")
    assert other.alg.lr_scheduler.last_epoch == 1
    assert other.alg.optimizer.param_groups[0]["lr"] == pytest.approx(alg.lr * 0.5)


def test_policy_gradient_on_cpu_by_name() -> None:
    alg = PolicyGradient(PolicyNet(), lr=0.01, device="cpu")
    assert alg.device == torch.device("cpu")


def test_a_restore_that_fails_on_the_optimizer_leaves_the_model_unchanged(
    make_agent: MakeAgent, tmp_path: Path
) -> None:
    """The models fit but the optimizer does not (other parameter groups): the error names the
    optimizer, and the model keeps its own weights instead of the checkpoint's."""
    source = make_agent(seed=1)
    _train_steps(source, 2)
    source.save_checkpoint(tmp_path / "c.pt")
    target = make_agent(seed=2)
    params = list(target.alg.model.parameters())
    target.alg.optimizer = torch.optim.Adam([{"params": params[:1]}, {"params": params[1:]}])
    before = target.get_all_weights()
    assert not np.array_equal(before["model.fc1.weight"], source.get_weights()["fc1.weight"])
    with pytest.raises(ValueError, match="optimizer 'optimizer' does not fit"):
        target.restore_checkpoint(tmp_path / "c.pt")
    for name, array in target.get_all_weights().items():
        np.testing.assert_array_equal(array, before[name], err_msg=name)


def test_a_restore_into_another_kind_of_optimizer_is_refused_naming_both(
    make_agent: MakeAgent, tmp_path: Path
) -> None:
    """Adam's state loads into an RMSprop without complaint, and its first step then fails on
    a missing key: the restore refuses it instead; a checkpoint that does not record the
    classes (written before they were) still restores."""
    source = make_agent(seed=1)
    _train_steps(source, 2)
    source.save_checkpoint(tmp_path / "c.pt")
    target = make_agent(seed=2)
    target.alg.optimizer = torch.optim.RMSprop(target.alg.model.parameters())
    before = target.get_all_weights()
    with pytest.raises(ValueError, match="optimizer 'optimizer' was Adam .* it is RMSprop here"):
        target.restore_checkpoint(tmp_path / "c.pt")
    for name, array in target.get_all_weights().items():
        np.testing.assert_array_equal(array, before[name], err_msg=name)
    payload = torch.load(tmp_path / "c.pt", weights_only=True)
    del payload["optimizer_classes"]
    torch.save(payload, tmp_path / "older.pt")
    same = make_agent(seed=2)
    same.restore_checkpoint(tmp_path / "older.pt")
    _train_steps(same, 1)


def test_device_is_settable_as_parl_agents_set_it() -> None:
    class DeviceFirst(parl.Agent):
        def __init__(self, algorithm: parl.Algorithm) -> None:
            self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            super().__init__(algorithm)

    class DeviceAfter(parl.Agent):
        def __init__(self, algorithm: parl.Algorithm) -> None:
            super().__init__(algorithm)
            self.device = "cpu"

        def predict(self, obs: np.ndarray) -> np.ndarray:
            return self.to_numpy(self.alg.predict(self.to_tensor(obs)))

    alg = PolicyGradient(PolicyNet(), lr=0.01)
    expected = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert DeviceFirst(alg).device == expected
    agent = DeviceAfter(alg)
    assert agent.device == torch.device("cpu")
    assert agent.predict(np.zeros((1, 4), np.float32)).shape == (1, 2)
    agent.device = None  # back to the algorithm's device
    assert agent.device == alg.device
    with pytest.raises(ValueError, match="'gpu0' is not a valid torch device"):
        agent.device = "gpu0"
