"""Benchmark: harness overhead and share of measured peak of a real ``aihpc run``.

Runs ``aihpc run`` (default 5 minutes, the default workload) and reports:
- harness overhead: share of the workers' wall time not spent in training
  steps or evaluation passes (goal: under 3 %);
- achieved share of the machine's measured peak (the fastest kernel) and of its nominal peak.

    python benchmarks/automl_run.py [--minutes 5] [--workers N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from analysis import peak_text, utilisation

from aihpc_runs import run_aihpc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--keep", type=Path, help="run directory to keep (default: a temporary one)")
    ap.add_argument("extra", nargs="*", help="more `aihpc run` arguments, after --")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp) / "run"
        results = run_aihpc(out, args.minutes, *args.extra)
    s = results["score"]
    u = utilisation(results)
    print(f"score             {s['ops_per_second'] / 1e9:.2f} GOPS over {s['wall_seconds']:.1f} s")
    print(f"best accuracy     {s['best_accuracy']}")
    print(f"trials            {len(results['trials'])}")
    print(f"harness overhead  {100 * u['overhead_fraction']:.2f} % of {u['worker_slots']} workers' wall time "
          f"(task set-up {100 * u['task_other_seconds'] / (u['worker_slots'] * u['wall_seconds']):.2f} %, "
          f"idle {100 * u['idle_fraction']:.2f} %)")
    print("\n".join(peak_text(results)))


if __name__ == "__main__":
    main()
