"""One trial-epoch in this process, as a worker runs it, with its host memory: run by
tests/train/test_memory_estimate.py, one process per case (the resident memory's high-water mark
is the process's).

``python memory_case.py CASE_JSON`` prints one JSON line: the resident memory before the epoch
(the trainer imported and the data staged, as the master measures a worker before its first
trial), its peak over the epoch (the kernel's high-water mark, ``VmHWM``), the epoch's status and
samples, the weights it wrote, and :func:`aihpc.train.memory.trial_memory`'s estimate.
"""

from __future__ import annotations

import json
import sys
import time

import psutil
import torch

from aihpc.records.messages import DataRef, EpochTask, WeightsRef
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of
from aihpc.train.memory import trial_memory
from aihpc.train.staging import stage
from aihpc.train.worker import run_epoch


def high_water_mark() -> int:
    """The most resident memory this process has held, in bytes (``VmHWM``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main(case: dict) -> dict:
    task = task_of(case["task"])
    ref = DataRef(case["data"], options=tuple(sorted(case["options"].items())), task=task.name)
    arch = task.arch(case["arch"])
    hparams = Hyperparameters.from_dict(case["hparams"])
    start = WeightsRef(**case["start"]) if case.get("start") else None
    torch.set_num_threads(1)
    stage(task, ref, "cpu")
    held = psutil.Process().memory_info().rss
    epoch = EpochTask(
        trial_id=0,
        epoch=2 if start else 1,
        epochs=3,
        arch=arch.to_dict(),
        hparams=hparams,
        data=ref,
        deadline=time.time() + 600,
        seed=1,
        weights_dir=case["weights_dir"],
        start=start,
        device="cpu",
        threads=1,
    )
    result = run_epoch(task, epoch)
    estimate = trial_memory(task, arch, hparams, "cpu", arch.num_params() if start else None)
    return {
        "status": str(result.status),
        "reason": result.reason,
        "samples": result.metrics.get("train_samples"),
        "params": arch.num_params(),
        "held": held,
        "peak": high_water_mark(),
        "estimate": held + estimate.peak,
        "parts": estimate.to_dict(),
        "weights": result.weights.__dict__ if result.weights else None,
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
