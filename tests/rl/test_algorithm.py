"""parl.Algorithm: model discovery, the model's weights and every model's, construction-time
checks."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

import parl
from parl.algorithms import PolicyGradient

from .nets import PolicyNet


class ActorCritic(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.actor = nn.Linear(3, 2)
        self.critic = nn.Linear(3, 1)

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs)


class SoftUpdate(parl.Algorithm):
    """An algorithm with a target network and two optimizers, built without super().__init__
    the way PARL's own algorithms are written."""

    def __init__(self, model: ActorCritic) -> None:
        self.model = model
        self.target_model = copy.deepcopy(model)
        self.actor_optimizer = torch.optim.Adam(model.actor.parameters(), lr=1e-3)
        self.critic_optimizer = torch.optim.Adam(model.critic.parameters(), lr=1e-3)


class NeedsPolicyAndValue(parl.Algorithm):
    model_methods = ("policy", "value", "forward")


def test_named_models_and_optimizers_without_super_init() -> None:
    alg = SoftUpdate(ActorCritic())
    assert list(alg.named_models()) == ["model", "target_model"]
    assert list(alg.named_optimizers()) == ["actor_optimizer", "critic_optimizer"]
    assert alg.device == torch.device("cpu")


def test_get_all_weights_covers_every_model() -> None:
    alg = SoftUpdate(ActorCritic())
    assert sorted(alg.get_all_weights()) == sorted(
        f"{prefix}.{layer}.{kind}"
        for prefix in ("model", "target_model")
        for layer in ("actor", "critic")
        for kind in ("weight", "bias")
    )


def test_set_all_weights_round_trip_for_all_models() -> None:
    torch.manual_seed(0)
    source = SoftUpdate(ActorCritic())
    with torch.no_grad():
        source.target_model.actor.bias.fill_(3.0)  # the target differs from the model
    torch.manual_seed(1)
    target = SoftUpdate(ActorCritic())
    target.set_all_weights(source.get_all_weights())
    for name, array in source.get_all_weights().items():
        np.testing.assert_array_equal(target.get_all_weights()[name], array, err_msg=name)
    assert torch.all(target.target_model.actor.bias == 3.0)
    assert not torch.all(target.model.actor.bias == 3.0)


def test_set_all_weights_rejects_foreign_names_and_shapes_before_writing() -> None:
    alg = SoftUpdate(ActorCritic())
    before = alg.get_all_weights()
    weights = alg.get_all_weights()
    weights["critic.weight"] = weights.pop("model.critic.weight")
    with pytest.raises(ValueError, match=r"belong to no model of SoftUpdate: \['critic.weight'\]"):
        alg.set_all_weights(weights)
    weights = {name: array + 1 for name, array in alg.get_all_weights().items()}
    weights["target_model.critic.bias"] = np.zeros(5, dtype=np.float32)
    with pytest.raises(
        ValueError, match=r"SoftUpdate.target_model.*'critic.bias' has shape \(5,\)"
    ):
        alg.set_all_weights(weights)
    for name, array in alg.get_all_weights().items():  # nothing was written, not even model.*
        np.testing.assert_array_equal(array, before[name], err_msg=name)


def test_get_weights_is_the_models_alone_with_state_dict_names() -> None:
    # PARL's contract: an actor gets the policy, not the target networks, under the names that
    # model.set_weights and model.load_state_dict take.
    alg = SoftUpdate(ActorCritic())
    weights = alg.get_weights()
    assert list(weights) == list(alg.model.state_dict())
    alg.model.set_weights(weights)
    other = SoftUpdate(ActorCritic())
    other.set_weights(weights)
    for name, array in weights.items():
        np.testing.assert_array_equal(other.model.get_weights()[name], array, err_msg=name)
    assert not np.array_equal(
        other.target_model.actor.weight.detach().numpy(), weights["actor.weight"]
    )  # the target network is left alone


