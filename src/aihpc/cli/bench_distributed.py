"""``aihpc bench distributed``: Level 3, data-parallel training against one process.

Launches ``--procs`` ranks (gloo on the CPU, NCCL on GPUs) and one alone,
on this node or with ``--slurm`` as the tasks of ``srun`` over ``--nodes``
nodes, times DDP steps and, apart, compute and the gradient all-reduce, and
checks the ring all-reduce's computed volume against the bytes the ranks
sent (see :mod:`aihpc.bench.distributed`).  ``--procs`` below 1 or above
the cores (GPUs with CUDA), an unknown model, CUDA asked for on a machine
without it, or an unknown partition: one line and exit 2, before anything
is launched.  Progress lines go to stderr.
"""

from __future__ import annotations

import argparse

from aihpc.cli.options import add_device
from aihpc.cli.output import add_output_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--procs", type=int, required=True, help="processes (ranks) of the data-parallel run"
    )
    parser.add_argument(
        "--model", metavar="NAME", default="resnet20", help="a model of the zoo (default resnet20)"
    )
    parser.add_argument(
        "--batch", type=int, default=32, help="batch size per process (weak scaling; default 32)"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed training steps (default 20)")
    parser.add_argument(
        "--warmup", type=int, default=3, help="untimed warm-up steps before them (default 3)"
    )
    add_device(parser, "cpu (gloo), cuda (NCCL) or auto (default)")
    parser.add_argument(
        "--threads-per-rank",
        type=int,
        help="torch threads of each rank (default: the cores / procs here; 1 with --slurm)",
    )
    parser.add_argument(
        "--interface", help="network interface gloo uses, e.g. ib0 (default: lo here)"
    )
    slurm = parser.add_argument_group("across nodes")
    slurm.add_argument(
        "--slurm",
        action="store_true",
        help="start the ranks with srun (inside an allocation: its nodes; else srun asks for "
        "them); the output's folder must be on a file system every node sees",
    )
    slurm.add_argument(
        "--nodes", type=int, default=1, help="nodes the ranks spread over (default 1)"
    )
    slurm.add_argument("--partition", help="SLURM partition (default: the cluster's)")
    add_output_arguments(parser, "bench-distributed.json")


def run(args: argparse.Namespace) -> int:
    """Validate, run the baseline and the parallel run, write the result and print the table."""
    import sys

    from aihpc.base.errors import ConfigError
    from aihpc.bench.distributed import DistributedConfig, bench_distributed, format_table
    from aihpc.bench.distributed_launch import Launcher
    from aihpc.cli.output import emit

    config = DistributedConfig(
        procs=args.procs,
        model=args.model,
        batch=args.batch,
        steps=args.steps,
        warmup=args.warmup,
        device=args.device,
        threads_per_rank=args.threads_per_rank,
        launcher=Launcher(args.slurm, args.nodes, args.partition, args.interface),
    )
    # procs, model, device and SLURM checked before the output path and the launch
    config.backend()
    if not args.out.parent.is_dir():
        raise ConfigError(f"cannot write {args.out}: directory {args.out.parent} does not exist")
    outcome = bench_distributed(
        config,
        progress=lambda line: print(f"bench distributed: {line}", file=sys.stderr),
        shared_dir=args.out.parent.resolve() if args.slurm else None,
    )
    return emit(args, "bench-distributed", outcome.to_record(), format_table(outcome))
