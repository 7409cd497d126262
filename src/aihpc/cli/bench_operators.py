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
from pathlib import Path
from typing import Any

from aihpc.cli.output import add_output_arguments, emit
from aihpc.errors import ConfigError, VerificationFailed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    parser.add_argument(
        "--dtype",
        action="append",
        metavar="DTYPE",
        help="float32, bfloat16 or float16; repeat for several (default: every dtype the device supports)",
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
    parser.add_argument(
        "--roofline",
        metavar="FILE",
        type=Path,
        default=None,
        help="the peaks of `aihpc roofline` to use instead of measuring them now",
    )
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
    """Validate and time the operators; write the result; 0, or VerificationFailed if any failed validation."""
    start = time.perf_counter()
    if args.ops is not None and args.ops.strip() == "list":
        return _list_operators()
    if isinstance(args.scale, bool) or args.scale < 1:
        raise ConfigError(f"--scale must be an integer >= 1, got {args.scale}")
    if not args.out.parent.is_dir():
        raise ConfigError(f"cannot write {args.out}: directory {args.out.parent} does not exist")

    from aihpc.bench import operators
    from aihpc.bench.op_catalogue import select
    from aihpc.roofline.model import load_or_measure
    from aihpc.roofline.peak import resolve_device

    cases = select(
        None if args.ops is None else [n.strip() for n in args.ops.split(",") if n.strip()]
    )
    device = str(resolve_device(args.device))
    dtypes = operators.resolve_dtypes(args.dtype, device)
    if args.roofline is None:
        _progress(
            f"measuring the roofline of {device} ({', '.join(dtypes)}; matmul peaks, triad bandwidth)"
        )
    roofline = load_or_measure(args.roofline, device, dtypes, seconds=0.2 if args.quick else 0.5)
    result = operators.run_operators(
        cases, dtypes, device, roofline, quick=args.quick, scale=args.scale, progress=_progress
    )
    data = result.to_dict()
    data["seconds"] = time.perf_counter() - start
    data["sweep_seconds"] = result.seconds
    emit(args, "bench-operators", data, format_table(data))
    if result.failed:
        raise VerificationFailed(
            f"{len(result.failed)} operator(s) failed validation and were not timed: "
            f"{', '.join(result.failed)} (details in {args.out})"
        )
    return 0


# ------------------------------------------------------------------ table
def _ms(p: dict[str, Any] | None) -> str:
    if p is None:
        return "-"
    return f"{p['seconds'] * 1e3:.3g}" + ("!" if p.get("warning") else "")


def _rate(p: dict[str, Any] | None, key: str, uncounted: bool = False) -> str:
    if p is None:
        return "-"
    return f"{p[key] / 1e9:.3g}" + ("*" if uncounted else "")


def _share(p: dict[str, Any] | None) -> str:
    if p is None:
        return "-"
    return "unknown" if p.get("roofline_share") is None else f"{p['roofline_share']:.0%}"


def _err(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1e}"


def _cells(row: dict[str, Any]) -> list[str]:
    v, f, fb = row["validation"], row["forward"], row["forward_backward"]
    star = bool(row.get("uncounted"))
    return [
        row["name"],
        row["dtype"],
        "ok" if v["status"] == "passed" else "FAILED",
        _err(v["l2"]),
        _err(v["max_abs"]),
        _err(v["grad_l2"]),
        _ms(f),
        _rate(f, "flops_per_s", star),
        _rate(f, "bytes_per_s"),
        _share(f),
        _ms(fb),
        _rate(fb, "flops_per_s", star),
        _share(fb),
    ]


def _roofline_line(data: dict[str, Any]) -> str:
    roof = data.get("roofline") or {}
    peaks = ", ".join(f"{k} {v / 1e9:.3g}" for k, v in (roof.get("peaks") or {}).items()) or "none"
    bandwidth = roof.get("bandwidth")
    memory = "unknown" if bandwidth is None else f"{bandwidth / 1e9:.3g} GB/s"
    return f"roofline of {roof.get('device', data['device'])}: matmul peaks (GFLOP/s) {peaks}; triad {memory}"


def format_table(data: dict[str, Any]) -> str:
    """The readable table of a ``bench-operators`` result's ``data`` (one line per row), with notes."""
    head = [
        "operator",
        "dtype",
        "valid",
        "L2 err",
        "max err",
        "grad L2",
        "fwd ms",
        "GFLOP/s",
        "GB/s",
        "roof",
        "fwd+bwd ms",
        "GFLOP/s",
        "roof",
    ]
    body = [_cells(r) for r in data["rows"]]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body, strict=True)]
    lines = [
        f"Level 0 operators on {data['device']}" + (" (quick)" if data.get("quick") else ""),
        _roofline_line(data),
        "",
    ]
    for cells in (head, *body):  # names left-aligned, numbers right-aligned
        padded = (
            c.ljust(w) if i < 3 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )
        lines.append("  ".join(padded))
    notes = [
        f"FAILED {r['name']} {r['dtype']}: {r['validation']['reason']}"
        for r in data["rows"]
        if r["validation"]["status"] != "passed"
    ]
    uncounted = {r["name"]: r["uncounted"] for r in data["rows"] if r.get("uncounted")}
    notes += [
        f"* {name}: uncounted ops {ops} (its GFLOP/s are a lower bound)"
        for name, ops in uncounted.items()
    ]
    if any(
        p and p.get("warning") for r in data["rows"] for p in (r["forward"], r["forward_backward"])
    ):
        notes.append("! the timing's spread is wide or unmeasured: see 'warning' in the JSON")
    notes.append(
        f"errors: relative L2 and max |error| against float64; {len(data['rows'])} rows in "
        f"{data['seconds']:.1f} s"
    )
    return "\n".join([*lines, "", *notes])
