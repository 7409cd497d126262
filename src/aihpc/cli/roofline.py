"""``aihpc roofline``: the machine's measured roofs, and measured kernels placed under them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aihpc.cli.options import add_device, add_dtypes
from aihpc.cli.output import add_output_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_device(parser)
    add_dtypes(
        parser,
        "peak dtypes (float64, float32, tf32 on CUDA, bfloat16, float16); repeat for "
        "several (default on CPU: float32, and bfloat16 and float16 where the processor "
        "computes them natively (AVX512_BF16 or AMX, AVX512-FP16 or AMX-FP16, ARM's BF16 and "
        "FP16); a dtype it only emulates is measured on one kernel when named here; default on "
        "CUDA: float32, tf32, bfloat16, float16)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=2.0,
        help="timed seconds per measurement: each peak and each bandwidth kernel (default 2)",
    )
    parser.add_argument(
        "--elements",
        type=int,
        default=None,
        help="float64 elements per STREAM array (default: 2**25 on CPU, 2**28 on CUDA, doubled "
        "until each array is 4x the last-level cache); smaller arrays measure cache, not memory",
    )
    parser.add_argument(
        "--points",
        metavar="FILE",
        type=Path,
        action="append",
        default=[],
        help="a `bench operators` or `bench network` result whose kernels to place on the "
        "roofline; repeat for several",
    )
    parser.add_argument(
        "--plot", metavar="FILE.png", type=Path, default=None, help="write the roofline plot here"
    )
    add_output_arguments(parser, "roofline.json")


def run(args: argparse.Namespace) -> int:
    """Check every input, measure the roofs, place the points, write the plot and the result file.

    Everything a user can get wrong is checked before the first measurement;
    the plot is written before the result file and removed again if the
    result file cannot be written, so a failure leaves neither.
    """
    from aihpc.base.checks import integer
    from aihpc.base.errors import AihpcError
    from aihpc.cli.output import emit
    from aihpc.machine.devices import resolve_device
    from aihpc.roofline import machine

    seconds = machine.check_seconds(args.seconds)
    if args.elements is not None:
        integer("elements", args.elements)
    _check_writable(args.out, "--out")
    if args.plot is not None:
        _check_writable(args.plot, "--plot")
    point_files = [machine.read_points(path) for path in args.points]
    device = str(resolve_device(args.device))
    if args.dtype:
        dtypes, left_out = machine.check_dtypes(device, args.dtype), {}
    else:
        dtypes, left_out = machine.machine_dtypes(device), machine.left_out_dtypes(device)
    for points_file in point_files:
        points_file.check_device(device)
    points = [p for points_file in point_files for p in points_file.points]

    for dtype, why in left_out.items():
        _progress(f"{dtype} left out of the defaults: {why} (measure it with --dtype {dtype})")
    data = machine.measure_machine(
        device, dtypes, seconds, args.elements, progress=_progress, left_out=left_out
    )
    data = machine.add_points(data, points)
    table = machine.format_table(data)
    if args.plot is not None:
        from aihpc.roofline.plot import plot_roofline

        plot_roofline(data, args.plot)
        table += f"\nplot: {args.plot}"
    try:
        return emit(args, "roofline", data, table)
    except AihpcError:
        if args.plot is not None:
            args.plot.unlink(missing_ok=True)
        raise


def _check_writable(path: Path, option: str) -> None:
    """A one-line StorageError, before any measurement, when ``path`` cannot be a file to write."""
    from aihpc.base.errors import StorageError

    if path.is_dir():
        raise StorageError(f"cannot write {option} {path}: it is a directory")
    if not path.parent.is_dir():
        raise StorageError(f"cannot write {option} {path}: directory {path.parent} does not exist")


def _progress(line: str) -> None:
    print(f"aihpc roofline: {line}", file=sys.stderr, flush=True)
