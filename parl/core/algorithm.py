"""``parl.Algorithm``: owns the models, the losses and the optimizers of one RL method.

An algorithm's models and optimizers are simply its attributes: every ``torch.nn.Module``
attribute (``self.model``, ``self.target_model``, ...) is a model and every
``torch.optim.Optimizer`` attribute an optimizer. ``get_all_weights``, ``set_all_weights`` and the
training checkpoint of ``parl.Agent`` cover all of them, whether or not a subclass calls
``super().__init__`` (PARL's own algorithms often do not); ``get_weights`` and ``set_weights`` are
PARL's, for ``self.model`` alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from parl.core.model import check_tensors_fit, module_weights, set_module_weights
from parl.validation import keyword_aliases

__all__ = ["Algorithm", "require_model_methods", "resolve_device"]


def resolve_device(device: torch.device | str) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; any other string goes to ``torch.device``."""
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise TypeError(
            f"device must be 'auto', a device string such as 'cpu' or 'cuda:0', or a "
            f"torch.device, got {device!r} ({type(device).__name__})"
        )
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device {device!r} is not a valid torch device: {exc}") from None


def _has_method(model: nn.Module, name: str) -> bool:
    method = getattr(type(model), name, None)
    if name == "forward":  # nn.Module defines a placeholder forward that only raises
        return method is not None and method is not nn.Module.forward
    return callable(method) or callable(getattr(model, name, None))


