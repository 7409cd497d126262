"""Tasks (data sets as in-memory tensors) and a short fixed-budget training loop.

A :class:`Task` holds normalised train/val tensors.  :func:`from_dataset`
loads any :mod:`aihpc.tasks.image.data` set by name, keeping at most ``max_train``
training samples (class-stratified), so a large data set costs no more than
a small one.  :func:`relabel`, :func:`noisy`, :func:`fewer` and :func:`label_noise`
derive variants of a task (:mod:`aihpc.recommend.families` builds the
calibration and validation tasks with them).

:func:`train_briefly` is a plain loop, not :mod:`aihpc.train.trainer`
(which trains whole epochs of a NAS trial with phase timing, weight files
and counting): here every candidate gets the same number of optimizer steps
on the same seeded minibatches, and only the final validation accuracy
matters.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.nn import functional as F

from aihpc.recommend.complexity import check_task, stratified_sample

if TYPE_CHECKING:  # pragma: no cover
    from aihpc.tasks.image.data.base import SplitDataset

#: Training samples a task keeps at most (class-stratified).
MAX_TRAIN = 2000
#: The fixed budget of :func:`train_briefly`: steps, batch size, Adam learning rate.
STEPS, BATCH, LR = 100, 64, 2e-3


@dataclass(frozen=True)
class Task:
    """A classification task: normalised tensors, classes 0..num_classes-1."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    num_classes: int
    num_samples: int  # training samples of the whole data set (before any cap)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(int(s) for s in self.x_train.shape[1:])  # type: ignore[return-value]


def _sample(split: SplitDataset, limit: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    labels = np.asarray(split.labels, dtype=np.int64)
    pos = stratified_sample(labels, limit, seed)
    x = torch.from_numpy(np.ascontiguousarray(split.raw(pos), dtype=np.float32))
    return split.normalizer(x), torch.from_numpy(labels[pos])


def from_dataset(
    name: str,
    path: str | Path | None = None,
    *,
    seed: int = 0,
    max_train: int = MAX_TRAIN,
    **options: Any,
) -> Task:
    """Load data set ``name`` through :func:`aihpc.tasks.image.data.load_dataset`; DataError if
    unusable."""
    from aihpc.tasks.image.data import load_dataset

    data = load_dataset(name, path=path, seed=seed, **options)
    check_task(np.asarray(data.train.labels), f"data set {name!r}")
    x_tr, y_tr = _sample(data.train, max_train, seed)
    x_va, y_va = _sample(data.val, max_train, seed)
    return Task(name, x_tr, y_tr, x_va, y_va, int(data.num_classes), int(len(data.train)))


def relabel(task: Task, keep: list[int], name: str) -> Task:
    lut = torch.full((task.num_classes,), -1, dtype=torch.int64)
    lut[torch.tensor(keep)] = torch.arange(len(keep))
    mtr, mva = lut[task.y_train] >= 0, lut[task.y_val] >= 0
    return Task(
        name,
        task.x_train[mtr],
        lut[task.y_train[mtr]],
        task.x_val[mva],
        lut[task.y_val[mva]],
        len(keep),
        int(mtr.sum()),
    )


def noisy(task: Task, sigma: float, seed: int, name: str) -> Task:
    g = torch.Generator().manual_seed(seed)
    return Task(
        name,
        task.x_train + sigma * torch.randn(task.x_train.shape, generator=g),
        task.y_train,
        task.x_val + sigma * torch.randn(task.x_val.shape, generator=g),
        task.y_val,
        task.num_classes,
        task.num_samples,
    )


def fewer(task: Task, fraction: float, seed: int, name: str) -> Task:
    pos = stratified_sample(task.y_train.numpy(), int(len(task.y_train) * fraction), seed)
    idx = torch.from_numpy(pos)
    return Task(
        name,
        task.x_train[idx],
        task.y_train[idx],
        task.x_val,
        task.y_val,
        task.num_classes,
        len(pos),
    )


def label_noise(task: Task, rate: float, seed: int, name: str) -> Task:
    g = torch.Generator().manual_seed(seed)
    flip = torch.rand(len(task.y_train), generator=g) < rate
    y = torch.where(
        flip, torch.randint(task.num_classes, task.y_train.shape, generator=g), task.y_train
    )
    return Task(name, task.x_train, y, task.x_val, task.y_val, task.num_classes, task.num_samples)


def train_briefly(
    model: torch.nn.Module,
    task: Task,
    seed: int,
    steps: int = STEPS,
    batch: int = BATCH,
    lr: float = LR,
) -> float:
    """Adam for ``steps`` steps on seeded minibatches; return the validation accuracy."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n = len(task.y_train)
    model.train()
    order = torch.randperm(n, generator=g)
    at = 0
    for _ in range(steps):
        if at + batch > n:
            order, at = torch.randperm(n, generator=g), 0
        idx = order[at : at + batch]
        at += batch
        opt.zero_grad(set_to_none=True)
        torch.autograd.backward(F.cross_entropy(model(task.x_train[idx]), task.y_train[idx]))
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = torch.cat(
            [model(task.x_val[i : i + 512]).argmax(1) for i in range(0, len(task.y_val), 512)]
        )
    return float((pred == task.y_val).double().mean())
