"""AlphaZero's network update (Silver et al., *Mastering the game of Go without human
knowledge*, Nature 2017, and *A general reinforcement learning algorithm that masters chess,
shogi, and Go through self-play*, Science 2018), with the interface of PARL's AlphaZero
benchmark.

The search (MCTS), self-play and the arena belong to the game and live in the example
(``examples/AlphaZero``); this module holds what is learned from them: the policy is pulled
towards the search's visit distribution and the value towards the game's outcome.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from parl.core.algorithm import Algorithm
from parl.utils.device import get_device

__all__ = ["AlphaZero", "AlphaZeroLoss", "alphazero_loss"]


class AlphaZeroLoss(NamedTuple):
    """The three numbers ``AlphaZero.learn`` returns, as 0-d tensors."""

    total_loss: torch.Tensor
    pi_loss: torch.Tensor
    v_loss: torch.Tensor


def alphazero_loss(
    log_pi: torch.Tensor, v: torch.Tensor, target_pis: torch.Tensor, target_vs: torch.Tensor
) -> AlphaZeroLoss:
    """AlphaZero's loss without its L2 term (the optimizer's weight decay, if any, plays it):

    ``pi_loss = -mean_b sum_a target_pis[b, a] * log_pi[b, a]`` (cross-entropy against the
    search's visit distribution), ``v_loss = mean_b (target_vs[b] - v[b])^2`` (squared error
    against the outcome, +1 win, -1 loss, 0 draw, from the view of the player to move) and
    ``total_loss = pi_loss + v_loss``: the paper's ``(z - v)^2 - pi^T log p``.

    Shapes: ``log_pi (B, A)``, ``v (B, 1)`` or ``(B,)``, ``target_pis (B, A)``,
    ``target_vs (B,)``.
    """
    batch = target_pis.shape[0]
    pi_loss = -(target_pis * log_pi).sum() / batch
    v_loss = ((target_vs - v.reshape(-1)) ** 2).sum() / batch
    return AlphaZeroLoss(pi_loss + v_loss, pi_loss, v_loss)


class AlphaZero(Algorithm):
    """AlphaZero's learner: ``learn`` takes one optimizer step on
    ``(z - v)^2 - pi^T log p`` (``alphazero_loss``); ``predict`` gives the network's move
    probabilities and value for the search.

    The model maps a batch of boards, each from the view of the player to move, to
    ``(log_pi, v)``: log-probabilities of the moves ``(B, A)`` (a ``log_softmax``) and values in
    ``[-1, 1]`` ``(B, 1)`` (a ``tanh``), as PARL's ``Connect4Model`` does. It may use dropout
    or batch normalisation: ``learn`` puts it in training mode and ``predict`` in evaluation
    mode, as PARL's AlphaZero does.

    The optimizer is the caller's, passed to each ``learn`` (PARL's signature), so its state
    lives with the caller (the example's agent saves it in its checkpoints).

    Args:
        model: the policy-value network.
        device: ``"auto"`` (GPU if available), ``"cpu"``, ``"cuda:0"``...; the model is moved
            there.
    """

    model_methods = ("forward",)

    def __init__(self, model: nn.Module, *, device: str | torch.device = "auto") -> None:
        super().__init__(model, device=get_device(device))

    def learn(
        self,
        boards: torch.Tensor,
        target_pis: torch.Tensor,
        target_vs: torch.Tensor,
        optimizer: torch.optim.Optimizer,
    ) -> AlphaZeroLoss:
        """One step of ``optimizer`` on a batch; returns the detached ``(total_loss, pi_loss,
        v_loss)``.

        Shapes: ``boards (B, *board_shape)``, ``target_pis (B, A)`` (the search's visit
        distribution, rows summing to 1), ``target_vs (B,)`` (the outcome for the player to move
        on that board).
        """
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"AlphaZero.learn: optimizer must be a torch.optim.Optimizer over the model's "
                f"parameters, got {type(optimizer).__name__}"
            )
        batch = boards.shape[0] if boards.dim() else -1
        if target_pis.dim() != 2 or target_vs.shape != (batch,) or target_pis.shape[0] != batch:
            raise ValueError(
                f"AlphaZero.learn expects boards (B, ...), target_pis (B, A) and target_vs (B,), "
                f"got boards {tuple(boards.shape)}, target_pis {tuple(target_pis.shape)} and "
                f"target_vs {tuple(target_vs.shape)}"
            )
        self.model.train()
        log_pi, v = self.model(boards)
        loss = alphazero_loss(log_pi, v, target_pis, target_vs)
        optimizer.zero_grad()
        loss.total_loss.backward()
        optimizer.step()
        return AlphaZeroLoss(*(part.detach() for part in loss))

    @torch.no_grad()
    def predict(self, board: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The move probabilities ``(B, A)`` (``exp(log_pi)``) and values ``(B, 1)`` of a batch
        of boards, in evaluation mode and without gradients."""
        self.model.eval()
        log_pi, v = self.model(board)
        return torch.exp(log_pi), v
