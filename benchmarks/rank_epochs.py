"""Consecutive data-parallel epochs of one trial (2 processes, gloo on CPU): wall time, and the setup ("other") phase.

    PYTHONPATH=src python benchmarks/rank_epochs.py [digits|synthetic] [--epochs 3] [--procs 2]

Prints one JSON line per epoch.  The first epoch starts the worker's rank
pool (two processes importing torch) and stages the data set in each; the
following ones run in the same processes, from the kept model, so their
``other`` phase (model build, weight load, data) is near zero.  The weight
digests are those the per-epoch processes of aihpc before the rank pool
gave for the same task (measured: identical for 3 epochs of both sets).
``--procs 1`` trains the same epochs in this process, without ranks: the
baseline, and the script's smallest setting.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

from bench_main import script

from aihpc.records.messages import DataRef, EpochTask
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of
from aihpc.tasks.image.seeds import seed_spec
from aihpc.train.ranks import close_pool
from aihpc.train.worker import run_epoch

HP = {"lr": 0.05, "batch_size": 100, "weight_decay": 1e-4, "momentum": 0.9, "dropout": 0.0,
      "optimizer": "sgd", "schedule": "cosine"}  # fmt: skip
# the CPU default workload of aihpc run (tasks.image.DEFAULT_SYNTHETIC["cpu"])
SYNTHETIC = {"num_samples": 12000, "num_classes": 50, "channels": 3, "image_size": 16, "difficulty": 0.6}


@script
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", choices=("digits", "synthetic"), default="digits")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--procs", type=int, default=2, help="processes training the trial (default 2)")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.procs < 1:
        parser.error(f"--epochs and --procs must be at least 1, got {args.epochs} and {args.procs}")
    if args.data == "digits":
        data, spec = DataRef("digits"), seed_spec((1, 8, 8), 10)
    else:
        data, spec = DataRef("synthetic", options=tuple(sorted(SYNTHETIC.items()))), seed_spec((3, 16, 16), 50)
    with tempfile.TemporaryDirectory(prefix="aihpc-rank-epochs-") as weights_dir:
        try:
            return epochs(spec, data, args.epochs, args.procs, weights_dir)
        finally:
            close_pool()  # the rank pool's processes end with the benchmark


def epochs(spec, data: DataRef, count: int, procs: int, weights_dir: str) -> int:
    """Epochs 1 .. ``count`` of the trial, each from the last's weights: one JSON line each."""
    start = None
    for epoch in range(1, count + 1):
        task = EpochTask(trial_id=0, epoch=epoch, epochs=count, arch=spec.to_dict(), hparams=Hyperparameters.from_dict(HP), data=data,
                         deadline=time.time() + 3600, seed=3, weights_dir=weights_dir, start=start, device="cpu",
                         threads=1, procs=procs)  # fmt: skip
        t0 = time.perf_counter()
        result = run_epoch(task_of("image"), task)
        start = result.weights
        print(json.dumps({"epoch": epoch, "status": result.status, "wall_seconds": round(time.perf_counter() - t0, 2),
                          "other_seconds": round(result.phase_seconds.get("other", 0.0), 3),
                          "digest": result.weights.digest[:12] if result.weights else None,
                          "val_loss": result.metrics.get("val_loss")}), flush=True)  # fmt: skip
        if result.status != "ok":
            print(f"rank_epochs: epoch {epoch} {result.status}: {result.reason}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
