"""Observation normalisation inside a model, for learners with many actors.

An :class:`ObsNormalizer` is a ``torch.nn.Module`` whose running mean and variance are
*buffers*: the learner updates them from the batches it trains on, and they travel to the actors
with the weights (:class:`parl.utils.SharedWeights` and :func:`~parl.utils.weight_sync.flat_state`
carry floating-point buffers), so every actor normalises exactly as the learner did at its last
update, and a checkpoint (``state_dict``) holds the statistics. Gymnasium's
``NormalizeObservation`` wrapper keeps its statistics in the env instead: with several actors each
would drift on its own.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ObsNormalizer"]


class ObsNormalizer(nn.Module):
    """``forward(obs) = clip((obs - mean) / sqrt(var + epsilon), -clip, clip)``.

    ``update(batch)`` merges a batch ``(N, *shape)`` into the running statistics (the parallel
    mean/variance update, exact whatever the batch sizes; the count starts at ``epsilon`` with
    mean 0 and variance 1, as gymnasium's ``RunningMeanStd``). Only the learner should call it.
    """

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor

    def __init__(
        self, shape: int | tuple[int, ...], clip: float = 10.0, epsilon: float = 1e-8
    ) -> None:
        super().__init__()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if clip <= 0:
            raise ValueError(f"ObsNormalizer: clip must be > 0, got {clip}")
        self.shape, self.clip, self.epsilon = shape, float(clip), float(epsilon)
        # float64: a float32 count stops growing exactly past 2**24 observations; actors only
        # read mean and var, so the float32 copy SharedWeights sends them is enough
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        """Fold a batch of observations into the running mean and variance (the parallel form of
        Welford's update: Chan et al. 1979).

        Args:
            batch: Observations ``(N, *shape)`` (anything :func:`torch.as_tensor` accepts); an empty
                batch changes nothing.
        """
        batch = torch.as_tensor(batch, device=self.mean.device).reshape(-1, *self.shape).double()
        if batch.shape[0] == 0:
            return
        n, old = float(batch.shape[0]), float(self.count)
        batch_mean, batch_var = batch.mean(0), batch.var(0, unbiased=False)
        mean, var = self.mean.double(), self.var.double()
        total = old + n
        delta = batch_mean - mean
        self.mean.copy_(mean + delta * (n / total))
        m2 = var * old + batch_var * n + delta.square() * (old * n / total)
        self.var.copy_(m2 / total)
        self.count.fill_(total)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalise ``obs`` with the current statistics (they are not updated here).

        Args:
            obs: Observations ``(..., *shape)`` on the normaliser's device.

        Returns:
            ``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)``, the shape of ``obs``.
        """
        normalised = (obs - self.mean) / torch.sqrt(self.var + self.epsilon)
        return normalised.clamp(-self.clip, self.clip)

    def extra_repr(self) -> str:
        """``shape``, ``clip`` and the number of observations seen, for ``repr``."""
        return f"shape={self.shape}, clip={self.clip}, count={float(self.count):.0f}"
