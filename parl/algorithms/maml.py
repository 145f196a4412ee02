"""MAML (Finn et al. 2017, https://arxiv.org/abs/1703.03400) and the MAML++ training tricks
(Antoniou et al. 2019, "How to train your MAML", https://arxiv.org/abs/1810.09502) for
few-shot regression: learn an initialisation from which a few SGD steps on a task's support
set fit that task's query set."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from parl.core.algorithm import Algorithm
from parl.validation import check_bool, check_float, check_int

__all__ = ["MAML", "cosine_annealing_lr", "multi_step_loss_weights"]

#: bound on each entry of the inner learning rates' meta-gradient (MAML++'s reference code)
LR_GRAD_CLIP = 20.0


def multi_step_loss_weights(
    num_steps: int, epoch: int, multi_step_loss_num_epochs: int
) -> np.ndarray:
    """Weights of the query loss after each inner step in the multi-step loss, ``(num_steps,)``.

    They start equal (``1 / num_steps`` each); every epoch, each weight but the last loses
    ``1 / num_steps / multi_step_loss_num_epochs`` down to a floor of ``0.03 / num_steps``, and
    the last weight takes what the others gave up, so they always sum to 1 (MAML++, section 4,
    "multi-step loss optimization").

    Args:
        num_steps: inner-loop steps per task.
        epoch: the current epoch, from 0.
        multi_step_loss_num_epochs: epochs over which the weights move to the final step.
    """
    weights = np.full(num_steps, 1.0 / num_steps, dtype=np.float32)
    decay = 1.0 / num_steps / multi_step_loss_num_epochs
    floor = 0.03 / num_steps
    for i in range(num_steps - 1):
        weights[i] = np.maximum(weights[i] - epoch * decay, floor)
    weights[-1] = 1.0 - np.sum(weights[:-1])
    return weights


def cosine_annealing_lr(epoch: int, total_epochs: int, base_lr: float, min_lr: float) -> float:
    """The outer learning rate at ``epoch``: ``min_lr + (base_lr - min_lr) * (1 + cos(pi *
    epoch / total_epochs)) / 2`` (SGDR without restarts, Loshchilov and Hutter 2017; the closed
    form of ``torch.optim.lr_scheduler.CosineAnnealingLR``).

    Args:
        epoch: the current epoch, from 0.
        total_epochs: epochs of the whole run; the rate reaches ``min_lr`` there.
        base_lr: the rate at epoch 0.
        min_lr: the rate at ``total_epochs``.
    """
    return min_lr + (base_lr - min_lr) * (1.0 + math.cos(math.pi * epoch / total_epochs)) / 2.0


class InnerLearningRates(nn.Module):
    """The inner-loop learning rates, one per (step, layer): a module, so that checkpoints and
    ``get_all_weights`` hold them.

    Args:
        num_steps: inner-loop steps per task.
        num_layers: layers of the model (a weight and a bias each).
        init: the starting value of every rate.
        learnable: whether the outer loop learns them (MAML++'s LSLR) or they stay fixed.
    """

    def __init__(self, num_steps: int, num_layers: int, init: float, learnable: bool) -> None:
        super().__init__()
        self.rates = nn.Parameter(
            torch.full((num_steps, num_layers), init), requires_grad=learnable
        )


Batch = Sequence[torch.Tensor]


class MAML(Algorithm):
    """MAML and MAML++ for regression with a mean squared error loss.

    For each task of a batch, ``num_updates_per_iter`` SGD steps on the support set adapt the
    model's weights: ``w_{k+1} = w_k - alpha[k, layer] * grad L_support(w_k)``. The meta-loss is
    the query loss after the last step, or, during the first ``multi_step_loss_num_epochs``
    epochs with ``use_multi_step_loss_optimization``, the weighted sum of the query losses after
    every step (``multi_step_loss_weights``). Adam minimises the mean meta-loss over the batch
    with respect to the initial weights and, with ``learnable_learning_rates``, the rates
    ``alpha`` (their gradient clipped to ``[-20, 20]``).

    A single task whose inner steps overshoot (a large amplitude meeting large learned rates)
    can give a meta-gradient of 1e14 and more. Adam's second-moment estimate then stays huge for
    tens of thousands of steps, which freezes the network's weights for the rest of a run:
    ``max_grad_norm`` clips the weights' meta-gradient before the step (PARL does not; see
    the MAML page).

    ``second_order`` back-propagates through the inner gradients (full MAML); without it the
    inner gradients are constants (first-order MAML). ``first_order_to_second_order_epoch``
    anneals the derivative order as MAML++ does: first order up to and including that epoch,
    second order after it (``-1``, the default: second order from the start, as PARL).

    The model implements ``forward(x, params=None)``, which computes the output with
    ``params`` in place of its own weights when given, and ``get_weights()``, which returns its
    live parameters as a list ``[w_0, b_0, w_1, b_1, ...]``, a weight and a bias per layer.
    That is PARL's MAML model contract and differs from ``parl.Model.get_weights``, which
    returns numpy copies by ``state_dict`` name: ``Algorithm.get_weights`` and the agent's
    checkpoints still give those.

    The arguments have PARL's names and order.

    Args:
        model: the network to meta-train.
        device: ``"auto"``, ``"cpu"``, ``"cuda:0"``... where the model and the data go.
        num_updates_per_iter: inner SGD steps per task.
        num_layers: layers of the model; ``None`` counts them from ``model.get_weights()``.
        task_learning_rate: the starting inner learning rate.
        learnable_learning_rates: learn a rate per step and layer (MAML++'s LSLR).
        meta_learning_rate: Adam's learning rate in the outer loop.
        total_epochs: epochs of the run, the period of the cosine schedule.
        min_learning_rate: the outer learning rate the cosine schedule ends at.
        learning_rate_scheduler: anneal the outer learning rate (``cosine_annealing_lr``)
            instead of keeping it fixed.
        second_order: back-propagate through the inner gradients.
        use_multi_step_loss_optimization: use the multi-step loss in the first epochs.
        multi_step_loss_num_epochs: epochs during which the multi-step loss is used.
        first_order_to_second_order_epoch: last epoch trained to first order when
            ``second_order`` is on (``-1``: none).
        max_grad_norm: clip the global norm of the network weights' meta-gradient to this
            before Adam's step (``None``, the default: no clipping, as PARL).
    """

    model_methods = ("forward", "get_weights")

    def __init__(
        self,
        model: nn.Module,
        device: torch.device | str = "auto",
        num_updates_per_iter: int = 3,
        num_layers: int | None = None,
        task_learning_rate: float = 1e-3,
        learnable_learning_rates: bool = True,
        meta_learning_rate: float = 1e-3,
        total_epochs: int = 80,
        min_learning_rate: float = 1e-5,
        learning_rate_scheduler: bool = True,
        second_order: bool = True,
        use_multi_step_loss_optimization: bool = True,
        multi_step_loss_num_epochs: int = 10,
        *,
        first_order_to_second_order_epoch: int = -1,
        max_grad_norm: float | None = None,
    ) -> None:
        owner = "MAML"
        super().__init__(model, device=device)
        self.device = device
        self.num_updates_per_iter = check_int(
            "num_updates_per_iter", num_updates_per_iter, low=1, owner=owner
        )
        weights = self._weights()
        if num_layers is None:
            num_layers = len(weights) // 2
        self.num_layers = check_int("num_layers", num_layers, low=1, owner=owner)
        if len(weights) != 2 * self.num_layers:
            raise ValueError(
                f"MAML: num_layers={num_layers} needs model.get_weights() to return "
                f"{2 * self.num_layers} tensors (a weight and a bias per layer), but it returns "
                f"{len(weights)}; pass num_layers={len(weights) // 2} or fix the model"
            )
        registered = {id(p) for p in self.model.parameters()}
        loose = sum(id(w) not in registered for w in weights)
        if loose:
            warnings.warn(
                f"MAML: {loose} of the {len(weights)} tensors {type(self.model).__name__}"
                f".get_weights() returns are not parameters registered in the model (a plain "
                f"list, say): MAML trains them, but save(), restore(), get_weights() and "
                f"checkpoints go through the state_dict and will not hold them; keep them in an "
                f"nn.ParameterList",
                UserWarning,
                stacklevel=2,
            )
        task_lr = check_float("task_learning_rate", task_learning_rate, low=0, owner=owner)
        self.meta_learning_rate = check_float(
            "meta_learning_rate", meta_learning_rate, low=0, low_open=True, owner=owner
        )
        self.total_epochs = check_int("total_epochs", total_epochs, low=1, owner=owner)
        self.min_learning_rate = check_float(
            "min_learning_rate", min_learning_rate, low=0, owner=owner
        )
        self.learning_rate_scheduler = check_bool(
            "learning_rate_scheduler", learning_rate_scheduler, owner=owner
        )
        self.second_order = check_bool("second_order", second_order, owner=owner)
        self.use_multi_step_loss_optimization = check_bool(
            "use_multi_step_loss_optimization", use_multi_step_loss_optimization, owner=owner
        )
        self.multi_step_loss_num_epochs = check_int(
            "multi_step_loss_num_epochs", multi_step_loss_num_epochs, low=1, owner=owner
        )
        self.first_order_to_second_order_epoch = check_int(
            "first_order_to_second_order_epoch",
            first_order_to_second_order_epoch,
            low=-1,
            owner=owner,
        )
        self.max_grad_norm = (
            None
            if max_grad_norm is None
            else check_float("max_grad_norm", max_grad_norm, low=0, low_open=True, owner=owner)
        )
        learnable = check_bool("learnable_learning_rates", learnable_learning_rates, owner=owner)
        self.inner_lr_model = InnerLearningRates(
            self.num_updates_per_iter, self.num_layers, task_lr, learnable
        ).to(self.device)
        self.optimizer = torch.optim.Adam(
            [*weights, self.learning_rates], lr=self.meta_learning_rate
        )

    @property
    def learning_rates(self) -> nn.Parameter:
        """The inner learning rates, ``(num_updates_per_iter, num_layers)``."""
        return self.inner_lr_model.rates

    def _weights(self) -> list[torch.Tensor]:
        # getattr: mypy types the attributes of an nn.Module it does not know as tensors
        weights = getattr(self.model, "get_weights")()  # noqa: B009
        if not isinstance(weights, list | tuple) or not all(
            isinstance(w, torch.Tensor) for w in weights
        ):
            raise TypeError(
                f"MAML needs {type(self.model).__name__}.get_weights() to return its live "
                f"parameters as a list [w_0, b_0, w_1, b_1, ...], got {type(weights).__name__}; "
                f"override get_weights in the model (parl.Model's returns numpy copies)"
            )
        if not weights or len(weights) % 2:
            raise ValueError(
                f"MAML needs a weight and a bias per layer from "
                f"{type(self.model).__name__}.get_weights(), got {len(weights)} tensors"
            )
        if not all(w.requires_grad for w in weights):
            raise ValueError(
                f"MAML: {type(self.model).__name__}.get_weights() returned tensors that do not "
                f"require grad; return the nn.Parameters themselves, not detached copies"
            )
        return list(weights)

    # -- the inner loop ------------------------------------------------------------------------
    def uses_second_order(self, current_epoch: int) -> bool:
        """Whether the meta-gradient goes through the inner gradients at ``current_epoch``.

        Args:
            current_epoch: the current epoch, from 0.
        """
        return self.second_order and current_epoch > self.first_order_to_second_order_epoch

    def inner_step(
        self,
        loss: torch.Tensor,
        weights: Sequence[torch.Tensor],
        step: int,
        create_graph: bool,
    ) -> list[torch.Tensor]:
        """One SGD step of the inner loop: ``w - alpha[step, layer] * grad(loss, w)``.

        Args:
            loss: the support loss, a scalar computed with ``weights``.
            weights: the current fast weights, a weight and a bias per layer.
            step: which inner step this is (selects the row of ``learning_rates``).
            create_graph: keep the graph of the gradient, for a second-order meta-gradient.
        """
        grads = torch.autograd.grad(loss, weights, create_graph=create_graph, allow_unused=True)
        rates = self.learning_rates[step]
        # weight i belongs to layer i // 2; an unused weight (no gradient) stays as it is
        return [
            w if g is None else w - rates[i // 2] * g
            for i, (w, g) in enumerate(zip(weights, grads, strict=True))
        ]

    def _loss(
        self, x: torch.Tensor, y: torch.Tensor, weights: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        return F.mse_loss(self.model(x, weights), y)

    def adapt(
        self, x_support: torch.Tensor, y_support: torch.Tensor, second_order: bool = False
    ) -> list[torch.Tensor]:
        """The weights adapted to one task by ``num_updates_per_iter`` steps on its support set.

        Args:
            x_support: the task's support inputs, ``(S, in_dim)``.
            y_support: the task's support targets, ``(S, out_dim)``.
            second_order: keep the graph of the inner gradients.
        """
        weights = self._weights()
        for step in range(self.num_updates_per_iter):
            loss = self._loss(x_support, y_support, weights)
            weights = self.inner_step(loss, weights, step, second_order)
        return weights

    def predict(
        self, x_support: torch.Tensor, y_support: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """The adapted model's outputs for one task's query inputs, ``(Q, out_dim)``.

        Args:
            x_support: the task's support inputs, ``(S, in_dim)``.
            y_support: the task's support targets, ``(S, out_dim)``.
            x_query: the inputs to predict, ``(Q, in_dim)``.
        """
        weights = self.adapt(x_support.to(self.device), y_support.to(self.device))
        with torch.no_grad():
            return self.model(x_query.to(self.device), weights)

    # -- the outer loop ------------------------------------------------------------------------
    def _batch(self, data_batch: Batch) -> list[torch.Tensor]:
        if not isinstance(data_batch, Sequence) or len(data_batch) != 4:
            raise TypeError(
                "MAML: data_batch must be (x_support, y_support, x_query, y_query), four "
                f"tensors of shape (tasks, points, dim), got {type(data_batch).__name__}"
                + (f" of length {len(data_batch)}" if isinstance(data_batch, Sequence) else "")
            )
        names = ("x_support", "y_support", "x_query", "y_query")
        for name, part in zip(names, data_batch, strict=True):
            if not isinstance(part, torch.Tensor) or part.dim() != 3:
                shape = tuple(part.shape) if isinstance(part, torch.Tensor) else type(part).__name__
                raise ValueError(
                    f"MAML: {name} must be a tensor of shape (tasks, points, dim), got {shape}"
                )
        tasks = {part.shape[0] for part in data_batch}
        if (
            len(tasks) != 1
            or data_batch[0].shape[1] != data_batch[1].shape[1]
            or (data_batch[2].shape[1] != data_batch[3].shape[1])
        ):
            raise ValueError(
                "MAML: data_batch's tensors disagree on the number of tasks or of points: "
                f"shapes {[tuple(p.shape) for p in data_batch]}"
            )
        return [part.to(self.device) for part in data_batch]

    def meta_loss(self, data_batch: Batch, current_epoch: int) -> torch.Tensor:
        """The mean over the batch's tasks of the (multi-step) query loss after adaptation.

        Args:
            data_batch: ``(x_support, y_support, x_query, y_query)``, each ``(tasks, points,
                dim)``.
            current_epoch: the current epoch, from 0 (it sets the loss weights and the
                derivative order).
        """
        check_int("current_epoch", current_epoch, low=0, owner="MAML")
        x_support_set, y_support_set, x_query_set, y_query_set = self._batch(data_batch)
        second_order = self.uses_second_order(current_epoch)
        multi_step = (
            self.use_multi_step_loss_optimization
            and current_epoch < self.multi_step_loss_num_epochs
        )
        step_weights = torch.from_numpy(
            multi_step_loss_weights(
                self.num_updates_per_iter, current_epoch, self.multi_step_loss_num_epochs
            )
        ).to(self.device)
        last = self.num_updates_per_iter - 1
        task_losses = []
        for x_support, y_support, x_query, y_query in zip(
            x_support_set, y_support_set, x_query_set, y_query_set, strict=True
        ):
            weights = self._weights()
            task_loss = torch.zeros((), device=self.device)
            for step in range(self.num_updates_per_iter):
                support_loss = self._loss(x_support, y_support, weights)
                weights = self.inner_step(support_loss, weights, step, second_order)
                if multi_step:
                    task_loss = task_loss + step_weights[step] * self._loss(
                        x_query, y_query, weights
                    )
                elif step == last:
                    task_loss = self._loss(x_query, y_query, weights)
            task_losses.append(task_loss)
        return torch.stack(task_losses).mean()

    def set_epoch(self, current_epoch: int) -> float:
        """Set the outer learning rate for ``current_epoch`` and return it.

        Args:
            current_epoch: the current epoch, from 0.
        """
        lr = self.meta_learning_rate
        if self.learning_rate_scheduler:
            lr = cosine_annealing_lr(
                current_epoch, self.total_epochs, self.meta_learning_rate, self.min_learning_rate
            )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def train_one_iter(self, data_batch: Batch, current_epoch: int) -> float:
        """One meta-update from a batch of tasks; returns the meta-loss before it.

        Args:
            data_batch: ``(x_support, y_support, x_query, y_query)``, each ``(tasks, points,
                dim)``.
            current_epoch: the current epoch, from 0.
        """
        self.set_epoch(current_epoch)
        loss = self.meta_loss(data_batch, current_epoch)
        self.optimizer.zero_grad()
        loss.backward()
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._weights(), self.max_grad_norm)
        if self.learning_rates.grad is not None:
            self.learning_rates.grad.clamp_(-LR_GRAD_CLIP, LR_GRAD_CLIP)
        self.optimizer.step()
        return float(loss.item())

    def evaluate_one_iter(self, data_batch: Batch) -> float:
        """The mean query loss after adaptation over a batch of tasks, without learning.

        Args:
            data_batch: ``(x_support, y_support, x_query, y_query)``, each ``(tasks, points,
                dim)``.
        """
        losses = []
        for x_support, y_support, x_query, y_query in zip(*self._batch(data_batch), strict=True):
            weights = self.adapt(x_support, y_support)
            with torch.no_grad():
                losses.append(self._loss(x_query, y_query, weights).item())
        return float(sum(losses) / len(losses))

    def learn(self, data_batch: Batch, current_epoch: int) -> float:
        """``train_one_iter``, under the name other algorithms use.

        Args:
            data_batch: ``(x_support, y_support, x_query, y_query)``, each ``(tasks, points,
                dim)``.
            current_epoch: the current epoch, from 0.
        """
        return self.train_one_iter(data_batch, current_epoch)
