"""Evaluation passes: mean loss and accuracy over batches, summed across a trial's ranks."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from aihpc.train import feed
from aihpc.train.group import SINGLE, Group
from aihpc.train.timing import PhaseTimer


@torch.no_grad()
def evaluate(
    model,
    batches: Iterator[feed.Batch],
    autocast,
    deadline: float,
    group: Group = SINGLE,
    *,
    timer: PhaseTimer | None = None,
    first_phase: str = "eval",
    pad_to: int | None = None,
) -> tuple[float, float, int]:
    """Mean loss, accuracy and samples seen on ``batches`` (:mod:`aihpc.train.feed`), all ranks.

    Stops at the deadline.  With a ``timer`` each batch is timed as
    ``eval`` (the first as ``first_phase``).  ``pad_to`` (a GPU's or a
    compiled model's batch size on this rank): every batch is copied into a
    new one of that size, the last padded with zeros, so that every call has
    one shape and one layout (strides); only real samples are scored.
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
            n = yb.shape[0]
            if pad_to is not None:
                padded = xb.new_zeros((pad_to, *xb.shape[1:]))
                padded[:n] = xb
                xb = padded
            with autocast:
                logits = model(channels_last(xb))[:n]
            loss = F.cross_entropy(logits.float(), yb, reduction="sum")
            batch_sums = torch.stack((loss.double(), (logits.argmax(1) == yb).sum().double()))
            sums = batch_sums if sums is None else sums + batch_sums
        seen += n
    model.train()
    loss_sum, correct_sum, seen_sum = group.sum(
        *(sums.tolist() if sums is not None else (0.0, 0.0)), seen
    )
    correct, total = int(correct_sum), int(seen_sum)
    if total == 0:
        return float("nan"), 0.0, 0
    return loss_sum / total, correct / total, total


def channels_last(x: torch.Tensor) -> torch.Tensor:
    """Images in the memory layout convolutions run fastest in on GPUs (a no-op on CPU)."""
    return x.contiguous(memory_format=torch.channels_last) if x.is_cuda else x
