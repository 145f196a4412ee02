"""PopArt value normalisation ("Preserving Outputs Precisely, while Adaptively Rescaling
Targets", van Hasselt et al. 2016, https://arxiv.org/abs/1602.07714), as MAPPO uses it.

A critic trained on normalised targets ``(G - mu) / sigma`` outputs normalised values; when the
running statistics ``mu, sigma`` move, the critic's last linear layer is rescaled so that its
unnormalised output ``sigma * v + mu`` stays the same ("preserving outputs"):

    W' = W sigma / sigma'        b' = (sigma b + mu - mu') / sigma'

The statistics are exponential moving averages of the first and second moments of the targets
with decay ``beta``, debiased like Adam's moments (divided by ``1 - beta^t``, itself kept as a
running average of ones), and the variance is clamped below at 0.01 (as the MAPPO paper's code
does) so that near-constant targets do not blow the scale up.
"""

from __future__ import annotations

from typing import Any, overload

import numpy as np
import torch
from torch import nn

from parl.validation import check_float, check_int, keyword_aliases

__all__ = ["PopArt"]

_MIN_VARIANCE = 1e-2  # the floor of the debiased variance


class PopArt(nn.Module):
    """Running statistics of value targets, and the rescaling of the critic's output layer.

    The statistics are buffers: they move with ``.to(device)``, and they are saved with the
    algorithm that holds this module (``Agent.save_checkpoint``). ``weight`` and ``bias`` are the
    critic's own parameters (not copies): :meth:`update` rescales them in place.

    Args:
        weight: the weight ``(1, hidden)`` of the critic's last linear layer.
        bias: the bias ``(1,)`` of that layer.
        norm_axes: how many leading axes of a target batch are averaged over (1 for ``(B, 1)``).
        beta: decay of the running moments; close to 1 for a long horizon.
        epsilon: floor of the debiasing term, so that the first statistics are finite.
    """

    mean: torch.Tensor
    mean_sq: torch.Tensor
    debiasing_term: torch.Tensor

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor,
        norm_axes: int = 1,
        beta: float = 0.99999,
        epsilon: float = 1e-5,
    ) -> None:
        super().__init__()
        for name, value in (("weight", weight), ("bias", bias)):
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"PopArt: {name} must be the critic output layer's {name} (a torch "
                    f"Parameter, e.g. model.critic.v_out.{name}), got {type(value).__name__}"
                )
        self.norm_axes = check_int("norm_axes", norm_axes, low=1, owner="PopArt")
        self.beta = check_float("beta", beta, low=0.0, high=1.0, high_open=True, owner="PopArt")
        self.epsilon = check_float("epsilon", epsilon, low=0.0, low_open=True, owner="PopArt")
        self.weight = weight
        self.bias = bias
        options: dict[str, Any] = {"dtype": torch.float32, "device": weight.device}
        self.register_buffer("mean", torch.zeros(1, **options))
        self.register_buffer("mean_sq", torch.zeros(1, **options))
        self.register_buffer("debiasing_term", torch.zeros((), **options))

    def reset_parameters(self) -> None:
        """Forget the statistics (the layer's weights are left as they are)."""
        self.mean.zero_()
        self.mean_sq.zero_()
        self.debiasing_term.zero_()

    def _as_tensor(self, values: np.ndarray | torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(values).to(dtype=torch.float32, device=self.mean.device)

    def debiased_mean_var(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu, sigma^2)``: the running moments divided by the debiasing term, the variance
        at least 0.01."""
        debias = self.debiasing_term.clamp(min=self.epsilon)
        mean = self.mean / debias
        mean_sq = self.mean_sq / debias
        return mean, (mean_sq - mean**2).clamp(min=_MIN_VARIANCE)

    @torch.no_grad()
    @keyword_aliases(input_vector="targets")
    def update(self, targets: np.ndarray | torch.Tensor) -> None:
        """Fold a batch of (unnormalised) targets ``(B, 1)`` into the statistics and rescale the
        critic's output layer so that its unnormalised outputs do not change.

        The layer's ``.data`` is replaced rather than written in place: a value computed from
        the old weights earlier in the same update can still be differentiated.
        """
        targets = self._as_tensor(targets)
        old_mean, old_var = self.debiased_mean_var()
        old_std = old_var.sqrt()
        axes = tuple(range(self.norm_axes))
        batch_mean = targets.mean(dim=axes)
        batch_sq_mean = targets.square().mean(dim=axes)
        self.mean.mul_(self.beta).add_(batch_mean * (1.0 - self.beta))
        self.mean_sq.mul_(self.beta).add_(batch_sq_mean * (1.0 - self.beta))
        self.debiasing_term.mul_(self.beta).add_(1.0 - self.beta)
        new_mean, new_var = self.debiased_mean_var()
        new_std = new_var.sqrt()
        self.weight.data = self.weight * old_std / new_std
        self.bias.data = (old_std * self.bias + old_mean - new_mean) / new_std

    def _broadcast(self, stat: torch.Tensor) -> torch.Tensor:
        return stat[(None,) * self.norm_axes]

    @keyword_aliases(input_vector="values")
    def normalize(self, values: np.ndarray | torch.Tensor) -> torch.Tensor:
        """``(values - mu) / sigma`` as a float32 tensor on the statistics' device."""
        mean, var = self.debiased_mean_var()
        return (self._as_tensor(values) - self._broadcast(mean)) / self._broadcast(var.sqrt())

    @overload
    def denormalize(self, values: torch.Tensor) -> torch.Tensor: ...

    @overload
    def denormalize(self, values: np.ndarray) -> np.ndarray: ...

    @keyword_aliases(input_vector="values")
    def denormalize(self, values: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """``values * sigma + mu``: a tensor for a tensor (on the statistics' device), a numpy
        array for a numpy array.

        PARL's ``PopArt.denormalize`` always returns numpy, so that a tensor given to it comes
        back as an array while :meth:`normalize` returns tensors; here a tensor stays a tensor
        (and a GPU tensor is not copied to the host), and an array stays an array as PARL's
        rollout buffers expect.
        """
        mean, var = self.debiased_mean_var()
        out = self._as_tensor(values) * self._broadcast(var.sqrt()) + self._broadcast(mean)
        if isinstance(values, torch.Tensor):
            return out
        return out.cpu().numpy()
