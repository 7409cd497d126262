"""Benchmark: does the score repeat?  Default runs one after another, each score and their CV.

    python benchmarks/score_repeatability.py [--runs 3] [--minutes 5] [--keep DIR] [-- more aihpc run arguments]

Prints, for each run, the score, the measured peak it was compared with and
the share of peak; then the mean, the standard deviation and the coefficient
of variation (CV = sd / mean) of the scores and of the peaks.  A score that
varies more than the machine's own peak does comes from the benchmark; one
that varies with the peak comes from the machine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from aihpc_runs import run_aihpc


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--keep", type=Path, help="keep the run directories under DIR")
    ap.add_argument("extra", nargs="*", help="more `aihpc run` arguments, after --")
    args = ap.parse_args()
    scores, peaks = [], []
    print(f"{'run':>3} {'GOPS':>8} {'peak GFLOP/s':>13} {'share %':>8} {'best %':>7}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for i in range(args.runs):
            s = run_aihpc(root / f"run-{i}", args.minutes, *args.extra)["score"]
            scores.append(s["ops_per_second"])
            peaks.append(s["peak_flops_per_s"])
            print(f"{i:>3} {s['ops_per_second'] / 1e9:8.2f} {s['peak_flops_per_s'] / 1e9:13.1f} "
                  f"{100 * s['peak_fraction']:8.1f} {100 * s['best_accuracy']:7.2f}", flush=True)
    print(f"score: mean {statistics.fmean(scores) / 1e9:.2f} GOPS, CV {100 * cv(scores):.2f} %")
    print(f"peak:  mean {statistics.fmean(peaks) / 1e9:.1f} GFLOP/s, CV {100 * cv(peaks):.2f} %")


if __name__ == "__main__":
    main()
