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
    from aihpc.errors import ConfigError
    from aihpc.runner.scaling import parse_sizes, run_scaling

    sizes = parse_sizes(args.workers)
    if args.minutes <= 0:
        raise ConfigError(f"minutes must be > 0, got {args.minutes}")
    extra = [a for a in args.run_args if a != "--"]
    result = run_scaling(
        sizes, args.minutes, Path(args.out), extra, threads=args.threads_per_worker
    )
    print(f"{'workers':>7}  {'score':>12}  {'per worker':>12}  {'efficiency':>10}")
    for r in result["sizes"]:
        print(
            f"{r['workers']:>7}  {r['score'] / 1e9:>8.2f} GOPS  "
            f"{r['score_per_worker'] / 1e9:>8.2f} GOPS  {100 * r['efficiency']:>9.1f}%"
        )
    print(f"written: {Path(args.out) / 'scaling.json'}, {Path(args.out) / 'scaling.png'}")
    return 0
