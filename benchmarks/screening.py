"""Benchmark: does proxy screening help the search?  Default runs with and without ``--screen K``, same seeds.

    python benchmarks/screening.py [--seeds 0 1 2] [--screen 4] [--minutes 5] [--keep DIR] [-- more aihpc run arguments]
    python benchmarks/screening.py --report DIR [--seeds 0 1 2] [--screen 4]

For each seed, one run without screening and one with, one after the other
(so a drift of the machine hits both alike).  Prints, per run, the best
accuracy, the regulated score, the score (GOPS), the trials and, with
screening, the screenings and the share of the run's operations they took;
then, per mode, the mean and the standard deviation over the seeds, and the
mean of the per-seed differences (screened minus unscreened) with its
spread.  Issue 11 asks for screening to be on by default only if it
measurably helps: a mean difference larger than its own spread.  Every
run's settings are checked before the first starts; ``--report DIR`` prints
the same from the runs kept in DIR (``--keep DIR``: ``seed0-screen0`` ...),
running nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from aihpc_runs import check_runs, run_aihpc
from analysis import read_run
from bench_main import script


def spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):10.4g} ± {sd:<10.3g}"


def plan(seeds: list[int], screen: int, extra: list[str]) -> list[tuple[int, int, str, list[str]]]:
    """(seed, screen, name, aihpc run arguments) of each run, in the order they run."""
    return [(seed, k, f"seed{seed}-screen{k}", ["--seed", str(seed), "--screen", str(k), *extra])
            for seed in seeds for k in (0, screen)]  # fmt: skip


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--screen", type=int, default=4, help="candidates per screening (default 4)")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--keep", type=Path, help="keep the run directories under DIR")
    ap.add_argument("--report", type=Path, metavar="DIR", help="report the runs kept under DIR; run nothing")
    ap.add_argument("extra", nargs="*", help="more `aihpc run` arguments, after --")
    args = ap.parse_args(argv)
    if args.screen == 0:
        ap.error("--screen is the screened runs' number of candidates (2 or more); 0, no screening, runs anyway")
    runs = plan(args.seeds, args.screen, args.extra)
    print(f"{'seed':>4} {'screen':>6} {'best %':>7} {'regulated':>10} {'GOPS':>7} {'trials':>6} "
          f"{'screenings':>10} {'screen ops %':>12}", flush=True)
    rows: list[dict[str, Any]] = []
    if args.report is not None:
        kept = [read_run(args.report / name) for _, _, name, _ in runs]
        rows = [figures(seed, k, r) for (seed, k, _, _), r in zip(runs, kept, strict=True)]
        print("\n".join(row_text(r) for r in rows))
    else:
        check_runs(args.minutes, [(name, a) for _, _, name, a in runs])
        with tempfile.TemporaryDirectory() as tmp:
            for seed, k, name, run_args in runs:
                rows.append(figures(seed, k, run_aihpc((args.keep or Path(tmp)) / name, args.minutes, *run_args)))
                print(row_text(rows[-1]), flush=True)
    print("\n".join(comparison(rows, args.seeds, args.screen)))
    return 0


def figures(seed: int, screen: int, results: dict[str, Any]) -> dict[str, Any]:
    """One run's figures (a run that evaluated no trial has no best accuracy: None)."""
    s = results["score"]
    return {"seed": seed, "screen": screen, "best": s.get("best_accuracy"),
            "regulated": s["regulated_score"] / 1e9, "gops": s["ops_per_second"] / 1e9,
            "trials": len(results["trials"]), "screenings": len(results.get("screenings") or []),
            "screen_share": s.get("screening_ops", 0) / s["ops"] if s["ops"] else 0.0}  # fmt: skip


def row_text(f: dict[str, Any]) -> str:
    best = "-" if f["best"] is None else f"{100 * f['best']:.2f}"
    return (f"{f['seed']:>4} {f['screen']:>6} {best:>7} {f['regulated']:10.2f} {f['gops']:7.2f} "
            f"{f['trials']:>6} {f['screenings']:>10} {100 * f['screen_share']:12.2f}")


def comparison(rows: list[dict[str, Any]], seeds: list[int], screen: int) -> list[str]:
    """Per figure: the mean ± sd over the seeds without and with screening, and of the per-seed
    differences (seeds where a run has no such figure are left out, and counted)."""
    by = {(r["seed"], r["screen"]): r for r in rows}
    lines = []
    for key, name in (("best", "best accuracy"), ("regulated", "regulated score (G)"), ("gops", "GOPS")):
        pairs = [(by[s, 0][key], by[s, screen][key]) for s in seeds
                 if by[s, 0][key] is not None and by[s, screen][key] is not None]  # fmt: skip
        if not pairs:
            lines.append(f"{name:>20}: no seed has it with and without screening")
            continue
        off, on = zip(*pairs, strict=True)
        left_out = f" ({len(seeds) - len(pairs)} seeds without it left out)" if len(pairs) < len(seeds) else ""
        lines.append(f"{name:>20}: off {spread(list(off))} on {spread(list(on))} "
                     f"difference {spread([b - a for a, b in pairs])}{left_out}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
