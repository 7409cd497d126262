"""Batches for the trainer from a staged split (:mod:`aihpc.train.staging`).

On the ``device`` tier a batch is gathered on the device from the whole
split there: the epoch's order goes to the device once, and nothing is
copied per step.  On the ``stream`` tier a ``DataLoader`` gathers each
batch from the split's mapped file in worker processes, off the training
thread, :data:`PREFETCH` batches ahead per loader worker, into pinned
memory on a GPU; the batch is then copied to the device without waiting
for it (``non_blocking``).  The loader's processes live as long as the
worker does (``persistent_workers``): each epoch only hands them a new
order.  Either way the trainer times the wait for the next batch as its
``data`` phase, so time the device spends waiting for data shows there.

Each data-parallel rank reads its share of every global batch
(``rank::world``), as the trainer splits it, and every batch comes with the
size of the global batch it is part of.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from aihpc.train.staging import StagedSplit, mapped_tensor

#: Batches each loader process prepares ahead of the one being trained.
PREFETCH = 4
#: Most loader processes per worker (each gathers whole batches; a few keep a GPU fed from the
#: page cache).
MAX_LOADERS = 8

#: (images, labels, samples in the global batch)
Batch = tuple[torch.Tensor, torch.Tensor, int]

#: (images, labels) of one batch as a loader process gathers it
Rows = tuple[torch.Tensor, torch.Tensor]

_LOADERS: dict[tuple[str, str], DataLoader[Rows]] = {}


def train_batches(
    split: StagedSplit,
    order: torch.Tensor,
    batch: int,
    steps: int,
    rank: int,
    world: int,
    device: torch.device,
) -> Iterator[Batch]:
    """The epoch's ``steps`` batches of ``batch`` samples in ``order`` (a permutation, on the
    CPU)."""
    if split.streamed:
        plan = [order[i * batch : (i + 1) * batch] for i in range(steps)]
        return _streamed(split, plan, rank, world, device)
    return _gathered(split, order.to(split.x.device), batch, steps, rank, world)


def eval_batches(
    split: StagedSplit, batch: int, rank: int, world: int, device: torch.device
) -> Iterator[Batch]:
    """The whole split in order, ``batch`` samples at a time (the last batch may be smaller)."""
    n = len(split)
    if split.streamed:
        plan = [torch.arange(i, min(i + batch, n)) for i in range(0, n, batch)]
        return _streamed(split, plan, rank, world, device)
    return _sliced(split, batch, rank, world)


def _gathered(
    split: StagedSplit, order: torch.Tensor, batch: int, steps: int, rank: int, world: int
) -> Iterator[Batch]:
    for i in range(steps):
        idx = order[i * batch : (i + 1) * batch]
        mine = idx[rank::world]
        yield split.x[mine], split.y[mine], int(idx.shape[0])


def _sliced(split: StagedSplit, batch: int, rank: int, world: int) -> Iterator[Batch]:
    for i in range(0, len(split), batch):
        xb, yb = split.x[i : i + batch], split.y[i : i + batch]
        yield xb[rank::world], yb[rank::world], int(yb.shape[0])


def _streamed(
    split: StagedSplit, plan: list[torch.Tensor], rank: int, world: int, device: torch.device
) -> Iterator[Batch]:
    loader = loader_for(split, device)
    sampler = loader.batch_sampler
    assert isinstance(sampler, _Plan)
    sampler.batches = [idx[rank::world] for idx in plan]
    for (xb, yb), idx in zip(loader, plan, strict=False):
        yield xb.to(device, non_blocking=True), yb.to(device, non_blocking=True), int(idx.shape[0])


def loader_for(split: StagedSplit, device: torch.device) -> DataLoader[Rows]:
    """The worker's ``DataLoader`` over a streamed split (made once, its processes kept)."""
    assert split.path is not None
    key = (split.path, str(device))
    if key not in _LOADERS:
        _LOADERS[key] = DataLoader(
            _Rows(split),
            # torch's stub says a batch is a list of indices; DataLoader takes any batch its
            # dataset's __getitems__ reads (index tensors), and hands its rows to collate_fn
            batch_sampler=_Plan(),  # type: ignore[arg-type]
            collate_fn=_as_is,  # type: ignore[arg-type]
            num_workers=loader_processes(),
            pin_memory=device.type == "cuda",
            prefetch_factor=PREFETCH,
            persistent_workers=True,
        )
    return _LOADERS[key]


def loader_processes() -> int:
    """Loader processes per worker: its torch threads, at least 2 and at most
    :data:`MAX_LOADERS`."""
    return max(2, min(MAX_LOADERS, torch.get_num_threads()))


class _Plan(Sampler[torch.Tensor]):
    """The batches of the current epoch (index tensors), set by the trainer before each pass."""

    def __init__(self) -> None:
        self.batches: list[torch.Tensor] = []

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class _Rows(Dataset[Rows]):
    """Rows of a streamed split's file; a whole batch is gathered by one call (``__getitems__``).

    Pickles without its mapping (loader processes started by spawn map
    the file again); a forked one inherits it.
    """

    def __init__(self, split: StagedSplit) -> None:
        self.path = str(split.path)
        self.shape = tuple(split.x.shape)
        self.dtype = split.x.dtype
        self.y = split.y
        self._x: torch.Tensor | None = split.x

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_x": None}

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: int) -> Rows:
        return self.__getitems__(torch.tensor([index]))

    def __getitems__(self, idx: torch.Tensor) -> Rows:
        if self._x is None:
            self._x = mapped_tensor(Path(self.path), self.shape, self.dtype)
        return self._x[idx], self.y[idx]


def _as_is(batch: Rows) -> Rows:
    return batch
