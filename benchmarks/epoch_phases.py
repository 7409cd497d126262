"""Benchmark: per-phase seconds of one trial-epoch of the default workload, repeated.

Trains the seed network of the default synthetic workload for one epoch
(``run_epoch``, the worker's own entry point) ``--repeats`` times and prints
the median and the range of each phase (data, forward, backward, optimizer,
eval, compile, other) and of the whole epoch.  Used to compare the trainer's
phase timing before and after a change, side by side on one machine.

    python benchmarks/epoch_phases.py [--device cpu] [--repeats 5] [--batch 64] [--threads 1] [--samples N]
        [--width W]

The seed network is the device's (on the CPU, base width 8), or of base width ``--width``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from bench_main import script

from aihpc.records.messages import DataRef, EpochTask
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of
from aihpc.tasks.image.data import load_dataset
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.image.spec import ArchSpec
from aihpc.tasks.image.task import DEFAULT_SYNTHETIC, seed_network
from aihpc.train.worker import run_epoch


def epoch_task(device: str, batch: int, threads: int | None, weights_dir: str, trial: int,
               samples: int | None = None, width: int | None = None) -> EpochTask:
    options = {**DEFAULT_SYNTHETIC[device], **({"num_samples": samples} if samples else {})}
    data = load_dataset("synthetic", seed=0, **options)
    spec = seed_spec(data.input_shape, data.num_classes, **seed_network(data.input_shape, device, width))
    hp = {"lr": 0.05, "batch_size": batch, "weight_decay": 1e-4, "momentum": 0.9, "dropout": 0.0,
          "optimizer": "sgd", "schedule": "cosine"}  # fmt: skip
    return EpochTask(trial_id=trial, epoch=1, epochs=2, arch=spec.to_dict(), hparams=Hyperparameters.from_dict(hp),
                     data=DataRef("synthetic", options=tuple(sorted(options.items()))),
                     deadline=time.time() + 3600, seed=trial, weights_dir=weights_dir, device=device,
                     threads=threads)  # fmt: skip


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--samples", type=int, help="data set size (default: the device's default workload's)")
    ap.add_argument("--width", type=int, help="the seed network's base width (default: the device's seed's)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        image = task_of("image")
        tasks = [epoch_task(args.device, args.batch, args.threads, tmp, i, args.samples, args.width)
                 for i in range(args.repeats + 1)]  # fmt: skip
        run_epoch(image, tasks[0])  # warm-up: data, counts, caches
        results = [run_epoch(image, task) for task in tasks[1:]]
    bad = [r.reason for r in results if r.status != "ok"]
    if bad:
        raise SystemExit(f"an epoch failed: {bad[0]}")
    phases = sorted({p for r in results for p in r.phase_seconds})
    print(f"{args.repeats} epochs, {results[0].metrics['train_samples']} training samples, batch {args.batch}, "
          f"device {results[0].device}, a seed network of {ArchSpec.from_dict(tasks[0].arch).num_params():,} parameters")
    for name in [*phases, "epoch"]:
        values = [r.t_end - r.t_start if name == "epoch" else r.phase_seconds.get(name, 0.0) for r in results]
        print(f"{name:10s} median {statistics.median(values):8.3f} s   range {min(values):8.3f} .. {max(values):8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
