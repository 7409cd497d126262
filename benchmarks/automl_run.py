"""Benchmark: harness overhead and share of measured peak of a real ``aihpc run``.

Runs ``aihpc run`` (default 5 minutes, the default workload) and reports:
- harness overhead: share of the workers' wall time not spent in training
  steps or evaluation passes (goal: under 3 %);
- achieved share of the machine's measured peak (the fastest kernel) and of its nominal peak.

``--report RUN`` prints the same from a run kept earlier (``--keep``), running nothing.

    python benchmarks/automl_run.py [--minutes 5] [--keep DIR] [-- more aihpc run arguments]
    python benchmarks/automl_run.py --report RUN
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from aihpc_runs import check_runs, run_aihpc
from analysis import peak_text, quality_text, read_run, utilisation
from bench_main import script


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--keep", type=Path, help="run directory to keep (default: a temporary one)")
    ap.add_argument("--report", type=Path, metavar="RUN", help="report the run kept in RUN; run nothing")
    ap.add_argument("extra", nargs="*", help="more `aihpc run` arguments, after --")
    args = ap.parse_args(argv)
    if args.report is not None:
        results = read_run(args.report)
    else:
        check_runs(args.minutes, [("run", args.extra)])
        with tempfile.TemporaryDirectory() as tmp:
            results = run_aihpc(args.keep or Path(tmp) / "run", args.minutes, *args.extra)
    print("\n".join(report(results)))
    return 0


def report(results: dict[str, Any]) -> list[str]:
    """The run's score, quality, trials, harness overhead and share of peak."""
    from aihpc.base.fmt import format_si

    s = results["score"]
    u = utilisation(results)
    setup = u["task_other_seconds"] / (u["worker_slots"] * u["wall_seconds"])
    return [
        f"score             {format_si(s['ops_per_second'], 'OPS')} over {s['wall_seconds']:.1f} s",
        f"quality           {quality_text(s)}",
        f"trials            {len(results['trials'])}",
        f"harness overhead  {100 * u['overhead_fraction']:.2f} % of {u['worker_slots']} workers' wall time "
        f"(task set-up {100 * setup:.2f} %, idle {100 * u['idle_fraction']:.2f} %)",
        *peak_text(results),
    ]


if __name__ == "__main__":
    sys.exit(main())
