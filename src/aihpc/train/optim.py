"""What a trial's hyperparameters set in training: the optimizer, the learning-rate schedule,
dropout."""

from __future__ import annotations

import math

import torch

from aihpc.records.trial import Hyperparameters


def make_optimizer(model: torch.nn.Module, hp: Hyperparameters) -> torch.optim.Optimizer:
    """SGD with momentum, or AdamW (fused into one kernel per step on a GPU)."""
    if hp.optimizer == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay
        )
    cuda = any(p.is_cuda for p in model.parameters())
    return torch.optim.AdamW(
        model.parameters(), lr=hp.lr, weight_decay=hp.weight_decay, fused=cuda or None
    )


def learning_rate(hp: Hyperparameters, position: float) -> float:
    """The learning rate at ``position`` along a schedule (0 at its start, 1 at its end: a
    trial's own epochs, or its lineage's time, :meth:`aihpc.records.messages.EpochTask.positions`).

    cosine: lr/2 · (1 + cos(π · position)); step: lr, ÷10 at 50 % and again at
    75 %; over the first ``warmup`` share of the schedule it rises linearly from
    0 to that (a lineage warms up once, at its root's start).
    """
    frac = min(max(position, 0.0), 1.0)
    if frac < hp.warmup:
        return _scheduled(hp, hp.warmup) * frac / hp.warmup
    return _scheduled(hp, frac)


def step_position(start: float, end: float, step: int, steps: int) -> float:
    """The schedule's position at step ``step`` of an epoch of ``steps`` from ``start`` to
    ``end``: linear between them."""
    return start + (end - start) * step / steps


def _scheduled(hp: Hyperparameters, frac: float) -> float:
    if hp.schedule == "cosine":
        return hp.lr * 0.5 * (1.0 + math.cos(math.pi * frac))
    return hp.lr * (0.1 ** ((frac >= 0.5) + (frac >= 0.75)))


def set_lr(optimizer: torch.optim.Optimizer, hp: Hyperparameters, position: float) -> None:
    lr = learning_rate(hp, position)
    for group in optimizer.param_groups:
        group["lr"] = lr


def set_dropout(model: torch.nn.Module, p: float) -> None:
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = p
