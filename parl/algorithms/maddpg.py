"""MADDPG (Lowe et al. 2017, https://arxiv.org/abs/1706.02275): one actor-critic per agent,
whose actor sees only its agent's observation and whose critic sees every agent's observation
and action, for discrete (Gumbel-softmax) and continuous actions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from parl.algorithms.ddpg import ActorCriticBase
from parl.algorithms.finite import check_finite_inputs, check_finite_step
from parl.algorithms.offpolicy import as_flat, clip_grad_norm
from parl.core.torch.policy_distribution import SoftCategoricalDistribution
from parl.validation import check_float, check_int

__all__ = ["MADDPG"]


def is_continuous_space(space: Any) -> bool:
    """PARL's rule: a space with a ``high`` bound (a ``Box``) is continuous, unless it is an old
    gym ``MultiDiscrete`` (which has ``num_discrete_space``); anything else is discrete.

    Args:
        space: a gym or gymnasium action space.
    """
    return hasattr(space, "high") and not hasattr(space, "num_discrete_space")


def action_width(space: Any) -> int | None:
    """The number of action columns an agent with ``space`` passes to the critic: ``n`` of a
    ``Discrete`` (one probability per action), the size of a 1-D ``Box``; ``None`` if unknown.

    Args:
        space: a gym or gymnasium action space.
    """
    if is_continuous_space(space):
        shape = getattr(space, "shape", None)
        return int(np.prod(shape)) if shape else None
    n = getattr(space, "n", None)
    return int(n) if isinstance(n, (int, np.integer)) else None


class MADDPG(ActorCriticBase):
    """Multi-agent deep deterministic policy gradient, for one agent of a team.

    Each agent has its own ``MADDPG`` and model. ``model.policy(obs)`` takes this agent's
    observations ``(B, obs_dim)`` and returns logits ``(B, act_dim)`` for a discrete action
    space, or ``(mean, log_std)`` (each ``(B, act_dim)``) for a continuous one;
    ``model.value(obs_n, act_n)`` takes lists of every agent's observations and actions and
    returns this agent's ``Q`` ``(B,)``.

    Actions are differentiable: ``sample`` draws a Gumbel-softmax ``softmax(logits + g)``
    (Jang et al. 2017, temperature 1, ``g = -log(-log(U))``) for a discrete space and
    ``tanh(mean + exp(log_std) * eps)`` for a continuous one; ``predict`` returns
    ``softmax(logits)`` or ``tanh(mean)``. ``learn`` takes the target ``y = r + gamma * (1 -
    done) * Q_t(s', a'_1..a'_N)`` computed by the agent (the next actions are each agent's
    ``sample(next_obs, use_target_model=True)``), then

    * updates the actor on ``-Q(s, a_1..pi_i(s_i)..a_N).mean() + policy_reg * mean(out^2)``,
      ``out`` being the policy's raw output (the logits, or ``mean`` and ``log_std``),
    * updates the critic on ``mean((Q(s, a_1..a_N) - y)^2)``,

    each with its gradients clipped to a global norm of ``max_grad_norm``, then moves the target
    model with ``decay = 1 - tau``; it returns the critic loss. This is the order and the maths of
    PARL's MADDPG, step for step.

    The arguments have PARL's names and order; the defaults are those of PARL's MADDPG example.
    Two differences: PARL decides between discrete and continuous from the first agent's action
    space, this class from its own agent's (``act_space[agent_index]``), so a team that mixes
    both kinds gets the right maths for every agent; and a model whose ``value`` returns a
    ``(B, 1)`` column still gets one target per row here, where PARL's loss broadcasts it
    against the ``(B,)`` target into every pair of rows.

    Args:
        model: the agent's actor-critic model (``policy``, ``value``, ``get_actor_params``,
            ``get_critic_params``).
        agent_index: this agent's position in ``act_space`` and in ``obs_n``/``act_n``.
        act_space: every agent's action space (gym or gymnasium spaces), in the agents' order.
        gamma: discount factor (read by the agent when it computes the target).
        tau: target update rate (``sync_target`` uses ``decay = 1 - tau``).
        actor_lr: learning rate of the actor's Adam.
        critic_lr: learning rate of the critic's Adam.
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``...
        max_grad_norm: global gradient norm that each update clips to (PARL's 0.5).
        policy_reg: weight of the squared policy output in the actor loss (PARL's 1e-3).
    """

    def __init__(
        self,
        model: nn.Module,
        agent_index: int | None = None,
        act_space: Sequence[Any] | None = None,
        gamma: float = 0.95,
        tau: float = 0.01,
        actor_lr: float = 0.01,
        critic_lr: float = 0.01,
        *,
        device: str | torch.device = "auto",
        max_grad_norm: float = 0.5,
        policy_reg: float = 1e-3,
    ) -> None:
        if act_space is None or isinstance(act_space, (str, bytes)):
            raise TypeError(
                "MADDPG: act_space must list every agent's action space (e.g. env.action_space "
                f"of parl.env.multiagent_env.MAenv), got {act_space!r}"
            )
        if isinstance(act_space, Mapping):  # PettingZoo's {agent: space}: the keys would do
            raise TypeError(
                "MADDPG: act_space must list every agent's action space in the agents' order, "
                f"got a mapping of {list(act_space)}; pass [spaces[a] for a in agents]"
            )
        act_space = list(act_space)
        if not act_space:
            raise ValueError("MADDPG: act_space is empty; list every agent's action space")
        for j, space in enumerate(act_space):
            if not any(hasattr(space, a) for a in ("high", "n", "nvec", "num_discrete_space")):
                raise TypeError(
                    f"MADDPG: act_space[{j}] is {space!r}, not an action space (a Discrete or "
                    "a Box, e.g. env.action_space of parl.env.multiagent_env.MAenv)"
                )
        if agent_index is None:
            raise TypeError(
                f"MADDPG: agent_index is required: this agent's position (0 to "
                f"{len(act_space) - 1}) in act_space"
            )
        self.agent_index = check_int(
            "agent_index", agent_index, low=0, high=len(act_space) - 1, owner="MADDPG"
        )
        self.act_space = act_space
        self.n_agents = len(act_space)
        self.continuous_actions = is_continuous_space(act_space[self.agent_index])
        self._act_widths = [action_width(space) for space in act_space]
        self.max_grad_norm = check_float(
            "max_grad_norm", max_grad_norm, low=0.0, low_open=True, owner="MADDPG"
        )
        self.policy_reg = check_float("policy_reg", policy_reg, low=0.0, owner="MADDPG")
        super().__init__(model, gamma, tau, actor_lr, critic_lr, device)

    # -- actions -------------------------------------------------------------------------------
    def _policy(self, model: Any, obs: torch.Tensor) -> Any:
        out = model.policy(obs)
        if self.continuous_actions and not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError(
                f"MADDPG: agent {self.agent_index} has a continuous action space, so "
                f"model.policy(obs) must return (mean, log_std); it returned "
                f"{type(out).__name__}"
            )
        return out

    def _draw(self, policy: Any) -> torch.Tensor:
        """An exploring, differentiable action from the policy's output."""
        if self.continuous_actions:
            mean, log_std = policy
            return torch.tanh(mean + torch.exp(log_std) * torch.randn_like(mean))
        return SoftCategoricalDistribution(policy).sample()

    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy action ``(B, act_dim)``: ``softmax(logits)`` (take the argmax to act) or
        ``tanh(mean)``.

        Args:
            obs: this agent's observations ``(B, obs_dim)``.
        """
        policy = self._policy(self.model, obs)
        if self.continuous_actions:
            return torch.tanh(policy[0])
        return F.softmax(policy, dim=-1)

    def sample(self, obs: torch.Tensor, use_target_model: bool = False) -> torch.Tensor:
        """An exploring action ``(B, act_dim)`` (differentiable in the policy's output).

        Args:
            obs: this agent's observations ``(B, obs_dim)``.
            use_target_model: draw from the target policy (for the next actions of the target).
        """
        model = self.target_model if use_target_model else self.model
        return self._draw(self._policy(model, obs))

    def Q(
        self,
        obs_n: Sequence[torch.Tensor],
        act_n: Sequence[torch.Tensor],
        use_target_model: bool = False,
    ) -> torch.Tensor:
        """This agent's ``Q`` of every agent's observations and actions, ``(B,)`` (as the
        model's ``value`` returns it).

        Args:
            obs_n: one observation batch ``(B, obs_dim_j)`` per agent.
            act_n: one action batch ``(B, act_dim_j)`` per agent.
            use_target_model: use the target critic.
        """
        obs_list, act_list = self._check_batch("Q", obs_n, act_n)
        model = self.target_model if use_target_model else self.model
        return model.value(obs_list, act_list)

    # -- learning ------------------------------------------------------------------------------
    def learn(
        self,
        obs_n: Sequence[torch.Tensor],
        act_n: Sequence[torch.Tensor],
        target_q: torch.Tensor,
    ) -> torch.Tensor:
        """One actor step, one critic step and a soft target update; returns the (detached)
        critic loss.

        Args:
            obs_n: one observation batch ``(B, obs_dim_j)`` per agent.
            act_n: one action batch ``(B, act_dim_j)`` per agent, as stored when acting.
            target_q: the critic's target ``(B,)`` or ``(B, 1)``.

        Raises:
            ValueError: an input holds a NaN or an infinity (named, with its index); nothing
                was updated.
            FloatingPointError: a loss overflowed on finite inputs; that step was not taken.
        """
        obs_list, act_list = self._check_batch("learn", obs_n, act_n)
        if not isinstance(target_q, torch.Tensor) or target_q.numel() != obs_list[0].shape[0]:
            got = tuple(target_q.shape) if isinstance(target_q, torch.Tensor) else target_q
            raise ValueError(
                f"MADDPG.learn: target_q must hold one value per row of the batch "
                f"({obs_list[0].shape[0]}), got {got!r}"
            )
        inputs = {f"obs_n[{j}]": batch for j, batch in enumerate(obs_list)}
        inputs.update({f"act_n[{j}]": batch for j, batch in enumerate(act_list)})
        check_finite_inputs("MADDPG.learn", {**inputs, "target_q": target_q})
        i = self.agent_index
        # The actor: this agent's action is drawn again, differentiably, the others' are kept.
        # One forward pass of the policy serves both the action and the output penalty.
        policy = self._policy(self.model, obs_list[i])
        actions = list(act_list)
        actions[i] = self._draw(policy)
        pg_loss = -self.model.value(obs_list, actions).mean()
        out = torch.cat(tuple(policy), dim=-1) if self.continuous_actions else policy
        actor_loss = pg_loss + self.policy_reg * out.square().mean()
        # The critic, on the stored actions: its loss does not depend on the actor, so it is
        # computed (and checked) before the actor steps, and a loss that overflows leaves both
        # networks as they were; the steps come in PARL's order.
        q = self.model.value(obs_list, act_list)
        critic_loss = F.mse_loss(as_flat(q), as_flat(target_q))
        check_finite_step("MADDPG.learn", "the actor's loss", actor_loss)
        check_finite_step("MADDPG.learn", "the critic's loss", critic_loss)
        self._actor_step(actor_loss)
        self._critic_step(critic_loss)
        self.sync_target()
        return critic_loss.detach()

    def _actor_step(self, loss: torch.Tensor) -> None:
        """Gradients for the actor's parameters only (the critic's are never computed), clipped,
        and an Adam step."""
        grads = torch.autograd.grad(loss, self._actor_params)
        for param, grad in zip(self._actor_params, grads, strict=True):
            param.grad = grad
        clip_grad_norm(self._actor_params, self.max_grad_norm)
        self.actor_optimizer.step()

    def _critic_step(self, loss: torch.Tensor) -> None:
        grads = torch.autograd.grad(loss, self._critic_params)
        for param, grad in zip(self._critic_params, grads, strict=True):
            param.grad = grad
        clip_grad_norm(self._critic_params, self.max_grad_norm)
        self.critic_optimizer.step()

    # -- input checks --------------------------------------------------------------------------
    def _check_batch(
        self, where: str, obs_n: Sequence[torch.Tensor], act_n: Sequence[torch.Tensor]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """``obs_n`` and ``act_n`` as lists, after checking that they hold one batch per agent,
        with the same number of rows and, where the space tells, the right action width."""
        owner = f"MADDPG.{where}"
        lists = []
        for name, batches in (("obs_n", obs_n), ("act_n", act_n)):
            if isinstance(batches, torch.Tensor) or not isinstance(batches, (list, tuple)):
                raise TypeError(
                    f"{owner}: {name} must be a list with one tensor per agent "
                    f"({self.n_agents}), got {type(batches).__name__}"
                )
            if len(batches) != self.n_agents:
                raise ValueError(
                    f"{owner}: {name} has {len(batches)} entries but act_space lists "
                    f"{self.n_agents} agents; pass one batch per agent, in act_space's order"
                )
            lists.append(list(batches))
        obs_list, act_list = lists
        rows = None
        for name, batches in (("obs_n", obs_list), ("act_n", act_list)):
            for j, batch in enumerate(batches):
                if not isinstance(batch, torch.Tensor) or batch.dim() < 2:
                    got = tuple(batch.shape) if isinstance(batch, torch.Tensor) else batch
                    raise ValueError(
                        f"{owner}: {name}[{j}] must be a tensor (B, ...) with a batch axis, "
                        f"got {type(batch).__name__} {got!r}"
                    )
                if rows is None:
                    rows = batch.shape[0]
                elif batch.shape[0] != rows:
                    raise ValueError(
                        f"{owner}: {name}[{j}] has {batch.shape[0]} rows but obs_n[0] has "
                        f"{rows}; every agent's batch must hold the same transitions"
                    )
        for j, (batch, width) in enumerate(zip(act_list, self._act_widths, strict=True)):
            if width is not None and batch.shape[-1] != width:
                raise ValueError(
                    f"{owner}: act_n[{j}] has {batch.shape[-1]} action columns, but agent {j}'s "
                    f"action space {self.act_space[j]} has {width}"
                )
        return obs_list, act_list
