"""Operations per sample of a trial's network, counted once per architecture and kept by the worker.

The count is a pure function of the task, the architecture, the batch size
and the dropout (:meth:`aihpc.tasks.base.Task.count_per_sample`: on a model
built on the meta device, no weights allocated or initialised), so a worker
counts each once and keeps it for the epochs that follow.  The trial's own
model is built once, where it trains (:func:`aihpc.train.trainer.build`).
"""

from __future__ import annotations

from aihpc.tasks import Arch, Task

_OPS_CACHE: dict[tuple[str, str, int, float], tuple[float, float]] = {}


def count_ops_per_sample(task: Task, spec: Arch, batch: int, dropout: float) -> tuple[float, float]:
    """Operations per sample: (training step, evaluation forward), cached per architecture.

    Counted at the trial's batch size; the training step includes the loss
    and the backward pass, the evaluation pass is the model in eval mode.
    """
    key = (task.name, spec.content_hash(), batch, dropout)
    if key not in _OPS_CACHE:
        _OPS_CACHE[key] = task.count_per_sample(spec, batch, dropout)
    return _OPS_CACHE[key]
