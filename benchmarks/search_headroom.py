"""Benchmark: does the search keep improving, and does it beat no search?  (issue 7)

Runs ``aihpc run`` on the default workload, one run after another, for each
strategy and seed, and prints for each run: the first trial's accuracy, the
best accuracy at 1 minute and at the end, the score and the regulated score;
then the mean and spread per strategy, beside the task's ceiling.

    python benchmarks/search_headroom.py [--minutes 5] [--seeds 0,1,2]
        [--strategies evolution,random,none] [--keep DIR] [-- more aihpc run arguments]
    python benchmarks/search_headroom.py --report DIR [--seeds 0,1,2] [--strategies ...]

Strategies: ``evolution`` (the default), ``random`` (random parent),
``none`` (no architecture search: the seed network retrained, only its
hyperparameters searched); the defaults make 9 runs.  Every run's settings
are checked before the first starts; ``--report DIR`` prints the same from
the runs kept in DIR (``--keep DIR``: ``evolution-0`` ...), running nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from aihpc_runs import check_runs, run_aihpc
from analysis import best_accuracy_at, read_run
from bench_main import script

EARLY_SECONDS = 60.0


def figures(results: dict[str, Any]) -> dict[str, Any]:
    s = results["score"]
    first = next((t for t in results["trials"] if t["id"] == 0), {})
    return {
        "first": first.get("best_val_accuracy"),
        "early": best_accuracy_at(results, EARLY_SECONDS),
        "best": s.get("best_accuracy"),
        "score": s["ops_per_second"],
        "regulated": s["regulated_score"],
        "trials": len(results["trials"]),
    }


def _pct(x: float | None) -> str:
    return "   -  " if x is None else f"{100 * x:6.2f}"


def _mean_sd(values: list[float | None], scale: float, digits: int) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    sd = statistics.stdev(known) if len(known) > 1 else 0.0
    return f"{scale * statistics.fmean(known):.{digits}f} ± {scale * sd:.{digits}f}"


def plan(strategies: list[str], seeds: list[int], extra: list[str]) -> list[tuple[str, str, list[str]]]:
    """(strategy, name, aihpc run arguments) of each run, in the order they run."""
    return [(strategy, f"{strategy}-{seed}", ["--seed", str(seed), "--strategy", strategy, *extra])
            for strategy in strategies for seed in seeds]  # fmt: skip


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--strategies", default="evolution,random,none")
    ap.add_argument("--keep", type=Path, help="keep the run directories under DIR")
    ap.add_argument("--report", type=Path, metavar="DIR", help="report the runs kept under DIR; run nothing")
    ap.add_argument("extra", nargs="*", help="more `aihpc run` arguments, after --")
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds is integers separated by commas, got {args.seeds!r}")
    runs = plan(args.strategies.split(","), seeds, args.extra)
    print(f"{'strategy':<10} {'seed':>4} {'first %':>8} {'@1min %':>8} {'best %':>8} "
          f"{'GOPS':>7} {'reg. GOPS':>9} {'trials':>6}", flush=True)
    results: list[dict[str, Any]] = []
    if args.report is not None:
        results = [read_run(args.report / name) for _, name, _ in runs]
        for (strategy, _, run_args), r in zip(runs, results, strict=True):
            print(row_text(strategy, run_args[1], figures(r)))
    else:
        check_runs(args.minutes, [(name, a) for _, name, a in runs])
        with tempfile.TemporaryDirectory() as tmp:
            for strategy, name, run_args in runs:
                results.append(run_aihpc((args.keep or Path(tmp)) / name, args.minutes, *run_args))
                print(row_text(strategy, run_args[1], figures(results[-1])), flush=True)
    print("\n" + "\n".join(summary([s for s, _, _ in runs], results)))
    return 0


def row_text(strategy: str, seed: str, f: dict[str, Any]) -> str:
    return (f"{strategy:<10} {seed:>4} {_pct(f['first']):>8} {_pct(f['early']):>8} {_pct(f['best']):>8} "
            f"{f['score'] / 1e9:7.1f} {f['regulated'] / 1e9:9.1f} {f['trials']:>6}")


def summary(strategies: list[str], results: list[dict[str, Any]]) -> list[str]:
    """The task's ceiling (where the data set has one), then per strategy the mean ± sd over its
    seeds of the best accuracy, its gain from 1 minute to the end, and the scores."""
    rows: dict[str, list[dict[str, Any]]] = {}
    ceiling = None
    for strategy, r in zip(strategies, results, strict=True):
        rows.setdefault(strategy, []).append(figures(r))
        ceiling = (r.get("data") or {}).get("ceiling") or ceiling
    lines = []
    if ceiling is not None:
        lines.append(f"task ceiling: between {100 * ceiling['oracle_accuracy']:.2f} % and 100 % "
                     f"(oracle classifier on {ceiling['samples']} validation samples)")
    lines.append(f"{'strategy':<10} {'best % (mean ± sd)':>20} {'gain 1→end, points':>20} {'regulated GOPS':>16} "
                 f"{'GOPS':>14}")
    for strategy, fs in rows.items():
        gains = [f["best"] - f["early"] for f in fs if f["best"] is not None and f["early"] is not None]
        lines.append(f"{strategy:<10} {_mean_sd([f['best'] for f in fs], 100, 2):>20} {_mean_sd(gains, 100, 2):>20} "
                     f"{_mean_sd([f['regulated'] for f in fs], 1e-9, 1):>16} "
                     f"{_mean_sd([f['score'] for f in fs], 1e-9, 1):>14}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
