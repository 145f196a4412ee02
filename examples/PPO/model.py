"""Actor-critic networks for PPO: ``value(obs)`` and ``policy(obs)`` as ``parl.algorithms.PPO``
expects. Separate actor and critic MLPs with orthogonal initialisation (the choice of openai
baselines, CleanRL and SB3); a shared convolutional trunk for Atari."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

import parl

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
_ACTIVATION_FNS = {"tanh": torch.tanh, "relu": torch.relu}


def _numpy_tanh_(h: np.ndarray) -> None:
    """``tanh`` in place. On a large array as ``2 / (1 + exp(-2h)) - 1``: numpy's ``exp`` is
    vectorised and its ``tanh`` is not, so the five operations take half the time of one
    ``np.tanh`` (within 2e-7 of it in float32; ``exp`` overflowing to inf gives -1 exactly)."""
    if h.size < 4096:
        np.tanh(h, out=h)
        return
    np.multiply(h, -2.0, out=h)
    with np.errstate(over="ignore"):
        np.exp(h, out=h)
    h += 1.0
    np.divide(2.0, h, out=h)
    h -= 1.0


_NUMPY_ACTIVATIONS = {"tanh": _numpy_tanh_, "relu": lambda h: np.maximum(h, 0.0, out=h)}


def _layer(layer: nn.Linear | nn.Conv2d, gain: float | None) -> nn.Linear | nn.Conv2d:
    """Orthogonal weights with ``gain`` and zero biases; ``gain=None`` keeps PyTorch's own
    initialisation."""
    if gain is not None:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


def _mlp(
    sizes: Sequence[int], out: int, out_gain: float, activation: str, ortho_init: bool = True
) -> nn.Sequential:
    hidden_gain, out_gain_or_none = (np.sqrt(2), out_gain) if ortho_init else (None, None)
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [_layer(nn.Linear(fan_in, fan_out), hidden_gain), _ACTIVATIONS[activation]()]
    layers.append(_layer(nn.Linear(sizes[-1], out), out_gain_or_none))
    return nn.Sequential(*layers)


class MLPModel(parl.Model):
    """``policy(obs)``: logits ``(B, act_dim)``, or ``(mean, std)`` when ``continuous``;
    ``value(obs)``: ``(B, 1)``; ``policy_and_value(obs)`` both from one pass.

    The actor and the critic are separate MLPs (no shared weights), stored stacked so that one
    pass runs both: each hidden layer of the two is one batched matmul over a ``(2, in, out)``
    weight, then a policy head and a value head. Same maths and same initial weights as two
    ``nn.Sequential`` MLPs, half the operations: at these sizes the cost of a step is the number
    of operations more than their arithmetic.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        continuous: bool = False,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        ortho_init: bool = True,
    ) -> None:
        super().__init__()
        if not hidden_sizes:
            raise ValueError("MLPModel needs at least one hidden layer, got hidden_sizes=()")
        sizes = [obs_dim, *hidden_sizes]
        self.obs_dim = obs_dim
        self.continuous = continuous
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.activation = activation
        # built as two ordinary MLPs (same initialisation, same random draws), then stacked
        actor = _mlp(sizes, act_dim, 0.01, activation, ortho_init)
        critic = _mlp(sizes, 1, 1.0, activation, ortho_init)
        a_lin = [m for m in actor if isinstance(m, nn.Linear)]
        c_lin = [m for m in critic if isinstance(m, nn.Linear)]
        # layer k of both: x (2, B, in) @ w[k] (2, in, out) + b[k] (2, 1, out), one baddbmm
        self.weights = nn.ParameterList(
            nn.Parameter(torch.stack([a.weight.T, c.weight.T]).detach().contiguous())
            for a, c in zip(a_lin[:-1], c_lin[:-1], strict=True)
        )
        self.biases = nn.ParameterList(
            nn.Parameter(torch.stack([a.bias, c.bias]).detach()[:, None, :].contiguous())
            for a, c in zip(a_lin[:-1], c_lin[:-1], strict=True)
        )
        # the same Parameters as a plain list: iterating a ParameterList costs more than the
        # matmuls of a one-observation forward pass (moving the model keeps these objects)
        self._layers = list(zip(self.weights, self.biases, strict=True))
        self.pi, self.v = a_lin[-1], c_lin[-1]
        if continuous:
            self.log_std = nn.Parameter(torch.full((1, act_dim), float(log_std_init)))
        # the parameters in numpy_parameters' order, as a plain list (see _layers)
        self._flat_params = [w for w, _ in self._layers] + [b for _, b in self._layers]
        self._flat_params += [self.pi.weight, self.pi.bias, self.v.weight, self.v.bias]
        self._flat_params += [self.log_std] if continuous else []
        self._numpy_views: tuple[list[int], list[np.ndarray]] | None = None

    def numpy_parameters(self) -> list[np.ndarray]:
        """numpy views of the parameters (the same memory: an optimizer step or a
        ``load_state_dict``, both in place, shows at once), rebuilt when a parameter's storage
        changed (``.to()``, ``.double()``): hidden weights ``(2, in, out)``, hidden biases
        ``(2, 1, out)``, then the policy head's weight and bias, the value head's, and the
        log-std ``(1, act_dim)`` of a continuous policy."""
        key = [p.data_ptr() for p in self._flat_params]
        if self._numpy_views is None or self._numpy_views[0] != key:
            self._numpy_views = (key, [p.detach().numpy() for p in self._flat_params])
        return self._numpy_views[1]

    def numpy_policy_and_value(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``policy_and_value`` for a float32 numpy batch ``(B, obs_dim)`` on the CPU, computed
        by numpy on views of the parameters: ``(logits or mean (B, act_dim), value (B,))``.

        For the agent's sampling step. At a handful of observations the cost of a forward pass
        is the number of operations, not their arithmetic, and a numpy operation costs a
        fraction of a torch one (no dispatcher, no autograd bookkeeping). Same float32 maths as
        :meth:`policy_and_value`, up to the order of summation."""
        out, value, _ = self.numpy_forward(obs)
        return out, value

    def numpy_forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """:meth:`numpy_policy_and_value` and the activations that :meth:`numpy_backward` needs:
        ``(out, value, activations)``, ``activations[0]`` the observations ``(B, obs_dim)`` and
        ``activations[k]`` the output ``(2, B, h)`` of hidden layer ``k`` (actor, critic)."""
        views = self.numpy_parameters()
        n = len(self.hidden_sizes)
        act = _NUMPY_ACTIVATIONS[self.activation]
        h = obs.reshape(-1, self.obs_dim)
        activations = [h]
        for w, b in zip(views[:n], views[n : 2 * n], strict=True):
            h = np.matmul(h, w)  # (B, in) or (2, B, in) @ (2, in, out) -> (2, B, out)
            h += b
            act(h)
            activations.append(h)
        pi_w, pi_b, v_w, v_b = views[2 * n : 2 * n + 4]
        out = h[0] @ pi_w.T
        out += pi_b
        value = h[1] @ v_w[0]
        value += v_b[0]
        return out, value, activations

    def numpy_backward(
        self,
        activations: list[np.ndarray],
        d_out: np.ndarray,
        d_value: np.ndarray,
        grads: list[np.ndarray],
    ) -> None:
        """Back-propagate ``d_out (B, act_dim)`` and ``d_value (B,)`` (the loss's derivatives
        with respect to :meth:`numpy_forward`'s outputs) through the network, writing the
        gradient of every parameter except the log-std into ``grads``, arrays shaped as
        :meth:`numpy_parameters` and in its order. The maths of autograd's backward pass, with
        a tenth of its operations' overhead."""
        views = self.numpy_parameters()
        n = len(self.hidden_sizes)
        last = activations[-1]
        pi_w, v_w = views[2 * n], views[2 * n + 2]
        np.matmul(d_out.T, last[0], out=grads[2 * n])
        np.sum(d_out, axis=0, out=grads[2 * n + 1])
        np.matmul(d_value, last[1], out=grads[2 * n + 2][0])
        grads[2 * n + 3][0] = d_value.sum()
        d_h = np.empty_like(last)  # d loss / d (hidden output), actor and critic
        np.matmul(d_out, pi_w, out=d_h[0])
        np.multiply.outer(d_value, v_w[0], out=d_h[1])
        for k in range(n - 1, -1, -1):
            h = activations[k + 1]
            if self.activation == "tanh":  # tanh' = 1 - tanh^2, from the output
                slope = np.square(h)
                np.subtract(1.0, slope, out=slope)
                d_h *= slope
            else:  # relu' = [output > 0]
                d_h *= h > 0
            x = activations[k]
            x_t = x.T if x.ndim == 2 else x.transpose(0, 2, 1)
            np.matmul(x_t, d_h, out=grads[k])  # (in, B) or (2, in, B) @ (2, B, out)
            np.sum(d_h, axis=1, keepdims=True, out=grads[n + k])
            if k:
                d_h = np.matmul(d_h, views[k].transpose(0, 2, 1))

    def _features(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The last hidden layer of the actor and of the critic, each ``(B, h)``."""
        act = _ACTIVATION_FNS[self.activation]
        x = obs if obs.dim() == 2 else obs.reshape(-1, self.obs_dim)
        h = x.expand(2, *x.shape)  # the same input for both, no copy
        for w, b in self._layers:
            h = act(torch.baddbmm(b, h, w))
        return h[0], h[1]

    def policy_and_value(self, obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        actor, critic = self._features(obs)
        out, value = self.pi(actor), self.v(critic)
        if self.continuous:
            return (out, self.log_std.exp()), value
        return out, value

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy_and_value(obs)[1]

    def policy(self, obs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self.policy_and_value(obs)[0]


class AtariModel(parl.Model):
    """Nature-DQN trunk on ``(B, 4, 84, 84)`` uint8 frames, a policy and a value head."""

    def __init__(self, act_dim: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            _layer(nn.Conv2d(4, 32, 8, stride=4), np.sqrt(2)),
            nn.ReLU(),
            _layer(nn.Conv2d(32, 64, 4, stride=2), np.sqrt(2)),
            nn.ReLU(),
            _layer(nn.Conv2d(64, 64, 3, stride=1), np.sqrt(2)),
            nn.ReLU(),
            nn.Flatten(),
            _layer(nn.Linear(64 * 7 * 7, 512), np.sqrt(2)),
            nn.ReLU(),
        )
        self.pi = _layer(nn.Linear(512, act_dim), 0.01)
        self.v = _layer(nn.Linear(512, 1), 1.0)

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.trunk(obs / 255.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(self._features(obs))

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(self._features(obs))

    def policy_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One pass of the shared trunk for both heads (PPO's update needs both)."""
        features = self._features(obs)
        return self.pi(features), self.v(features)
