"""Benchmark: weak scaling of `aihpc run` on this machine (goal: efficiency above 90 %).

    python benchmarks/weak_scaling.py [--workers 1,2] [--minutes 2]

Equivalent to `aihpc scaling`; kept here so the benchmarks folder lists every
measurement we report.
"""

import sys

from aihpc.cli import main as aihpc


def main(argv: list[str] | None = None) -> int:
    return aihpc(["scaling", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
