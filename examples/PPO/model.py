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
_NUMPY_ACTIVATIONS = {
    "tanh": lambda h: np.tanh(h, out=h),
    "relu": lambda h: np.maximum(h, 0.0, out=h),
}


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
        views = self.numpy_parameters()
        n = len(self.hidden_sizes)
        act = _NUMPY_ACTIVATIONS[self.activation]
        h = obs.reshape(-1, self.obs_dim)
        for w, b in zip(views[:n], views[n : 2 * n], strict=True):
            h = np.matmul(h, w)  # (B, in) or (2, B, in) @ (2, in, out) -> (2, B, out)
            h += b
            act(h)
        pi_w, pi_b, v_w, v_b = views[2 * n : 2 * n + 4]
        out = h[0] @ pi_w.T
        out += pi_b
        value = h[1] @ v_w[0]
        value += v_b[0]
        return out, value

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
