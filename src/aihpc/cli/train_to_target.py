"""aihpc train-to-target: MLPerf HPC's time to train on a science workload (staging timed apart).

Generates the workload's data (or reads real-format files with
``--data-dir``), then runs ``--runs`` rounds of ``--instances`` concurrent
models on Dask workers, each staging the data to node-local storage, training
until the quality target, and writing an MLPerf log that is checked by
MLPerf's compliance checker.  Prints time to train (olympic mean), staging
time and throughput; writes ``ttt.json`` in the output folder.  A target not
reached within the budget (``--max-epochs``, ``--max-minutes``) is reported
in one line, exit 4, after the results are written.  The work is
:func:`aihpc.workloads.session.train_to_target`'s.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", required=True, help="cosmoflow or deepcam")
    p.add_argument(
        "--runs",
        type=int,
        default=5,
        help="rounds one after another (default 5; olympic mean needs >= 3)",
    )
    p.add_argument(
        "--instances", type=int, default=1, help="models trained at once per round (default 1)"
    )
    p.add_argument("--size", help="workload size: small (default, the reference) or tiny")
    p.add_argument(
        "--target", type=float, help="quality target (default: the workload's reference target)"
    )
    p.add_argument("--max-epochs", type=int, help="epoch budget per model (default: the size's)")
    p.add_argument(
        "--max-minutes", type=float, default=10.0, help="time budget per model (default 10)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the data and the models (default 0)"
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        help="existing data (DIR/train, DIR/validation) instead of generated",
    )
    p.add_argument(
        "--stage-dir", help="node-local folder to stage the data to (default: a temporary folder)"
    )
    _add_worker_arguments(p)
    p.add_argument("--out", type=Path, help="output folder (default runs/ttt-<workload>-<time>)")
    p.add_argument(
        "--json", action="store_true", help="print the JSON document instead of the table"
    )


def _add_worker_arguments(p: argparse.ArgumentParser) -> None:
    """Where the instances train: local workers, a running scheduler, or batch jobs."""
    p.add_argument(
        "--threads-per-worker",
        type=int,
        help="torch threads per instance (default: cores / instances)",
    )
    p.add_argument("--scheduler", help="address of a running Dask scheduler, tcp://HOST:PORT")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="no Dask workers: run the instances here, one by one",
    )
    batch = p.add_argument_group("batch systems")
    batch.add_argument(
        "--slurm",
        dest="batch_system",
        action="store_const",
        const="slurm",
        help="workers as SLURM jobs (dask-jobqueue), one per instance",
    )
    batch.add_argument("--partition", help="SLURM partition")
    batch.add_argument(
        "--time", dest="walltime", help="time limit of each worker job, e.g. 01:00:00"
    )
    batch.add_argument("--worker-memory", help="memory limit of each worker, e.g. 8GiB")
    batch.add_argument(
        "--interface",
        help="network interface the scheduler and the worker jobs use, e.g. ib0 (default: all)",
    )


SETTINGS = (
    "workload",
    "runs",
    "instances",
    "size",
    "target",
    "max_epochs",
    "max_minutes",
    "seed",
    "data_dir",
    "stage_dir",
    "threads_per_worker",
    "scheduler",
    "in_process",
    "batch_system",
    "partition",
    "walltime",
    "worker_memory",
    "interface",
    "out",
)


def run(args: argparse.Namespace) -> int:
    import json

    from aihpc.base.errors import TargetNotReached
    from aihpc.workloads.session import Settings, train_to_target

    outcome = train_to_target(Settings(**{name: getattr(args, name) for name in SETTINGS}))
    print(json.dumps(outcome.document, sort_keys=True, indent=2) if args.json else outcome.table())
    missed = outcome.missed()
    if missed:
        raise TargetNotReached(missed)
    return 0
