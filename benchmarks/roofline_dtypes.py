"""Benchmark: how long ``aihpc roofline``'s defaults take on this CPU, as its features decide and
with float16 treated as native.

``aihpc roofline`` measures float32 by default, and bfloat16 and float16 where the processor
computes them natively (:func:`aihpc.machine.processor.emulation`); a dtype it only emulates is
left out, and when asked for is measured on one kernel.  This script times
:func:`aihpc.roofline.machine.measure_machine` with this machine's defaults, then with the
processor's extensions plus ``avx512_fp16`` (float16 treated as native: the search over every
candidate kernel, as ``aihpc roofline`` did before), and prints each stage's seconds, each
peak's kernel and rate, and the load average around each case.

    python benchmarks/roofline_dtypes.py [--seconds 0.01] [--elements 65536] [--only features]

The defaults are the arguments of tests/roofline/test_roofline_cli.py's default-dtypes test;
``--seconds 2`` and no ``--elements`` are ``aihpc roofline``'s own defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from bench_main import script

from aihpc.base.fmt import format_si
from aihpc.machine.processor import Processor, describe_processor
from aihpc.roofline.machine import left_out_dtypes, machine_dtypes, measure_machine


def time_case(name: str, processor: Processor, seconds: float, elements: int | None) -> float:
    """Measure the roofs of ``processor``'s default dtypes; print the stages; the total seconds."""
    dtypes = machine_dtypes("cpu", processor)
    print(f"\n{name}: extensions {', '.join(processor.extensions)}")
    print(f"  dtypes {', '.join(dtypes)}; left out: {', '.join(left_out_dtypes('cpu', processor))}")
    print(f"  load average before: {os.getloadavg()[0]:.2f}")
    start = last = time.perf_counter()

    def progress(line: str) -> None:
        nonlocal last
        now = time.perf_counter()
        print(f"  {now - start:7.1f} s  (+{now - last:6.1f} s)  {line}", flush=True)
        last = now

    data = measure_machine("cpu", dtypes, seconds, elements, progress, processor=processor)
    total = time.perf_counter() - start
    for dtype, peak in data.peaks.items():
        rate = format_si(peak.flops_per_s, "FLOP/s")
        searched = len(peak.candidates or ())
        print(f"  peak {dtype:<9} {rate:>14}  {peak.kernel} ({searched} searched)")
    print(f"  total {total:.1f} s; load average after: {os.getloadavg()[0]:.2f}")
    return total


@script
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.01)
    parser.add_argument("--elements", type=int, default=65536)
    parser.add_argument("--only", choices=("features", "native"), default=None)
    args = parser.parse_args(argv)
    processor = describe_processor()
    native = dataclasses.replace(
        processor, extensions=tuple(sorted({*processor.extensions, "avx512_fp16"}))
    )
    cases = {"features": ("this processor's features", processor)}
    cases["native"] = ("float16 treated as native (avx512_fp16 added)", native)
    totals = {
        key: time_case(name, proc, args.seconds, args.elements)
        for key, (name, proc) in cases.items()
        if args.only in (None, key)
    }
    print("\n" + "; ".join(f"{key}: {total:.1f} s" for key, total in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
