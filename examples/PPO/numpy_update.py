"""PPO's minibatch update computed by numpy, for the example's ``MLPModel`` on the CPU.

``PPO.learn_tensor`` runs about a hundred torch operations and their autograd bookkeeping per
minibatch; on CartPole's 64x64 networks and 256-row minibatches that overhead costs more than the
arithmetic. Here the forward pass, the PPO loss and its derivatives, and the backward pass are
written out in numpy (``MLPModel.numpy_forward`` / ``numpy_backward`` for the network, the loss
below), the gradients land in the parameters' ``.grad`` clipped to PPO's global norm, and
``PPO.optimizer_step`` takes the same Adam step with the same optimizer state: checkpoints,
learning-rate changes and the torch path all stay interchangeable. Same loss, same gradients as
``PPO.learn_tensor`` (up to float32 rounding; ``tests/rl/test_ppo_fast_paths.py`` compares
them), in half the time.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np
import torch

from parl.algorithms import PPO

_HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)
_OPENBLAS_SETTERS = (  # numpy's wheels ship OpenBLAS with prefixed, suffixed symbols
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


def set_blas_threads(threads: int) -> bool:
    """Run numpy's matrix products (OpenBLAS) on ``threads`` threads, as
    ``torch.set_num_threads`` does for torch; ``True`` if numpy's OpenBLAS was found (Linux).

    By default OpenBLAS starts one thread per core, and on the update's small products the
    second thread costs more than it gives: 0.155 instead of 0.13 ms per CartPole training step
    on 2 cores, at twice the CPU time (its idle threads spin)."""
    if threads < 1:
        raise ValueError(f"set_blas_threads: threads must be >= 1, got {threads}")
    try:
        with open(f"/proc/{os.getpid()}/maps") as maps:
            fields = [line.split(maxsplit=5) for line in maps]
    except OSError:  # not Linux: leave the BLAS as it is
        return False
    paths = {f[5].strip() for f in fields if len(f) == 6 and "openblas" in f[5].lower()}
    found = False
    for path in sorted(p for p in paths if not p.endswith("(deleted)")):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(library, n) for n in _OPENBLAS_SETTERS if hasattr(library, n)), None)
        if setter is not None:  # every OpenBLAS loaded (numpy's, scipy's...)
            setter(int(threads))
            found = True
    return found


class NumpyPPOUpdate:
    """``learn(obs, action, value, ret, logprob, adv, lr)``: one minibatch update of ``alg``,
    numpy arrays in, ``[value_loss, action_loss, entropy, approx_kl, clip_frac]`` out (float64).

    Only for what :meth:`supports` accepts: a float32 ``MLPModel`` (with ``numpy_forward``) on
    the CPU whose parameters are all trained by ``alg`` (none of them frozen since, with
    ``requires_grad_(False)``: autograd would give a frozen one no gradient, so neither does
    this update).
    """

    def __init__(self, alg: PPO) -> None:
        if not self.supports(alg):
            raise ValueError(
                "NumpyPPOUpdate needs a float32 model on the CPU with numpy_forward and "
                "numpy_backward (the example's MLPModel), all of whose parameters PPO trains; "
                "use PPO.learn for any other model"
            )
        self.alg = alg
        self._buffers: list[torch.Tensor] = []
        self._grads: list[np.ndarray] = []

    @staticmethod
    def supports(alg: PPO) -> bool:
        model = alg.model
        params = getattr(model, "_flat_params", None)
        if params is None or not hasattr(model, "numpy_backward"):
            return False
        trained = {id(p) for p in alg._params}
        return (
            len(params) == len(trained) == len(list(model.parameters()))
            and all(id(p) in trained for p in params)
            and all(
                p.requires_grad and p.device.type == "cpu" and p.dtype == torch.float32
                for p in params
            )
        )

    def _gradient_arrays(self) -> list[np.ndarray]:
        """The parameters' ``.grad`` tensors as numpy views, made once and put back where
        another path (``PPO.learn``'s ``zero_grad``) replaced them."""
        params = self.alg.model._flat_params
        if [b.shape for b in self._buffers] != [p.shape for p in params]:
            self._buffers = [torch.zeros_like(p) for p in params]
            self._grads = [b.numpy() for b in self._buffers]
        for p, buffer in zip(params, self._buffers, strict=True):
            if p.grad is not buffer:
                p.grad = buffer
        return self._grads

    def learn(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        old_value: np.ndarray,
        ret: np.ndarray,
        old_logprob: np.ndarray,
        adv: np.ndarray,
        lr: float | None = None,
    ) -> np.ndarray:
        alg, model = self.alg, self.alg.model
        grads = self._gradient_arrays()
        size = len(obs)
        if alg.norm_adv and size < 2:
            raise ValueError(alg._norm_adv_error(size))
        out, value, activations = model.numpy_forward(obs)
        if alg.continuous_action:
            logprob, entropy, d_logprob_d_out, log_std_terms = self._gaussian(out, action)
        else:
            logprob, entropy, d_logprob_d_out, probs_logp = self._categorical(out, action)

        logratio = logprob - old_logprob
        ratio = np.exp(logratio)
        ratio_m1 = ratio - 1.0
        approx_kl = float(np.mean(ratio_m1 - logratio))  # k3 estimator, as PPO.learn
        clip = alg.clip_param
        clip_frac = float(np.mean(np.abs(ratio_m1) > clip))
        if alg.norm_adv:
            adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
        surrogate = adv * ratio
        clipped = adv * np.clip(ratio, 1.0 - clip, 1.0 + clip)
        unclipped = surrogate <= clipped  # where the gradient flows (PPO's clipped_surrogate_loss)
        action_loss = -float(np.mean(np.where(unclipped, surrogate, clipped)))
        # d loss / d logprob: -A r / B where the unclipped term is the minimum, else 0
        d_logprob = np.where(unclipped, surrogate, 0.0) * (-1.0 / size)

        value_loss, d_value = self._value_loss(value, old_value, ret)
        d_value *= alg.value_loss_coef

        ent_coef = alg.entropy_coef
        if alg.continuous_action:
            d_out = d_logprob_d_out * d_logprob[:, None]  # (a - mean) / std^2 * dL/dlogprob
            # d logprob / d log_std = z^2 - 1; the mean entropy grows by 1 per unit of log_std
            grads[-1][...] = d_logprob @ log_std_terms - ent_coef
        else:
            probs, logp = probs_logp
            d_out = probs * -d_logprob[:, None]  # d logprob(a) / d logits = onehot(a) - p
            d_out[np.arange(size), action] += d_logprob
            if ent_coef:  # d H / d logits_j = -p_j (log p_j + H), H averaged over the batch
                d_out += (ent_coef / size) * probs * (logp + entropy[:, None])
        model.numpy_backward(activations, d_out, d_value, grads)
        self._clip_grad_norm(grads)
        alg.optimizer_step(lr, clip_grad=False)
        return np.array([value_loss, action_loss, float(np.mean(entropy)), approx_kl, clip_frac])

    def _clip_grad_norm(self, grads: list[np.ndarray]) -> None:
        """``PPO``'s clip to ``max_grad_norm`` of the global norm, on the numpy views."""
        total = float(np.sqrt(sum(np.vdot(g, g) for g in grads)))
        coef = self.alg.max_grad_norm / (total + 1e-6)
        if coef < 1.0:
            for g in grads:
                g *= np.float32(coef)

    def _categorical(self, logits: np.ndarray, action: np.ndarray) -> tuple[Any, ...]:
        shifted = logits - logits.max(axis=-1, keepdims=True)
        weights = np.exp(shifted)
        total = weights.sum(axis=-1, keepdims=True)
        logp = shifted - np.log(total)
        probs = weights / total
        logprob = logp[np.arange(len(action)), action]
        entropy = -(probs * logp).sum(axis=-1)
        return logprob, entropy, None, (probs, logp)

    def _gaussian(self, mean: np.ndarray, action: np.ndarray) -> tuple[Any, ...]:
        log_std = self.alg.model.numpy_parameters()[-1]  # (1, act_dim)
        inv_std = np.exp(-log_std)
        z = (action - mean) * inv_std
        logprob = -(0.5 * np.square(z) + log_std).sum(axis=-1) - _HALF_LOG_2PI * mean.shape[-1]
        entropy = np.full(len(mean), log_std.sum() + (0.5 + _HALF_LOG_2PI) * mean.shape[-1])
        z_sq_m1 = np.square(z) - 1.0  # (B, act_dim): d logprob / d log_std, row by row
        return logprob, entropy, z * inv_std, z_sq_m1

    def _value_loss(
        self, value: np.ndarray, old_value: np.ndarray, ret: np.ndarray
    ) -> tuple[float, np.ndarray]:
        """``(value_loss, d value_loss / d value)``, PPO's ``_value_loss`` and its derivative
        (where the clipped error is the larger one, the clipped value's: 0 outside the clip)."""
        size = len(value)
        error = value - ret
        if not self.alg.use_clipped_value_loss:
            return 0.5 * float(np.mean(np.square(error))), error * (1.0 / size)
        clip = self.alg.clip_param
        delta = value - old_value
        clipped_error = old_value + np.clip(delta, -clip, clip) - ret
        unclipped_sq, clipped_sq = np.square(error), np.square(clipped_error)
        loss = 0.5 * float(np.mean(np.maximum(unclipped_sq, clipped_sq)))
        inside = np.abs(delta) <= clip  # clamp passes the gradient on its closed range
        d_clipped = np.where(inside, clipped_error, 0.0)
        # torch.max splits the gradient of a tie in half
        d_value = np.where(
            unclipped_sq > clipped_sq,
            error,
            np.where(unclipped_sq < clipped_sq, d_clipped, 0.5 * (error + d_clipped)),
        )
        return loss, d_value * (1.0 / size)
