"""aihpc scaling: weak scaling of the benchmark over worker counts."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    p.add_argument("--minutes", type=float, default=2.0, help="time budget of each run (default 2)")
    p.add_argument(
        "--threads-per-worker",
        type=int,
        default=1,
        help="torch threads per worker, fixed across sizes",
    )
    p.add_argument(
        "--out", default="runs/scaling", help="folder for the runs, scaling.json and scaling.png"
    )
    p.add_argument("run_args", nargs=argparse.REMAINDER, help="more `aihpc run` arguments after --")


def run(args: argparse.Namespace) -> int:
    from aihpc.runner.scaling import format_scaling, parse_sizes, run_scaling

    out = Path(args.out)
    extra = [a for a in args.run_args if a != "--"]
    result = run_scaling(
        parse_sizes(args.workers), args.minutes, out, extra, threads=args.threads_per_worker
    )
    print(format_scaling(result, out))
    return 0