def require_model_methods(
    model: object, methods: Iterable[str], algorithm: str, argument: str = "model"
) -> None:
    """Check at construction time that ``model`` is an ``nn.Module`` with every method needed.

    Raises ``TypeError`` naming the algorithm, the argument, the model class and the missing
    methods, instead of an ``AttributeError`` deep inside the first ``learn`` call.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"{algorithm}: {argument} must be a parl.Model (a torch.nn.Module), "
            f"got {type(model).__name__}"
        )
    missing = [name for name in methods if not _has_method(model, name)]
    if missing:
        needed = ", ".join(f"{name}()" for name in missing)
        raise TypeError(
            f"{algorithm} needs {argument} to define {needed}, but {type(model).__name__} "
            f"does not; add {'it' if len(missing) == 1 else 'them'} to {type(model).__name__}"
        )


class Algorithm:
    """Base class of RL algorithms (PolicyGradient, DQN, DDPG, ...).

    Subclasses list the model methods they call in ``model_methods`` (checked when the algorithm
    is built) and implement ``learn`` (one gradient step from a batch of tensors), ``predict``
    (the greedy or deterministic output) and ``sample`` (the exploring output).
    """

    #: Methods the algorithm calls on ``model``; checked by ``__init__``.
    model_methods: ClassVar[tuple[str, ...]] = ()

    def __init__(self, model: nn.Module, *, device: torch.device | str | None = None) -> None:
        """Keep ``model`` as ``self.model``, moved to ``device`` (``None``: where it is)."""
        require_model_methods(model, self.model_methods, type(self).__name__)
        if device is not None:
            model.to(resolve_device(device))
        self.model = model

    # -- what the algorithm holds ------------------------------------------------------------
    def named_models(self) -> dict[str, nn.Module]:
        """``{attribute name: module}`` for every ``nn.Module`` attribute, in assignment order."""
        return _named_attributes(self, nn.Module)

    def named_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """``{attribute name: optimizer}`` for every ``torch.optim.Optimizer`` attribute."""
        return _named_attributes(self, torch.optim.Optimizer)

    def named_lr_schedulers(self) -> dict[str, torch.optim.lr_scheduler.LRScheduler]:
        """``{attribute name: scheduler}`` for every learning-rate scheduler attribute."""
        return _named_attributes(self, torch.optim.lr_scheduler.LRScheduler)

    #: Set by ``self.device = ...`` (PARL's algorithms do); ``None``: found from the models.
    _device: torch.device | None = None

    @property
    def device(self) -> torch.device:
        """The device set with ``self.device = ...`` (PARL's algorithms set it in ``__init__``),
        else that of the first parameter or buffer of the algorithm's models (CPU if none)."""
        if self._device is not None:
            return self._device
        for model in self.named_models().values():
            for parameter in model.parameters():
                return parameter.device
            for buffer in model.buffers():
                return buffer.device
        return torch.device("cpu")

    @device.setter
    def device(self, device: torch.device | str | None) -> None:
        self._device = None if device is None else resolve_device(device)

    # -- weights -------------------------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """Weights of ``self.model`` as numpy copies, by ``state_dict`` name (``"fc1.weight"``).

        This is PARL's contract: what an actor needs to act (``actor.set_weights(
        agent.get_weights())``), without target networks. ``get_all_weights`` covers every model.
        """
        return module_weights(self._main_model("get_weights"))

    @keyword_aliases(params="weights")
    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Load the output of ``get_weights()`` into ``self.model`` (checked before writing)."""
        model = self._main_model("set_weights")
        _check_mapping(weights, "get_weights()")
        expected = model.state_dict(keep_vars=True)
        if weights and not any(key in expected for key in weights):
            names = [str(key) for key in weights]
            if any(
                name.startswith(prefix + ".") for prefix in self.named_models() for name in names
            ):
                raise ValueError(
                    f"weights for {type(self).__name__}.set_weights look like the output of "
                    f"get_all_weights() (names such as {names[0]!r}): load those with "
                    f"set_all_weights(); set_weights takes get_weights()'s, self.model's alone"
                )
        check_tensors_fit(
            dict(model.state_dict(keep_vars=True)),
            weights,
            what=f"weights for {type(self).__name__}.model",
            owner=type(model).__name__,
        )
        set_module_weights(model, weights)

    def get_all_weights(self) -> dict[str, np.ndarray]:
        """Weights of all models, as numpy copies named ``"<attribute>.<state_dict name>"``.

        For example ``{"model.fc1.weight": ..., "target_model.fc1.weight": ...}``.
        """
        weights: dict[str, np.ndarray] = {}
        for prefix, model in self.named_models().items():
            for name, array in module_weights(model).items():
                weights[f"{prefix}.{name}"] = array
        return weights

    def set_all_weights(self, weights: Mapping[str, Any]) -> None:
        """Load the output of ``get_all_weights()`` of an algorithm of the same kind.

        Everything is checked before anything is written: a missing, unexpected or misshapen
        tensor raises ``ValueError`` naming it and leaves every model unchanged.
        """
        _check_mapping(weights, "get_all_weights()")
        models = self.named_models()
        parts: dict[str, dict[str, Any]] = {prefix: {} for prefix in models}
        # longest first: "critics.1.fc.weight" belongs to "critics.1", not to a model "critics"
        prefixes = sorted(models, key=len, reverse=True)
        unexpected = []
        for key, value in weights.items():
            owner = next((p for p in prefixes if str(key).startswith(p + ".")), None)
            if owner is None:
                unexpected.append(key)
            else:
                parts[owner][str(key)[len(owner) + 1 :]] = value
        if unexpected:
            raise ValueError(
                f"weights has names that belong to no model of {type(self).__name__}: "
                f"{unexpected}; expected names start with one of {[p + '.' for p in models]} "
                f"(the output of get_all_weights(); get_weights() gives self.model's alone)"
            )
        for prefix, model in models.items():
            check_tensors_fit(
                dict(model.state_dict(keep_vars=True)),
                parts[prefix],
                what=f"weights for {type(self).__name__}.{prefix}",
                owner=type(model).__name__,
            )
        for prefix, model in models.items():
            set_module_weights(model, parts[prefix])

    def _main_model(self, method: str) -> nn.Module:
        model = getattr(self, "model", None)
        if not isinstance(model, nn.Module):
            raise AttributeError(
                f"{type(self).__name__}.{method}() reads self.model, which is "
                f"{type(model).__name__}; set self.model to the policy's parl.Model in __init__, "
                f"or use get_all_weights() / set_all_weights() for every model"
            )
        return model

    # -- the algorithm proper ------------------------------------------------------------------
    def learn(self, *args: Any, **kwargs: Any) -> Any:
        """One update from a batch of tensors; returns the loss (or a dict of statistics)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement learn()")

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """The greedy (evaluation) output for a batch of observation tensors."""
        raise NotImplementedError(f"{type(self).__name__} does not implement predict()")

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        """The exploring (training) output for a batch of observation tensors."""
        raise NotImplementedError(f"{type(self).__name__} does not implement sample()")


def _check_mapping(weights: object, source: str) -> None:
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"weights must be a dict of name -> numpy array (as returned by {source}), "
            f"got {type(weights).__name__}"
        )


def _named_attributes(owner: object, kind: type[Any]) -> dict[str, Any]:
    """Attributes of ``owner`` that are ``kind``, and those held one level down in a list, tuple
    or dict attribute (``self.critics = [...]`` gives ``"critics.0"``, ``"critics.1"``; PARL
    counts models held that way too). Each object once, under its first name."""
    found: dict[str, Any] = {}
    seen: set[int] = set()

    def add(name: str, value: Any) -> None:
        if isinstance(value, kind) and id(value) not in seen:
            seen.add(id(value))
            found[name] = value

    for name, value in vars(owner).items():
        if name.startswith("__"):
            continue
        add(name, value)
        if isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                add(f"{name}.{index}", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, (str, int)):
                    add(f"{name}.{key}", item)
    return found
