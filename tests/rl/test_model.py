"""parl.Model: weights as numpy, set_weights checks, sync_weights_to with decay."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

import parl

from .nets import PolicyNet


def fill(model: nn.Module, value: float) -> None:
    with torch.no_grad():
        for tensor in model.parameters():
            tensor.fill_(value)


def test_get_weights_names_include_buffers_and_are_copies() -> None:
    model = PolicyNet(batch_norm=True)
    weights = model.get_weights()
    assert list(weights) == [
        "fc1.weight",
        "fc1.bias",
        "norm.weight",
        "norm.bias",
        "norm.running_mean",
        "norm.running_var",
        "norm.num_batches_tracked",
        "fc2.weight",
        "fc2.bias",
    ]
    assert weights["fc1.weight"].shape == (8, 4)
    assert weights["fc1.weight"].dtype == np.float32
    assert weights["norm.num_batches_tracked"].dtype == np.int64
    weights["fc1.weight"][...] = 123.0  # a copy: the model must not change
    assert not torch.any(model.fc1.weight == 123.0)


def test_set_weights_round_trip_including_buffers() -> None:
    torch.manual_seed(0)
    source = PolicyNet(batch_norm=True)
    source.train()
    source(torch.randn(16, 4))  # moves the batch-norm running statistics
    torch.manual_seed(1)
    target = PolicyNet(batch_norm=True)
    target.set_weights(source.get_weights())
    for name, array in source.get_weights().items():
        np.testing.assert_array_equal(target.get_weights()[name], array, err_msg=name)
    assert int(target.norm.num_batches_tracked) == 1
    source.eval()
    target.eval()
    obs = torch.randn(5, 4)
    torch.testing.assert_close(target(obs), source(obs), rtol=0, atol=0)


def test_set_weights_accepts_float64_and_casts() -> None:
    model = PolicyNet()
    weights = {k: v.astype(np.float64) + 1.0 for k, v in model.get_weights().items()}
    model.set_weights(weights)
    assert model.fc1.weight.dtype == torch.float32
    np.testing.assert_allclose(model.get_weights()["fc2.bias"], weights["fc2.bias"], rtol=1e-6)


def test_set_weights_takes_read_only_arrays_without_a_warning() -> None:
    """Ray's object store hands out read-only arrays; torch would warn on wrapping them."""
    import warnings

    source, target = PolicyNet(), PolicyNet()
    weights = source.get_weights()
    for array in weights.values():
        array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        target.set_weights(weights)
    for name, array in weights.items():
        np.testing.assert_array_equal(target.get_weights()[name], array, err_msg=name)


def test_set_weights_wrong_shape_names_the_tensor_and_changes_nothing() -> None:
    model = PolicyNet()
    before = model.get_weights()
    weights = model.get_weights()
    weights["fc1.bias"] = np.zeros(7, dtype=np.float32)
    weights["fc1.weight"] = weights["fc1.weight"] + 1
    with pytest.raises(ValueError, match=r"'fc1.bias' has shape \(7,\).*expects \(8,\)"):
        model.set_weights(weights)
    for name, array in model.get_weights().items():
        np.testing.assert_array_equal(array, before[name])


def test_set_weights_missing_and_unexpected_names() -> None:
    model = PolicyNet()
    weights = model.get_weights()
    del weights["fc2.bias"]
    weights["fc3.weight"] = np.zeros(2)
    with pytest.raises(ValueError, match=r"missing \['fc2.bias'\].*unexpected \['fc3.weight'\]"):
        model.set_weights(weights)


def test_set_weights_bad_types() -> None:
    model = PolicyNet()
    with pytest.raises(TypeError, match="weights must be a dict"):
        model.set_weights([1, 2, 3])  # type: ignore[arg-type]
    weights = model.get_weights()
    weights["fc2.bias"] = np.array(["a", "b"])
    with pytest.raises(TypeError, match=r"weights\['fc2.bias'\] must be a numeric"):
        model.set_weights(weights)


def test_sync_weights_to_decay_exact_values() -> None:
    source, target = PolicyNet(), PolicyNet()
    fill(source, 8.0)
    fill(target, 4.0)
    source.sync_weights_to(target, decay=0.75)  # 0.75 * 4 + 0.25 * 8 = 5
    for name, array in target.get_weights().items():
        np.testing.assert_array_equal(array, np.full_like(array, 5.0), err_msg=name)
    source.sync_weights_to(target, decay=0.5)  # 0.5 * 5 + 0.5 * 8 = 6.5
    assert torch.all(target.fc2.weight == 6.5)
    assert torch.all(source.fc2.weight == 8.0)  # the source is untouched


def test_sync_weights_to_general_decay_matches_formula() -> None:
    torch.manual_seed(0)
    source, target = PolicyNet(), PolicyNet()
    src, tgt = source.get_weights(), target.get_weights()
    source.sync_weights_to(target, decay=0.995)
    for name, array in target.get_weights().items():
        expected = 0.995 * tgt[name].astype(np.float64) + 0.005 * src[name].astype(np.float64)
        np.testing.assert_allclose(array, expected, rtol=1e-6, atol=1e-7, err_msg=name)


def test_sync_weights_to_decay_zero_copies_exactly_and_is_in_place() -> None:
    torch.manual_seed(0)
    source = PolicyNet(batch_norm=True)
    source(torch.randn(4, 4))
    target = copy.deepcopy(source)
    fill(target, 0.0)
    param_ids = [id(p) for p in target.parameters()]
    source.sync_weights_to(target)
    assert [id(p) for p in target.parameters()] == param_ids
    for name, array in source.get_weights().items():
        np.testing.assert_array_equal(target.get_weights()[name], array, err_msg=name)


def test_sync_with_decay_copies_integer_buffers() -> None:
    source, target = PolicyNet(batch_norm=True), PolicyNet(batch_norm=True)
    source.norm.num_batches_tracked.fill_(10)
    source.sync_weights_to(target, decay=0.9)
    assert int(target.norm.num_batches_tracked) == 10


def test_deepcopy_makes_an_independent_target() -> None:
    model = PolicyNet()
    target = copy.deepcopy(model)
    assert isinstance(target, parl.Model)
    fill(model, 1.0)
    assert not torch.all(target.fc1.weight == 1.0)
    model.sync_weights_to(target)
    assert torch.all(target.fc1.weight == 1.0)


@pytest.mark.parametrize(
    ("decay", "error", "pattern"),
    [
        (1.5, ValueError, r"decay must be a float in \[0, 1\], got 1.5"),
        (-0.1, ValueError, "decay must be"),
        ("0.9", TypeError, r"decay must be a float in \[0, 1\], got '0.9' \(str\)"),
        (True, TypeError, "decay must be"),
    ],
)
def test_sync_weights_to_bad_decay(decay: object, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        PolicyNet().sync_weights_to(PolicyNet(), decay=decay)  # type: ignore[arg-type]


def test_sync_weights_to_other_architecture_names_the_tensor() -> None:
    with pytest.raises(ValueError, match=r"'fc1.weight' has shape \(8, 4\).*expects \(16, 4\)"):
        PolicyNet().sync_weights_to(PolicyNet(hidden=16))
    with pytest.raises(TypeError, match="target_model must be a torch.nn.Module"):
        PolicyNet().sync_weights_to("target")  # type: ignore[arg-type]
