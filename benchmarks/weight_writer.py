"""Benchmark: what writing each epoch's weight file costs the epoch, before and after the background writer (issue 18).

1. The same trial-epoch (the CPU default workload's seed network, its first
   epoch) trained ``--repeats`` times each way, alternating: with the
   weights written the old way (copied, serialised, hashed and written
   before validation, the epoch waiting for it) and with
   :class:`aihpc.train.weights.SnapshotWriter` (copied at once, written by a
   background thread while validation runs).  Prints the epoch's wall time
   and its ``other`` phase, median and spread.
2. The GPU default's seed state (ResNet-50 at 3x128x128, 100 classes, with
   its SGD momentum: what a GPU worker writes every epoch): the time to
   write it synchronously, against the time ``start`` keeps the caller
   (on the CPU a copy of the tensors; on a GPU the copies are only queued).

    python benchmarks/weight_writer.py [--repeats 3] [--samples 12000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path

import torch
from bench_main import script


def sync_snapshot(task, setup, group):
    """The write as it was before the background writer: done before validation, the epoch waiting."""
    from aihpc.train.weights import file_name, host_copy, save

    done: Future = Future()
    if group.rank != 0:
        done.set_result(None)
        return done
    name = file_name(task.trial_id, task.epoch, task.attempt)
    done.set_result(save(Path(task.weights_dir), name, host_copy(setup.model.state_dict()),
                         host_copy(setup.optimizer.state_dict())))  # fmt: skip
    return done


def epoch_task(weights_dir: str, samples: int):
    from aihpc.records.messages import DataRef, EpochTask
    from aihpc.records.trial import Hyperparameters
    from aihpc.tasks.image.seeds import seed_spec
    from aihpc.tasks.image.task import DEFAULT_SYNTHETIC

    options = {**DEFAULT_SYNTHETIC["cpu"], "num_samples": samples}
    spec = seed_spec((options["channels"], options["image_size"], options["image_size"]), options["num_classes"])
    hp = {"lr": 0.05, "batch_size": 64, "weight_decay": 5e-5, "momentum": 0.9, "dropout": 0.0,
          "optimizer": "sgd", "schedule": "cosine"}  # fmt: skip
    return EpochTask(trial_id=0, epoch=1, epochs=4, arch=spec.to_dict(), hparams=Hyperparameters.from_dict(hp),
                     data=DataRef("synthetic", options=tuple(sorted(options.items()))), deadline=time.time() + 3600,
                     seed=0, weights_dir=weights_dir, threads=torch.get_num_threads(), device="cpu")  # fmt: skip


def epochs(repeats: int, samples: int) -> None:
    from aihpc.tasks import task_of
    from aihpc.train import trainer
    from aihpc.train.worker import run_epoch

    background = trainer.snapshot
    times: dict[str, list[tuple[float, float]]] = {"synchronous write": [], "background writer": []}
    with tempfile.TemporaryDirectory() as tmp:
        task = epoch_task(tmp, samples)
        image = task_of("image")
        run_epoch(image, task)  # warm-up: staging, counting, first allocations
        try:
            for _ in range(repeats):
                for label, fn in (("synchronous write", sync_snapshot), ("background writer", background)):
                    trainer.snapshot = fn
                    r = run_epoch(image, task)
                    assert r.status == "ok", r.reason
                    times[label].append((r.t_end - r.t_start, r.phase_seconds["other"]))
        finally:
            trainer.snapshot = background
        size = sum(f.stat().st_size for f in Path(tmp).glob("*.pt")) / len(list(Path(tmp).glob("*.pt")))
    print(f"epoch             CPU default seed, {samples} samples, weight file {size / 2**20:.2f} MiB, "
          f"{torch.get_num_threads()} threads, {repeats} each, alternating")
    for label, values in times.items():
        wall, other = zip(*values)
        print(f"  {label:<18} epoch {statistics.median(wall):.3f} s (min {min(wall):.3f}, max {max(wall):.3f}), "
              f"other phase {statistics.median(other):.4f} s")


def gpu_default_state() -> None:
    from aihpc.tasks.image.build import SpecNet
    from aihpc.tasks.image.seeds import seed_spec
    from aihpc.train.weights import SnapshotWriter, host_copy, save

    model = SpecNet(seed_spec((3, 128, 128), 100))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()  # momentum buffers, as after an epoch
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        save(Path(tmp), "sync.pt", host_copy(model.state_dict()), host_copy(optimizer.state_dict()))
        sync = time.perf_counter() - t0
        size = (Path(tmp) / "sync.pt").stat().st_size
        writer = SnapshotWriter()
        t0 = time.perf_counter()
        future = writer.start(Path(tmp), "bg.pt", model.state_dict(), optimizer.state_dict())
        kept = time.perf_counter() - t0
        future.result()
        total = time.perf_counter() - t0
    print(f"GPU default state ResNet-50 seed + momentum, {size / 2**20:.0f} MiB: written synchronously in {sync:.2f} s; "
          f"the background writer kept the caller {kept:.3f} s (host copy) and finished in {total:.2f} s")


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--samples", type=int, default=12000, help="data set size (the CPU default: 12,000)")
    args = ap.parse_args(argv)
    epochs(args.repeats, args.samples)
    gpu_default_state()
    return 0


if __name__ == "__main__":
    sys.exit(main())
