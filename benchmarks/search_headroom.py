"""Benchmark: does the search keep improving, and does it beat no search?  (issue 7)

Runs ``aihpc run`` on the default workload, one run after another, for each
strategy and seed, and prints for each run: the first trial's accuracy, the
best accuracy at 1 minute and at the end, the score and the regulated score;
then the mean and spread per strategy, beside the task's ceiling.

    python benchmarks/search_headroom.py [--minutes 5] [--seeds 0,1,2]
        [--strategies evolution,random,none] [--keep DIR] [-- more aihpc run arguments]

Strategies: ``evolution`` (the default), ``random`` (random parent),
``none`` (no architecture search: the seed network retrained, only its
hyperparameters searched).  15 runs of 5 minutes take about 80 minutes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from analysis import best_accuracy_at

from aihpc_runs import run_aihpc

EARLY_SECONDS = 60.0


def figures(results: dict) -> dict:
    s = results["score"]
    first = next(t for t in results["trials"] if t["id"] == 0)
    return {
        "first": first["best_val_accuracy"],
        "early": best_accuracy_at(results, EARLY_SECONDS),
        "best": s["best_accuracy"],
        "score": s["ops_per_second"],
        "regulated": s["regulated_score"],
        "trials": len(results["trials"]),
    }


def _pct(x: float | None) -> str:
    return "   -  " if x is None else f"{100 * x:6.2f}"


def _mean_sd(values: list[float], scale: float, digits: int) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{scale * statistics.fmean(values):.{digits}f} ± {scale * sd:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--strategies", default="evolution,random,none")
    ap.add_argument("--keep", type=Path, help="keep the run directories under DIR")
    ap.add_argument("extra", nargs="*", help="more `aihpc run` arguments, after --")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    strategies = args.strategies.split(",")
    rows: dict[str, list[dict]] = {}
    ceiling = None
    print(f"{'strategy':<10} {'seed':>4} {'first %':>8} {'@1min %':>8} {'best %':>8} "
          f"{'GOPS':>7} {'reg. GOPS':>9} {'trials':>6}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for strategy in strategies:
            for seed in seeds:
                results = run_aihpc(root / f"{strategy}-{seed}", args.minutes, "--seed", str(seed),
                                    "--strategy", strategy, *args.extra)
                ceiling = (results.get("data") or {}).get("ceiling") or ceiling
                f = figures(results)
                rows.setdefault(strategy, []).append(f)
                print(f"{strategy:<10} {seed:>4} {_pct(f['first']):>8} {_pct(f['early']):>8} {_pct(f['best']):>8} "
                      f"{f['score'] / 1e9:7.1f} {f['regulated'] / 1e9:9.1f} {f['trials']:>6}", flush=True)
    print()
    if ceiling is not None:
        print(f"task ceiling: between {100 * ceiling['oracle_accuracy']:.2f} % and 100 % "
              f"(oracle classifier on {ceiling['samples']} validation samples)")
    print(f"{'strategy':<10} {'best % (mean ± sd)':>20} {'gain 1→end, points':>20} {'regulated GOPS':>16} "
          f"{'GOPS':>14}")
    for strategy, fs in rows.items():
        gains = [f["best"] - f["early"] for f in fs if f["best"] is not None and f["early"] is not None]
        print(f"{strategy:<10} {_mean_sd([f['best'] for f in fs], 100, 2):>20} {_mean_sd(gains, 100, 2):>20} "
              f"{_mean_sd([f['regulated'] for f in fs], 1e-9, 1):>16} {_mean_sd([f['score'] for f in fs], 1e-9, 1):>14}")


if __name__ == "__main__":
    main()
