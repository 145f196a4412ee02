"""COMA (Foerster et al. 2018, https://arxiv.org/abs/1705.08926): counterfactual multi-agent
policy gradients. Decentralised recurrent actors share one network; a centralised critic gives
``Q(s, u_-a, u_a)`` for every action of agent ``a`` with the other agents' actions fixed, and
the actor's advantage subtracts the counterfactual baseline ``sum_u' pi(u' | tau_a) Q(s, u_-a,
u')``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from parl.algorithms.finite import check_finite_inputs, check_finite_step
from parl.algorithms.offpolicy import clip_grad_norm, make_target
from parl.core.algorithm import Algorithm
from parl.core.model import sync_module_weights
from parl.utils.device import get_device
from parl.validation import check_float, check_int

__all__ = ["COMA", "exploration_probs", "td_lambda_targets"]

# batch key -> (its shape, its rank)
# PARL's COMA takes torch's RMSprop defaults (QMIX's are pymarl's alpha and eps)
_OPTIMIZERS: dict[str, Callable[[list[nn.Parameter], float], torch.optim.Optimizer]] = {
    "rmsprop": lambda params, lr: torch.optim.RMSprop(params, lr=lr),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
}
_BATCH_KEYS: dict[str, tuple[str, int]] = {
    "r": ("(E, T, 1)", 3),
    "u": ("(E, T, n_agents, 1)", 4),
    "avail_u": ("(E, T, n_agents, n_actions)", 4),
    "padded": ("(E, T, 1)", 3),
    "isover": ("(E, T, 1)", 3),
    "actor_inputs": ("(E, T, n_agents, actor_input_dim)", 4),
    "critic_inputs": ("(E, T, n_agents, critic_input_dim)", 4),
    "critic_inputs_next": ("(E, T, n_agents, critic_input_dim)", 4),
}


def td_lambda_targets(
    reward: torch.Tensor,
    next_q: torch.Tensor,
    not_over: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    td_lambda: float,
) -> torch.Tensor:
    """TD(lambda) returns along the time axis (axis 1), truncated at the end of the batch.

    ``G_t = mask_t * (r_t + gamma * ((1 - lambda) * not_over_t * Q_{t+1} + lambda * G_{t+1}))``
    and, at the last step, ``G = mask * (r + gamma * not_over * Q_{t+1})``: the forward view
    ``(1 - lambda) * sum_n lambda^(n-1) G^(n)_t`` with the last n-step return taking the
    remaining weight (Sutton and Barto 2018, section 12.1), computed backwards in one pass.

    Args:
        reward: ``r_t``, ``(E, T, ...)``.
        next_q: the target critic's ``Q(s_{t+1}, u_{t+1})``, the shape of ``reward``.
        not_over: 0 where the episode ended at step ``t``, else 1.
        mask: 0 on padding steps, else 1.
        gamma: discount factor.
        td_lambda: the trace decay ``lambda``.
    """
    returns = torch.empty_like(reward)
    last = reward.shape[1] - 1
    one_step = reward + gamma * not_over * next_q
    returns[:, last] = mask[:, last] * one_step[:, last]
    for t in range(last - 1, -1, -1):
        blended = (1.0 - td_lambda) * not_over[:, t] * next_q[:, t] + td_lambda * returns[:, t + 1]
        returns[:, t] = mask[:, t] * (reward[:, t] + gamma * blended)
    return returns


def exploration_probs(probs: torch.Tensor, available: torch.Tensor, epsilon: float) -> torch.Tensor:
    """``(1 - epsilon) * probs + epsilon / n_available``, zero on unavailable actions and
    renormalised: the distribution the agents act with. Rows with no available action (padding)
    are all zero.

    Args:
        probs: the policy's probabilities, ``(..., n_actions)``.
        available: nonzero where an action is available, the shape of ``probs``.
        epsilon: the share of uniform exploration, in ``[0, 1]``.
    """
    unavailable = available == 0
    n_available = (~unavailable).sum(dim=-1, keepdim=True).clamp(min=1)
    mixed = (1.0 - epsilon) * probs + epsilon / n_available
    mixed = mixed.masked_fill(unavailable, 0.0)
    # padding rows sum to 0: 0 / 0, masked again below
    mixed = mixed / mixed.sum(dim=-1, keepdim=True)
    return mixed.masked_fill(unavailable, 0.0)


class COMA(Algorithm):
    """Counterfactual multi-agent policy gradients with a TD(lambda) critic.

    ``model.policy(inputs, hidden) -> (logits (B, n_actions), hidden (B, H))`` is the agents'
    shared recurrent actor (``model.actor_model.init_hidden() -> (1, H)``),
    ``model.value(critic_inputs) -> Q (B, n_actions)`` the centralised critic, and
    ``get_actor_params()``/``get_critic_params()`` split the parameters between the two
    optimizers.

    Each ``learn`` first regresses the critic's ``Q(s_t, u_t)`` onto TD(lambda) returns
    bootstrapped from the *target* critic at ``(s_{t+1}, u_{t+1})``, then steps the actor along
    ``A_a = Q(s, u) - sum_u' pi_a(u') Q(s, (u_-a, u'))`` (the critic's values before its step)
    times ``log pi_a(u_a)``. ``sync_target()`` copies the model into the target model.

    Three deliberate deviations from PARL 2.2.1's COMA (``docs/algorithms/coma.md``): PARL
    evaluates its bootstrap on ``batch["critic_inputs"]`` instead of
    ``batch["critic_inputs_next"]``; it takes the bootstrap from the online critic, never from
    its target model; and its exploration mixture divides ``epsilon`` by the number of available
    actions in the whole batch instead of per agent and step, so it learns from a distribution
    other than the one its agent acts with (``exploration_probs``).

    Args:
        model: the actor-critic model.
        n_actions: actions per agent.
        n_agents: number of agents.
        grad_norm_clip: clip each optimizer's gradients to this global norm; ``None``: no clip
            (PARL requires a number; its example uses 10).
        actor_lr: the actor's RMSprop learning rate (PARL's example: 1e-4).
        critic_lr: the critic's RMSprop learning rate (PARL's example: 1e-3).
        gamma: discount factor.
        td_lambda: lambda of the critic's TD(lambda) targets.
        optimizer: ``"rmsprop"`` (PARL's: torch's defaults) or ``"adam"`` (EPyMARL's), for both
            the actor and the critic; keyword-only.
        entropy_coef: weight of the entropy bonus in the actor's loss (the entropy of the
            distribution the agents act with, averaged over the real steps); 0, PARL's, has
            none. EPyMARL's COMA uses 0.001. Keyword-only.
        device: ``"auto"`` (GPU if available), ``"cpu"``, ``"cuda:0"``...
    """

    model_methods = ("policy", "value", "get_actor_params", "get_critic_params")
    # the model's own methods (policy, value, actor_model.init_hidden) are what COMA calls
    model: Any
    target_model: Any

    def __init__(
        self,
        model: nn.Module,
        n_actions: int,
        n_agents: int,
        grad_norm_clip: float | None = None,
        actor_lr: float = 1e-4,
        critic_lr: float = 1e-3,
        gamma: float = 0.99,
        td_lambda: float = 0.8,
        *,
        optimizer: str = "rmsprop",
        entropy_coef: float = 0.0,
        device: str | torch.device = "auto",
    ) -> None:
        name = type(self).__name__
        self.n_actions = check_int("n_actions", n_actions, low=1, owner=name)
        self.n_agents = check_int("n_agents", n_agents, low=1, owner=name)
        self.grad_norm_clip = (
            None
            if grad_norm_clip is None
            else check_float("grad_norm_clip", grad_norm_clip, low=0.0, low_open=True, owner=name)
        )
        self.actor_lr = check_float("actor_lr", actor_lr, low=0.0, low_open=True, owner=name)
        self.critic_lr = check_float("critic_lr", critic_lr, low=0.0, low_open=True, owner=name)
        self.gamma = check_float("gamma", gamma, low=0.0, high=1.0, owner=name)
        self.td_lambda = check_float("td_lambda", td_lambda, low=0.0, high=1.0, owner=name)
        self.entropy_coef = check_float("entropy_coef", entropy_coef, low=0.0, owner=name)
        if optimizer not in _OPTIMIZERS:
            raise ValueError(
                f"{name}: optimizer must be one of {sorted(_OPTIMIZERS)} (RMSprop is PARL's, "
                f"Adam EPyMARL's), got {optimizer!r}"
            )
        actor = getattr(model, "actor_model", None)
        if not isinstance(actor, nn.Module) or not callable(getattr(actor, "init_hidden", None)):
            raise TypeError(
                f"{name} needs model.actor_model to be the recurrent actor with an "
                f"init_hidden() method returning a (1, hidden_size) zero state, but "
                f"{type(model).__name__}.actor_model is {type(actor).__name__}"
            )
        super().__init__(model, device=get_device(device))
        self.target_model = make_target(self.model)
        self.actor_parameters = list(self.model.get_actor_params())
        self.critic_parameters = list(self.model.get_critic_params())
        make_optimizer = _OPTIMIZERS[optimizer]
        self.critic_optimizer = make_optimizer(self.critic_parameters, self.critic_lr)
        self.actor_optimizer = make_optimizer(self.actor_parameters, self.actor_lr)

    def init_hidden(self, ep_num: int) -> torch.Tensor:
        """Zero hidden states of every agent in ``ep_num`` episodes, ``(ep_num, n_agents, H)``.

        Args:
            ep_num: the number of episodes.
        """
        return self.model.actor_model.init_hidden().unsqueeze(0).expand(ep_num, self.n_agents, -1)

    @torch.no_grad()
    def predict(
        self, obs: torch.Tensor, rnn_h_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's action probabilities ``(B, n_actions)`` and the next hidden state.

        Args:
            obs: actor inputs (observation, last action and agent id, one-hot), ``(B, dim)``.
            rnn_h_in: the hidden state from ``init_hidden`` or the previous call.
        """
        logits, rnn_h_out = self.model.policy(obs, rnn_h_in)
        return torch.softmax(logits, dim=-1), rnn_h_out

    def _check_batch(self, batch: Mapping[str, torch.Tensor]) -> tuple[int, int]:
        if not isinstance(batch, Mapping):
            raise TypeError(f"COMA.learn: batch must be a dict of tensors, got {type(batch)}")
        missing = [key for key in _BATCH_KEYS if key not in batch]
        if missing:
            raise ValueError(
                f"COMA.learn: batch lacks {missing}; it needs {list(_BATCH_KEYS)} (PARL's agent "
                f"adds actor_inputs, critic_inputs and critic_inputs_next)"
            )
        for key in _BATCH_KEYS:
            if not isinstance(batch[key], torch.Tensor):
                raise TypeError(
                    f"COMA.learn: batch[{key!r}] must be a torch.Tensor, got "
                    f"{type(batch[key]).__name__} (PARL's agent converts the episodes with "
                    "torch.as_tensor)"
                )
        ep_num, tr_num = batch["r"].shape[:2]
        for key, (shape, rank) in _BATCH_KEYS.items():
            tensor = batch[key]
            if tensor.dim() != rank or tuple(tensor.shape[:2]) != (ep_num, tr_num):
                raise ValueError(
                    f"COMA.learn: batch[{key!r}] must be {shape} with the (E, T) = "
                    f"({ep_num}, {tr_num}) of batch['r'], got {tuple(tensor.shape)}"
                )
            if rank == 4 and tensor.shape[2] != self.n_agents:
                raise ValueError(
                    f"COMA.learn: batch[{key!r}] holds {tensor.shape[2]} agents on axis 2, "
                    f"but n_agents is {self.n_agents}"
                )
        if batch["avail_u"].shape[3] != self.n_actions or batch["u"].shape[3] != 1:
            raise ValueError(
                f"COMA.learn: batch['avail_u'] must be (E, T, n_agents, {self.n_actions}) and "
                f"batch['u'] (E, T, n_agents, 1), got {tuple(batch['avail_u'].shape)} and "
                f"{tuple(batch['u'].shape)}"
            )
        if batch["u"].is_floating_point() and not torch.equal(batch["u"], batch["u"].round()):
            # .long() would truncate them: the critic would learn other actions than were taken
            raise ValueError("COMA.learn: batch['u'] must hold integer action indices")
        u = batch["u"].long()
        if bool(((u < 0) | (u >= self.n_actions)).any()):
            raise ValueError(f"COMA.learn: batch['u'] holds actions outside [0, {self.n_actions})")
        taken_available = batch["avail_u"].gather(3, u).squeeze(3) != 0
        real = batch["padded"].reshape(ep_num, tr_num, 1) == 0
        bad = real & ~taken_available
        if bool(bad.any()):
            episode, step, agent = (int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"COMA.learn: an action outside the available-action mask was taken: episode "
                f"{episode}, step {step}, agent {agent} took {int(u[episode, step, agent])}, but "
                f"batch['avail_u'] there is {batch['avail_u'][episode, step, agent].tolist()}"
            )
        return ep_num, tr_num

    def _critic_loss(
        self, batch: Mapping[str, torch.Tensor], mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The critic's TD(lambda) loss and its ``Q``, ``(E, T, N, A)``, detached."""
        ep_num, tr_num = mask.shape[:2]
        shape = (ep_num, tr_num, self.n_agents, -1)
        u = batch["u"].long()
        u_next = torch.zeros_like(u)
        u_next[:, :-1] = u[:, 1:]
        q_values = self.model.value(
            batch["critic_inputs"].reshape(-1, batch["critic_inputs"].shape[-1])
        )
        q_values = q_values.reshape(shape)
        with torch.no_grad():
            inputs_next = batch["critic_inputs_next"]
            q_next = self.target_model.value(inputs_next.reshape(-1, inputs_next.shape[-1]))
            q_next_taken = q_next.reshape(shape).gather(3, u_next).squeeze(3)
            not_over = (1.0 - batch["isover"].float()).expand_as(mask)
            reward = batch["r"].float().expand_as(mask)
            targets = td_lambda_targets(
                reward, q_next_taken, not_over, mask, self.gamma, self.td_lambda
            )
        q_taken = q_values.gather(3, u).squeeze(3)
        masked_td_error = (targets - q_taken) * mask
        loss = masked_td_error.square().sum() / mask.sum()
        return loss, q_values.detach()

    def _actor_loss(
        self,
        batch: Mapping[str, torch.Tensor],
        epsilon: float,
        q_values: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """The actor's loss along the counterfactual advantage, with the entropy bonus."""
        ep_num, tr_num = mask.shape[:2]
        actor_inputs = batch["actor_inputs"]
        hidden = self.init_hidden(ep_num)
        probs = []
        for t in range(tr_num):
            logits, hidden = self.model.policy(
                actor_inputs[:, t].reshape(-1, actor_inputs.shape[-1]), hidden
            )
            probs.append(torch.softmax(logits.reshape(ep_num, self.n_agents, -1), dim=-1))
        action_prob = exploration_probs(torch.stack(probs, dim=1), batch["avail_u"], epsilon)
        u = batch["u"].long()
        q_taken = q_values.gather(3, u).squeeze(3)
        # padding steps: log(1) = 0 instead of log(0), before the mask removes them
        pi_taken = action_prob.gather(3, u).squeeze(3).masked_fill(mask == 0, 1.0)
        baseline = (q_values * action_prob.detach()).sum(dim=3)
        advantage = q_taken - baseline
        loss = -(advantage * torch.log(pi_taken) * mask).sum() / mask.sum()
        if self.entropy_coef > 0.0:
            # -p log p with log's argument floored at the smallest normal float: 0 log 0 = 0
            # as entr gives, but a finite gradient where an available action's probability
            # underflowed to 0 (entr's is infinite there, and the softmax turns it into NaN)
            tiny = torch.finfo(action_prob.dtype).tiny
            entropy = -(action_prob * torch.log(action_prob.clamp(min=tiny))).sum(dim=3)
            loss = loss - self.entropy_coef * (entropy * mask).sum() / mask.sum()
        return loss

    def _step(
        self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: list[nn.Parameter]
    ) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_norm_clip is not None:
            clip_grad_norm(params, self.grad_norm_clip)
        optimizer.step()

    def learn(
        self, batch: Mapping[str, torch.Tensor], epsilon: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One critic step then one actor step; returns ``(critic_loss, actor_loss)``.

        Args:
            batch: PARL's episode batch, every tensor ``(E, T, ...)``: ``r`` ``(E, T, 1)``,
                ``u`` integer ``(E, T, n_agents, 1)``, ``avail_u`` ``(E, T, n_agents,
                n_actions)``, ``padded`` and ``isover`` ``(E, T, 1)``, ``actor_inputs``,
                ``critic_inputs`` and ``critic_inputs_next`` ``(E, T, n_agents, dim)``; other
                keys (``o``, ``s``, ``u_onehot``) are ignored.
            epsilon: the exploration share the actions were sampled with.
        """
        epsilon = check_float("epsilon", epsilon, low=0.0, high=1.0, owner="COMA.learn")
        self._check_batch(batch)
        # the flags too: a NaN in padded or isover reaches the mask or the targets
        checked = ("r", "padded", "isover", "actor_inputs", "critic_inputs", "critic_inputs_next")
        check_finite_inputs("COMA.learn", {f"batch[{key!r}]": batch[key] for key in checked})
        mask = (1.0 - batch["padded"].float()).expand(-1, -1, self.n_agents)
        if float(mask.sum()) == 0.0:
            raise ValueError("COMA.learn: every step of the batch is padding (padded == 1)")
        # both losses before either step (the actor's uses the critic's Q from before its
        # step, as in PARL), so that a loss that overflows leaves both networks as they were
        critic_loss, q_values = self._critic_loss(batch, mask)
        actor_loss = self._actor_loss(batch, epsilon, q_values, mask)
        check_finite_step("COMA.learn", "the critic's loss", critic_loss)
        check_finite_step("COMA.learn", "the actor's loss", actor_loss)
        self._step(self.critic_optimizer, critic_loss, self.critic_parameters)
        self._step(self.actor_optimizer, actor_loss, self.actor_parameters)
        return critic_loss.detach(), actor_loss.detach()

    def sync_target(self, decay: float = 0.0) -> None:
        """``target = decay * target + (1 - decay) * model``; the default copies.

        Args:
            decay: the share of the old target weights kept, in ``[0, 1]``.
        """
        sync_module_weights(self.model, self.target_model, decay)
