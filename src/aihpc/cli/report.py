"""``aihpc report RUN_DIR|FILE [--out FILE]``: write a self-contained HTML report.

RUN_DIR: a run's report, with a section for each bench, profile or roofline
result file the directory also holds; FILE: a report of that result file.

Prints the path of the file written.  A missing run directory or a missing /
invalid results.json is a :class:`aihpc.base.errors.DataError` (one line, exit 2).
Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``RUN_DIR`` and ``--out``."""
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR|FILE",
        type=Path,
        help="a run directory holding results.json (written by `aihpc run`), "
        "or a result file of `aihpc bench`, `profile`, `roofline` or `infer` (or its folder)",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        type=Path,
        default=None,
        help="where to write the HTML (default: RUN_DIR/report.html or FILE.html)",
    )


def run(args: argparse.Namespace) -> int:
    """Write the report and print its path; return 0."""
    from aihpc.report import write_report

    path = write_report(args.run_dir, args.out)
    print(path)
    return 0
