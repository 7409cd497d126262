"""Evaluation passes: mean loss and accuracy over batches, summed across a trial's ranks."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from aihpc.train import feed
from aihpc.train.group import SINGLE, Group
from aihpc.train.timing import PhaseTimer

#: A staged batch (x, y) as the model's input and the loss's targets (the task's
#: :meth:`~aihpc.tasks.base.Task.inputs_and_targets`).
InputsAndTargets = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    batches: Iterator[feed.Batch],
    autocast: contextlib.AbstractContextManager[object],
    deadline: float,
    group: Group = SINGLE,
    *,
    timer: PhaseTimer | None = None,
    first_phase: str = "eval",
    pad_to: int | None = None,
    inputs_and_targets: InputsAndTargets | None = None,
) -> tuple[float, float, int]:
    """Mean loss, accuracy and samples seen on ``batches`` (:mod:`aihpc.train.feed`), all ranks.

    Stops at the deadline.  With a ``timer`` each batch is timed as
    ``eval`` (the first as ``first_phase``).  ``pad_to`` (a GPU's or a
    compiled model's batch size on this rank): every batch is copied into a
    new one of that size, the last padded with zeros, so that every call has
    one shape and one layout (strides); only real samples are scored.
    ``inputs_and_targets`` turns a staged batch into the model's input and the
    targets (the task's, :meth:`aihpc.tasks.base.Task.inputs_and_targets`;
    default: images and labels as staged).  Loss and accuracy are means over
    targets (a language model's tokens), the count returned is of samples.
    """
    model.eval()
    sums = None  # loss, correct predictions (on the batches' device)
    seen = 0
    for k in itertools.count():
        if group.any(time.time() >= deadline):
            break
        with timer(first_phase if k == 0 else "eval") if timer else contextlib.nullcontext():
            item = next(batches, None)
            if item is None:
                break
            xb, yb, _ = item
            if inputs_and_targets is not None:
                xb, yb = inputs_and_targets(xb, yb)
            n = yb.shape[0]
            if pad_to is not None:
                padded = xb.new_zeros((pad_to, *xb.shape[1:]))
                padded[:n] = xb
                xb = padded
            with autocast:
                logits = model(channels_last(xb))[:n]
            batch_sums = loss_sums(logits, yb)
            sums = batch_sums if sums is None else sums + batch_sums
        seen += n
    model.train()
    loss_sum, correct_sum, targets, seen_sum = group.sum(
        *(sums.tolist() if sums is not None else (0.0, 0.0, 0.0)), seen
    )
    if int(seen_sum) == 0:
        return float("nan"), 0.0, 0
    return loss_sum / targets, int(correct_sum) / targets, int(seen_sum)


def loss_sums(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(summed cross-entropy, correct predictions, targets) of a batch, float64 on its device:
    logits (..., classes) against targets (...), a class per image or per token."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    labels = targets.reshape(-1)
    loss = F.cross_entropy(flat, labels, reduction="sum")
    correct = (flat.argmax(1) == labels).sum()
    count = loss.new_full((), labels.numel(), dtype=torch.float64)  # a fill: no copy to wait for
    return torch.stack((loss.double(), correct.double(), count))


def channels_last(x: torch.Tensor) -> torch.Tensor:
    """Images in the memory layout convolutions run fastest in on GPUs (a no-op on CPU and for
    anything but a batch of images, such as a language model's tokens).  Not on a CPU: there it
    trains the seed network faster, but PyTorch's CPU backward pass of channels-last images
    crashed the process on 64x64 inputs (docs/measurements/2026-11-30-channels-last-cpu.md)."""
    return x.contiguous(memory_format=torch.channels_last) if x.is_cuda and x.dim() == 4 else x
