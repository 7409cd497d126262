"""``aihpc bench operators``: Level 0, single operators, validated and timed.

``aihpc bench operators [--device D] [--dtype DTYPE ...] [--ops a,b|list]
[--quick] [--scale N] [--roofline FILE] [--out FILE] [--json]`` validates
every operator of :mod:`aihpc.bench.op_catalogue` in every dtype asked
against a float64 reference and finite differences, times those that pass
(forward, forward+backward), and places them on the roofline (measured now,
or read from ``--roofline``).  What each figure means:
:mod:`aihpc.bench.operators`.

Progress goes to stderr, one line per (operator, dtype).  Exit status:
0 when every operator validated; 4 when any failed validation (the results
are still written; failed rows are untimed; one line on stderr says which);
2 for bad input (an unknown operator or dtype, a device or dtype the machine
lacks, an unwritable ``--out``) and 3 for a shape that does not fit in
memory: one line on stderr, nothing written.  Only the standard library is imported at
module level.
"""

from __future__ import annotations

import argparse
import sys
import time

from aihpc.base.checks import integer
from aihpc.base.errors import ConfigError, VerificationFailed
from aihpc.cli.options import add_device, add_dtypes, add_roofline
from aihpc.cli.output import add_output_arguments, emit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_device(parser)
    add_dtypes(
        parser,
        "float32, bfloat16 or float16; repeat for several "
        "(default: every dtype the device supports)",
    )
    parser.add_argument(
        "--ops",
        metavar="NAMES",
        default=None,
        help="comma-separated operator names (default: all; `--ops list` lists them)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small shapes and short timings (a smoke test)"
    )
    parser.add_argument(
        "--scale",
        type=int,
        default=1,
        metavar="N",
        help="multiply the batch size of every shape by N (default 1; e.g. larger on a GPU)",
    )
    add_roofline(parser)
    add_output_arguments(parser, "bench-operators.json")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _list_operators() -> int:
    from aihpc.bench.op_catalogue import CATALOGUE

    for case in CATALOGUE.values():
        sizes = " ".join(f"{k}={v}" for k, v in case.full.items())
        print(
            f"{case.name:<16} {case.family:<14} {sizes}" + (f"  ({case.note})" if case.note else "")
        )
    return 0


def run(args: argparse.Namespace) -> int:
    """Validate and time the operators; write the result; 0, or VerificationFailed if any failed."""
    start = time.perf_counter()
    if args.ops is not None and args.ops.strip() == "list":
        return _list_operators()
    integer("--scale", args.scale)
    if not args.out.parent.is_dir():
        raise ConfigError(f"cannot write {args.out}: directory {args.out.parent} does not exist")

    from aihpc.bench import operators
    from aihpc.bench.op_catalogue import select
    from aihpc.bench.tables import operators_table
    from aihpc.machine.devices import resolve_device
    from aihpc.roofline.model import load_or_measure

    cases = select(
        None if args.ops is None else [n.strip() for n in args.ops.split(",") if n.strip()]
    )
    device = str(resolve_device(args.device))
    dtypes = operators.resolve_dtypes(args.dtype, device)
    if args.roofline is None:
        _progress(
            f"measuring the roofline of {device} ({', '.join(dtypes)}; "
            "peaks of the fastest kernels, triad bandwidth)"
        )
    roofline = load_or_measure(args.roofline, device, dtypes, seconds=0.2 if args.quick else 0.5)
    result = operators.run_operators(
        cases, dtypes, device, roofline, quick=args.quick, scale=args.scale, progress=_progress
    )
    data = result.to_record(time.perf_counter() - start)
    emit(args, "bench-operators", data, operators_table(data))
    if result.failed:
        raise VerificationFailed(
            f"{len(result.failed)} operator(s) failed validation and were not timed: "
            f"{', '.join(result.failed)} (details in {args.out})"
        )
    return 0
