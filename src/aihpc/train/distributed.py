"""Data-parallel trials: one epoch trained by several processes with ``torch.distributed``.

A worker whose task asks for ``procs > 1`` launches that many processes the
way ``torchrun`` does (``MASTER_ADDR``/``MASTER_PORT``, ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE`` in the environment), each running
``python -m aihpc.train.distributed TASK_DIR``.  They join one process group
— NCCL on GPUs, gloo on CPU — wrap the model in ``DistributedDataParallel``
and split every global batch between them (:func:`aihpc.train.trainer.train_epoch`).
Rank 0 writes the epoch's weights file and its result, which the worker
returns as if it had trained alone.  Operations are counted once, from the global samples
processed, never once per rank.

The task and the result travel as JSON (no pickle); the weights are
already files, which every rank reads itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from aihpc.train.task import DataRef, EpochResult, EpochTask, Morph, WeightsRef
from aihpc.train.trainer import Group, worker_index, train_epoch


class ProcessGroup(Group):
    """This rank's view of the ``torch.distributed`` group (collectives on ``device``)."""

    def __init__(self, device: torch.device) -> None:
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.device = device

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def any(self, flag: bool) -> bool:
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def sum(self, *values: float) -> tuple[float, ...]:
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return tuple(t.tolist())


def run_epoch_parallel(task: EpochTask, worker: str, t_start: float) -> EpochResult:
    """Train ``task`` in ``task.procs`` processes on this node; rank 0's result is the epoch's."""
    with tempfile.TemporaryDirectory(prefix="aihpc-ddp-") as tmp:
        folder = Path(tmp)
        _write_task(folder, task, worker, t_start)
        port = _free_port()
        procs = []
        for rank in range(task.procs):
            env = {
                **os.environ,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(task.procs),
                # local workers share the node's GPUs: worker i's ranks take GPUs i*procs ...
                "AIHPC_GPU_OFFSET": str(worker_index() * task.procs),
            }
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "aihpc.train.distributed", str(folder)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        errors = [p.communicate()[1] for p in procs]
        failed = [(rank, p.returncode, err) for rank, (p, err) in enumerate(zip(procs, errors)) if p.returncode]
        if failed:
            rank, code, err = failed[0]
            last = (err.strip().splitlines() or [f"exit code {code}"])[-1]
            return EpochResult(task.trial_id, task.epoch, "failed", worker, t_start, time.time(),
                               reason=f"rank {rank} of {task.procs} failed: {last}", traceback=err)  # fmt: skip
        return _read_result(folder)


def _rank_main(folder: Path) -> None:
    task, worker, t_start = _read_task(folder)
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if task.device != "cpu" and torch.cuda.is_available():
        offset = int(os.environ.get("AIHPC_GPU_OFFSET", "0"))
        device = torch.device("cuda", (offset + local) % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend=backend)
    try:
        result = train_epoch(task, worker, t_start, ProcessGroup(device), device)
        if rank == 0:
            _write_result(folder, result)
        # rank 0 alone writes the weights and the result: the others wait, since a
        # group torn down while a peer still works can abort it ("terminate called")
        dist.barrier()
    finally:
        dist.destroy_process_group()


# -- the task and the result on disk, as JSON (the weights are already files) -------------
def _write_task(folder: Path, task: EpochTask, worker: str, t_start: float) -> None:
    meta = {"task": dataclasses.asdict(task), "worker": worker, "t_start": t_start}
    (folder / "task.json").write_text(json.dumps(meta))


def _read_task(folder: Path) -> tuple[EpochTask, str, float]:
    meta = json.loads((folder / "task.json").read_text())
    fields: dict[str, Any] = meta["task"]
    data = fields["data"]
    fields["data"] = DataRef.from_dict(data)
    fields["start"] = _ref(fields["start"])
    if fields["morph"] is not None:
        fields["morph"] = Morph(**{**fields["morph"], "parent_weights": _ref(fields["morph"]["parent_weights"])})
    return EpochTask(**fields), meta["worker"], meta["t_start"]


def _write_result(folder: Path, result: EpochResult) -> None:
    (folder / "result.json").write_text(json.dumps(dataclasses.asdict(result)))


def _read_result(folder: Path) -> EpochResult:
    fields = json.loads((folder / "result.json").read_text())
    return EpochResult(**{**fields, "weights": _ref(fields["weights"])})


def _ref(fields: dict[str, str] | None) -> WeightsRef | None:
    return WeightsRef(**fields) if fields is not None else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    _rank_main(Path(sys.argv[1]))
