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


def learning_rate(hp: Hyperparameters, epochs: int, progress: float) -> float:
    """The learning rate at ``progress`` epochs into a trial of ``epochs``.

    cosine: lr/2 · (1 + cos(π · progress/epochs)); step: lr, ÷10 at 50 % and
    again at 75 % of the trial; over the first ``warmup`` share of the trial
    it rises linearly from 0 to that (a child starts with a fresh optimizer:
    its moments re-warm while the rate does).
    """
    frac = min(max(progress / epochs, 0.0), 1.0)
    if frac < hp.warmup:
        return _scheduled(hp, hp.warmup) * frac / hp.warmup
    return _scheduled(hp, frac)


def _scheduled(hp: Hyperparameters, frac: float) -> float:
    if hp.schedule == "cosine":
        return hp.lr * 0.5 * (1.0 + math.cos(math.pi * frac))
    return hp.lr * (0.1 ** ((frac >= 0.5) + (frac >= 0.75)))


def set_lr(
    optimizer: torch.optim.Optimizer, hp: Hyperparameters, epochs: int, progress: float
) -> None:
    lr = learning_rate(hp, epochs, progress)
    for group in optimizer.param_groups:
        group["lr"] = lr


def set_dropout(model: torch.nn.Module, p: float) -> None:
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = p