def test_set_weights_refuses_all_weights_and_says_which_to_use() -> None:
    alg = SoftUpdate(ActorCritic())
    with pytest.raises(ValueError, match=r"output of get_all_weights\(\).*set_all_weights\(\)"):
        alg.set_weights(alg.get_all_weights())
    with pytest.raises(ValueError, match=r"unexpected \['extra'\]"):
        alg.set_weights({**alg.get_weights(), "extra": np.zeros(1)})
    with pytest.raises(ValueError, match=r"get_all_weights\(\); get_weights\(\) gives"):
        alg.set_all_weights(alg.get_weights())
    with pytest.raises(TypeError, match=r"as returned by get_weights\(\)"):
        alg.set_weights([1, 2])  # type: ignore[arg-type]


def test_get_weights_without_a_model_attribute_says_what_to_do() -> None:
    class TwoPolicies(parl.Algorithm):
        def __init__(self) -> None:
            self.actor_model = ActorCritic()

    with pytest.raises(AttributeError, match=r"reads self.model, which is NoneType"):
        TwoPolicies().get_weights()
    assert list(TwoPolicies().get_all_weights())[0] == "actor_model.actor.weight"


def test_missing_model_method_fails_at_construction_naming_both() -> None:
    with pytest.raises(
        TypeError,
        match=r"NeedsPolicyAndValue needs model to define forward\(\), "
        r"but ActorCritic does not",
    ):
        NeedsPolicyAndValue(ActorCritic())
    with pytest.raises(
        TypeError,
        match=r"PolicyGradient needs model to define forward\(\).*"
        r"ActorCritic",
    ):
        PolicyGradient(ActorCritic())  # type: ignore[arg-type]


def test_model_must_be_a_module() -> None:
    with pytest.raises(TypeError, match=r"PolicyGradient: model must be a parl.Model .*got dict"):
        PolicyGradient({})  # type: ignore[arg-type]


def test_base_methods_say_what_is_missing() -> None:
    alg = parl.Algorithm(PolicyNet())
    for method in (alg.learn, alg.predict, alg.sample):
        with pytest.raises(
            NotImplementedError, match=f"Algorithm does not implement {method.__name__}"
        ):
            method()


def test_device_argument_moves_the_model() -> None:
    model = PolicyNet().double()
    alg = parl.Algorithm(model, device="cpu")
    assert alg.device == torch.device("cpu")
    with pytest.raises(TypeError, match="device must be"):
        parl.Algorithm(PolicyNet(), device=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'gpu0' is not a valid torch device"):
        parl.Algorithm(PolicyNet(), device="gpu0")


def test_models_and_optimizers_in_lists_and_dicts_are_covered() -> None:
    # PARL's algorithms may hold several critics in a list: their weights and optimizer states
    # are in get_all_weights and in training checkpoints like any other model's.
    class Ensemble(parl.Algorithm):
        def __init__(self) -> None:
            self.model = ActorCritic()
            self.critics = [nn.Linear(3, 1), nn.Linear(3, 1)]
            self.heads = {"left": nn.Linear(3, 2)}
            self.critic_optimizers = [torch.optim.Adam(c.parameters()) for c in self.critics]

    alg = Ensemble()
    assert list(alg.named_models()) == ["model", "critics.0", "critics.1", "heads.left"]
    assert list(alg.named_optimizers()) == ["critic_optimizers.0", "critic_optimizers.1"]
    weights = alg.get_all_weights()
    assert "critics.1.weight" in weights and "heads.left.bias" in weights
    other = Ensemble()
    other.set_all_weights(weights)
    np.testing.assert_array_equal(
        other.critics[1].weight.detach().numpy(), weights["critics.1.weight"]
    )


def test_device_is_settable_as_parl_algorithms_set_it() -> None:
    class DeviceSetting(parl.Algorithm):
        def __init__(self, model: ActorCritic) -> None:
            self.model = model
            self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    alg = DeviceSetting(ActorCritic())
    assert alg.device == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    alg.device = None
    assert alg.device == torch.device("cpu")  # found from the model again
    with pytest.raises(ValueError, match="'gpu0' is not a valid torch device"):
        alg.device = "gpu0"
