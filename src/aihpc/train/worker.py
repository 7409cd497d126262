"""The function every worker runs: one epoch of one trial, alone or data-parallel.

The entry point has its own module so that the trainer (one process's epoch)
and :mod:`aihpc.train.ranks` (several processes' epoch, which calls the
trainer in each) never import each other.
"""

from __future__ import annotations

import time
import traceback

import torch

from aihpc.machine.devices import worker_name
from aihpc.records.messages import EpochResult, EpochTask
from aihpc.tasks import Task
from aihpc.train.trainer import train_epoch


def run_epoch(kind: Task, task: EpochTask) -> EpochResult:
    """Train ``task``, an epoch of a trial of ``kind`` (the run's task, which the master gives
    with the work: ``functools.partial(run_epoch, kind)``); never raises for a failing trial.

    With ``task.procs > 1`` the epoch trains data-parallel in that many
    processes (see :mod:`aihpc.train.ranks`).
    """
    t_start = time.time()
    worker = worker_name()
    try:
        if task.procs > 1:
            from aihpc.train.ranks import run_epoch_parallel

            return run_epoch_parallel(kind, task, worker, t_start)
        return train_epoch(kind, task, worker, t_start)
    except torch.cuda.OutOfMemoryError as exc:
        reason = f"out of memory: {str(exc).splitlines()[0]}"
    except Exception as exc:  # a trial's failure is data for the master, not a crash
        reason = f"{type(exc).__name__}: {exc}"
    return EpochResult.failed(task, worker, t_start, reason, traceback.format_exc())
