"""``aihpc report RUN_DIR [--out FILE]``: write a run's self-contained HTML report.

Prints the path of the file written.  A missing run directory or a missing /
invalid results.json is a :class:`aihpc.errors.ConfigError` (one line, exit 2).
Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``RUN_DIR`` and ``--out``."""
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                        help="run directory holding results.json (written by `aihpc run`)")
    parser.add_argument("--out", metavar="FILE", type=Path, default=None,
                        help="where to write the HTML (default: RUN_DIR/report.html)")


def run(args: argparse.Namespace) -> int:
    """Write the report and print its path; return 0."""
    from aihpc.report import write_report

    path = write_report(args.run_dir, args.out)
    print(path)
    return 0
