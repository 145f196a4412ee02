"""QMIX (Rashid et al. 2018, https://arxiv.org/abs/1803.11485): cooperative agents with
recurrent Q networks whose chosen values a state-conditioned monotonic mixer adds up to one
team value ``Q_tot``, learned end to end from the team reward on whole episodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from parl.algorithms.finite import check_finite_inputs, check_finite_step
from parl.algorithms.offpolicy import clip_grad_norm as clip_gradients
from parl.algorithms.offpolicy import make_target
from parl.core.algorithm import Algorithm, require_model_methods
from parl.core.model import sync_module_weights
from parl.utils.device import get_device
from parl.validation import check_bool, check_float, check_int

__all__ = ["QMIX"]

# The value PARL gives to unavailable actions before a max: far below any Q, yet finite, so
# that padded steps (no action available) stay finite through the mixer and vanish under the mask.
_UNAVAILABLE_Q = -1e10


def _episode_shapes(owner: str, n_agents: int, **tensors: torch.Tensor) -> tuple[int, int]:
    """Check the episode batch of ``QMIX.learn``; returns ``(batch_size, episode_len)``."""
    expected = {
        "state_batch": "(B, T, state_dim)",
        "actions_batch": "(B, T, n_agents)",
        "reward_batch": "(B, T, 1)",
        "terminated_batch": "(B, T, 1)",
        "obs_batch": "(B, T, n_agents, obs_dim)",
        "available_actions_batch": "(B, T, n_agents, n_actions)",
        "filled_batch": "(B, T, 1)",
    }
    dims = {name: shape.count(",") + 1 for name, shape in expected.items()}
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{owner}: {name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != dims[name]:
            raise ValueError(
                f"{owner}: {name} must have shape {expected[name]}, got {tuple(tensor.shape)}"
            )
    batch_size, episode_len = tensors["state_batch"].shape[:2]
    for name, tensor in tensors.items():
        if tuple(tensor.shape[:2]) != (batch_size, episode_len):
            raise ValueError(
                f"{owner}: every batch must hold the same episodes of the same length (B, T); "
                f"state_batch is ({batch_size}, {episode_len}) but {name} is "
                f"{tuple(tensor.shape[:2])}: pad every episode to the same length T"
            )
        if name in ("reward_batch", "terminated_batch", "filled_batch") and tensor.shape[2] != 1:
            raise ValueError(f"{owner}: {name} must be (B, T, 1), got {tuple(tensor.shape)}")
    for name in ("actions_batch", "obs_batch", "available_actions_batch"):
        if tensors[name].shape[2] != n_agents:
            raise ValueError(
                f"{owner}: {name} holds {tensors[name].shape[2]} agents on axis 2, but the "
                f"mixer's n_agents is {n_agents}"
            )
    if episode_len < 2:
        raise ValueError(
            f"{owner}: episodes must hold at least 2 steps (a transition needs the next step), "
            f"got T={episode_len}"
        )
    return batch_size, episode_len


_OPTIMIZERS: dict[str, Callable[[list[nn.Parameter], float], torch.optim.Optimizer]] = {
    "rmsprop": lambda params, lr: torch.optim.RMSprop(params, lr=lr, alpha=0.99, eps=1e-5),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
}


class QMIX(Algorithm):
    """QMIX for cooperative agents sharing one recurrent Q network.

    ``Q_tot(s, u) = mixer([Q_a(tau_a, u_a)]_a, s)`` is regressed onto ``r + gamma * (1 - done) *
    Q_tot_target(s', [max_u' Q_a_target(tau'_a, u')]_a)``, with unavailable actions left out
    of the max; with ``double_q`` the online network picks ``u'`` and the target network values
    it (van Hasselt et al. 2016). One optimizer updates the agent network and the mixer
    together: RMSprop (``alpha=0.99, eps=1e-5``, as in PARL and pymarl) or Adam (EPyMARL's).

    ``agent_model(obs, hidden) -> (q (B * n_agents, n_actions), hidden (B * n_agents, H))`` and
    ``agent_model.init_hidden() -> (1, H)``; ``qmixer_model(agent_qs (B, T, n_agents), states
    (B, T, state_dim)) -> (B, T, 1)``, with an integer attribute ``n_agents``. An agent model
    may also have ``unroll(inputs (T, B * n_agents, obs_dim), hidden (B * n_agents, H)) -> q
    (T, B * n_agents, n_actions)``: the Q-values of a whole batch of episodes at once, what
    ``forward`` gives step by step. ``learn`` then uses it (the example's networks run their
    layers over every step in one call, and their GRU in torch's own loop).

    Episodes are padded to one length ``T``, PARL's layout: step ``t`` holds ``s_t, o_t, u_t,
    r_t`` and ``terminated_t``; padding steps have ``filled = 1`` (and no available action). A
    transition ``t`` is learned when step ``t`` is real and either ends the episode or is
    followed by a real step. Unlike PARL, this includes the episode's terminal transition, whose
    target is just its reward: PARL masks it out, so its QMIX never learns the reward of an
    episode's last step (see ``docs/algorithms/qmix.md``).

    The target networks are copied from the online ones by ``sync_target()``; PARL's QMIX has no
    such method and its agent copies ``target_agent_model``/``target_qmixer_model`` itself with
    the models' ``update(model)``, which keeps working here.

    Args:
        agent_model: the agents' shared recurrent Q network.
        qmixer_model: the mixing network; its ``n_agents`` is the number of agents.
        double_q: choose the next actions with the online network (Double DQN).
        gamma: discount factor.
        lr: the optimizer's learning rate.
        clip_grad_norm: clip the gradients' global norm to this value; ``None`` (or 0, as in
            PARL) does not clip.
        optimizer: ``"rmsprop"`` (PARL's and pymarl's) or ``"adam"`` (EPyMARL's, torch's
            defaults beyond ``lr``).
        device: ``"auto"`` (GPU if available), ``"cpu"``, ``"cuda:0"``...
    """

    # the models' own methods (init_hidden, forward) are what QMIX calls
    agent_model: Any
    target_agent_model: Any

    def __init__(
        self,
        agent_model: nn.Module,
        qmixer_model: nn.Module,
        double_q: bool = True,
        gamma: float = 0.99,
        lr: float = 0.0005,
        clip_grad_norm: float | None = None,
        *,
        optimizer: str = "rmsprop",
        device: str | torch.device = "auto",
    ) -> None:
        name = type(self).__name__
        if optimizer not in _OPTIMIZERS:
            raise ValueError(
                f"{name}: optimizer must be one of {sorted(_OPTIMIZERS)} (RMSprop is PARL's, "
                f"Adam EPyMARL's), got {optimizer!r}"
            )
        require_model_methods(agent_model, ("init_hidden", "forward"), name, "agent_model")
        require_model_methods(qmixer_model, ("forward",), name, "qmixer_model")
        n_agents = check_int(
            "qmixer_model.n_agents", getattr(qmixer_model, "n_agents", None), low=1, owner=name,
            what="an int >= 1 (the number of agents it mixes)",
            hint="set self.n_agents in its __init__",
        )  # fmt: skip
        self.double_q = check_bool("double_q", double_q, owner=name)
        self.gamma = check_float("gamma", gamma, low=0.0, high=1.0, owner=name)
        self.lr = check_float("lr", lr, low=0.0, low_open=True, owner=name)
        self.clip_grad_norm = (
            None
            if not clip_grad_norm
            else check_float("clip_grad_norm", clip_grad_norm, low=0.0, low_open=True, owner=name)
        )
        self.n_agents = n_agents
        resolved = get_device(device)
        self.agent_model = agent_model.to(resolved)
        self.qmixer_model = qmixer_model.to(resolved)
        # ``self.model`` is the agent network, what acting needs (get_weights, Agent.save)
        super().__init__(self.agent_model, device=resolved)
        self.target_agent_model = make_target(self.agent_model)
        self.target_qmixer_model = make_target(self.qmixer_model)
        self.params = list(self.agent_model.parameters()) + list(self.qmixer_model.parameters())
        self.optimizer = _OPTIMIZERS[optimizer](self.params, self.lr)
        self.hidden_states: torch.Tensor | None = None
        self.target_hidden_states: torch.Tensor | None = None

    def init_hidden(self, batch_size: int = 1) -> torch.Tensor:
        """Zero hidden states for ``batch_size`` episodes of every agent, ``(B, n_agents, H)``."""
        hidden = self.agent_model.init_hidden()
        return hidden.unsqueeze(0).expand(batch_size, self.n_agents, -1)

    def _init_hidden_states(self, batch_size: int) -> None:
        """Reset ``hidden_states`` (what PARL's agent acts with) for ``batch_size`` episodes.

        Args:
            batch_size: the number of episodes played at once.
        """
        self.hidden_states = self.init_hidden(batch_size)
        self.target_hidden_states = self.target_agent_model.init_hidden()
        self.target_hidden_states = self.target_hidden_states.unsqueeze(0).expand(
            batch_size, self.n_agents, -1
        )

    def predict_local_q(
        self, obs: torch.Tensor, hidden_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each agent's Q-values and next hidden state: ``agent_model(obs, hidden_state)``.

        Args:
            obs: ``(n_agents, obs_dim)`` (or ``(B * n_agents, obs_dim)``).
            hidden_state: the agents' hidden states, ``(..., H)``.
        """
        return self.agent_model(obs, hidden_state)

    @torch.no_grad()
    def predict(
        self,
        obs: torch.Tensor,
        available_actions: torch.Tensor,
        hidden_state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy available actions ``(n_agents,)`` and the next hidden state.

        Args:
            obs: ``(n_agents, obs_dim)``.
            available_actions: ``(n_agents, n_actions)``, nonzero where an action is available.
            hidden_state: from ``init_hidden(1)`` or the previous call.
        """
        q, hidden = self.agent_model(obs, hidden_state)
        q = q.masked_fill(available_actions == 0, _UNAVAILABLE_Q)
        return q.argmax(dim=-1), hidden

    def _check_actions(
        self, actions: torch.Tensor, available: torch.Tensor, real: torch.Tensor
    ) -> None:
        n_actions = available.shape[-1]
        if actions.is_floating_point() and not torch.equal(actions, actions.round()):
            raise ValueError("QMIX.learn: actions_batch must hold integer action indices")
        actions = actions.long()
        if bool(((actions < 0) | (actions >= n_actions)).any()):
            raise ValueError(
                f"QMIX.learn: actions_batch holds action indices outside [0, {n_actions}): "
                f"{actions[(actions < 0) | (actions >= n_actions)].unique().tolist()}"
            )
        chosen_available = available.gather(3, actions.unsqueeze(-1)).squeeze(-1) != 0
        bad = (~chosen_available) & (real != 0)  # padding steps have no available action
        if bool(bad.any()):
            episode, step, agent = (int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"QMIX.learn: an action outside the available-action mask was taken: episode "
                f"{episode}, step {step}, agent {agent} took action "
                f"{int(actions[episode, step, agent])}, but available_actions_batch there is "
                f"{available[episode, step, agent].tolist()}; store the actions the agents took "
                f"and the masks they were chosen under, with filled = 1 on padding steps"
            )

    def _unroll(self, model: Any, obs_batch: torch.Tensor, batch_size: int) -> torch.Tensor:
        """``model``'s Q-values along the episodes, ``(B, T, n_agents, n_actions)``."""
        hidden = model.init_hidden().unsqueeze(0).expand(batch_size, self.n_agents, -1)
        unroll = getattr(model, "unroll", None)
        if callable(unroll):
            steps = obs_batch.shape[1]
            inputs = obs_batch.transpose(0, 1).reshape(steps, batch_size * self.n_agents, -1)
            q = unroll(inputs, hidden.reshape(batch_size * self.n_agents, -1))
            if q.shape[:2] != (steps, batch_size * self.n_agents):
                raise ValueError(
                    f"QMIX.learn: agent_model.unroll returned Q-values of shape "
                    f"{tuple(q.shape)} for inputs of shape {tuple(inputs.shape)}; it must "
                    f"return (T, B * n_agents, n_actions) = ({steps}, "
                    f"{batch_size * self.n_agents}, n_actions)"
                )
            return q.reshape(steps, batch_size, self.n_agents, -1).transpose(0, 1)
        qs = []
        for t in range(obs_batch.shape[1]):
            obs = obs_batch[:, t].reshape(-1, obs_batch.shape[-1])
            q, hidden = model(obs, hidden)
            qs.append(q.reshape(batch_size, self.n_agents, -1))
        return torch.stack(qs, dim=1)

    def learn(
        self,
        state_batch: torch.Tensor,
        actions_batch: torch.Tensor,
        reward_batch: torch.Tensor,
        terminated_batch: torch.Tensor,
        obs_batch: torch.Tensor,
        available_actions_batch: torch.Tensor,
        filled_batch: torch.Tensor,
    ) -> tuple[float, float]:
        """One optimizer step on a batch of padded episodes; returns ``(loss, mean_td_error)``.

        Args:
            state_batch: ``(B, T, state_dim)``.
            actions_batch: ``(B, T, n_agents)`` integer actions.
            reward_batch: ``(B, T, 1)`` team rewards.
            terminated_batch: ``(B, T, 1)``, 1 where the episode ended (and on padding).
            obs_batch: ``(B, T, n_agents, obs_dim)``.
            available_actions_batch: ``(B, T, n_agents, n_actions)``, nonzero where available.
            filled_batch: ``(B, T, 1)``, 1 on padding steps, 0 on real ones (PARL's meaning).
        """
        batch_size, _ = _episode_shapes(
            "QMIX.learn",
            self.n_agents,
            state_batch=state_batch,
            actions_batch=actions_batch,
            reward_batch=reward_batch,
            terminated_batch=terminated_batch,
            obs_batch=obs_batch,
            available_actions_batch=available_actions_batch,
            filled_batch=filled_batch,
        )
        # the flags too: a NaN in them reaches the mask, and the loss, as surely as a reward's
        check_finite_inputs(
            "QMIX.learn",
            {
                "reward_batch": reward_batch,
                "terminated_batch": terminated_batch,
                "filled_batch": filled_batch,
                "state_batch": state_batch,
                "obs_batch": obs_batch,
            },
        )
        real = 1.0 - filled_batch.float()
        self._check_actions(actions_batch, available_actions_batch, real)
        terminated = terminated_batch[:, :-1].float()
        reward = reward_batch[:, :-1].float()
        # transition t counts if step t is real and either ends the episode or has a real next
        # step (a step cut off by padding has no next observation to bootstrap from)
        mask = real[:, :-1] * (1.0 - (1.0 - terminated) * (1.0 - real[:, 1:]))
        if float(mask.sum()) == 0.0:
            raise ValueError(
                "QMIX.learn: the batch holds no transition to learn from (every step is padding "
                "or cut off by padding); check filled_batch (1 marks padding) and "
                "terminated_batch"
            )

        local_qs = self._unroll(self.agent_model, obs_batch, batch_size)
        if local_qs.shape[-1] != available_actions_batch.shape[-1]:
            raise ValueError(
                f"QMIX.learn: available_actions_batch masks {available_actions_batch.shape[-1]} "
                f"actions, but agent_model returns Q-values for {local_qs.shape[-1]}"
            )
        unavailable_next = available_actions_batch[:, 1:] == 0
        actions = actions_batch[:, :-1].long().unsqueeze(-1)
        chosen_qs = local_qs[:, :-1].gather(3, actions).squeeze(3)
        with torch.no_grad():
            target_qs = self._unroll(self.target_agent_model, obs_batch, batch_size)[:, 1:]
            target_qs = target_qs.masked_fill(unavailable_next, _UNAVAILABLE_Q)
            if self.double_q:
                online_next = local_qs.detach()[:, 1:].masked_fill(unavailable_next, _UNAVAILABLE_Q)
                next_actions = online_next.max(dim=3, keepdim=True).indices
                target_max_qs = target_qs.gather(3, next_actions).squeeze(3)
            else:
                target_max_qs = target_qs.max(dim=3).values
            target_q_tot = self.target_qmixer_model(target_max_qs, state_batch[:, 1:])
            target = reward + self.gamma * (1.0 - terminated) * target_q_tot

        q_tot = self.qmixer_model(chosen_qs, state_batch[:, :-1])
        masked_td_error = (target - q_tot) * mask
        loss = masked_td_error.square().sum() / mask.sum()
        check_finite_step("QMIX.learn", "the TD loss", loss)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.clip_grad_norm is not None:
            clip_gradients(self.params, self.clip_grad_norm)
        self.optimizer.step()
        mean_td_error = masked_td_error.detach().sum() / mask.sum()
        return float(loss.detach()), float(mean_td_error)

    def sync_target(self, decay: float = 0.0) -> None:
        """``target = decay * target + (1 - decay) * online`` for the agent network and the
        mixer; the default copies them.

        Args:
            decay: the share of the old target weights kept, in ``[0, 1]``.
        """
        sync_module_weights(self.agent_model, self.target_agent_model, decay)
        sync_module_weights(self.qmixer_model, self.target_qmixer_model, decay)
