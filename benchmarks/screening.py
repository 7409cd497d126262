"""Benchmark: does proxy screening help the search?  Default runs with and without ``--screen K``, same seeds.

    python benchmarks/screening.py [--seeds 0 1 2] [--screen 4] [--minutes 5] [--keep DIR] [-- more aihpc run arguments]

For each seed, one run without screening and one with, one after the other
(so a drift of the machine hits both alike).  Prints, per run, the best
accuracy, the regulated score, the score (GOPS), the trials and, with
screening, the screenings and the share of the run's operations they took;
then, per mode, the mean and the standard deviation over the seeds, and the
mean of the per-seed differences (screened minus unscreened) with its
spread.  Issue 11 asks for screening to be on by default only if it
measurably helps: a mean difference larger than its own spread.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from aihpc_runs import run_aihpc


def summary(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):10.4g} ± {sd:<10.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--screen", type=int, default=4, help="candidates per screening (default 4)")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--keep", type=Path, help="keep the run directories under DIR")
    ap.add_argument("extra", nargs="*", help="more `aihpc run` arguments, after --")
    args = ap.parse_args()
    rows: dict[int, dict[int, dict]] = {0: {}, args.screen: {}}
    print(f"{'seed':>4} {'screen':>6} {'best %':>7} {'regulated':>10} {'GOPS':>7} {'trials':>6} "
          f"{'screenings':>10} {'screen ops %':>12}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for seed in args.seeds:
            for k in rows:
                r = run_aihpc(root / f"seed{seed}-screen{k}", args.minutes, "--seed", str(seed),
                              "--screen", str(k), *args.extra)
                s = r["score"]
                rows[k][seed] = {"best": s["best_accuracy"], "regulated": s["regulated_score"] / 1e9,
                                 "gops": s["ops_per_second"] / 1e9}
                share = s.get("screening_ops", 0) / s["ops"] if s["ops"] else 0.0
                print(f"{seed:>4} {k:>6} {100 * s['best_accuracy']:7.2f} {s['regulated_score'] / 1e9:10.2f} "
                      f"{s['ops_per_second'] / 1e9:7.2f} {len(r['trials']):>6} {len(r.get('screenings', [])):>10} "
                      f"{100 * share:12.2f}", flush=True)
    for key, name in (("best", "best accuracy"), ("regulated", "regulated score (G)"), ("gops", "GOPS")):
        off = [rows[0][s][key] for s in args.seeds]
        on = [rows[args.screen][s][key] for s in args.seeds]
        print(f"{name:>20}: off {summary(off)} on {summary(on)} "
              f"difference {summary([b - a for a, b in zip(off, on, strict=True)])}")


if __name__ == "__main__":
    main()
