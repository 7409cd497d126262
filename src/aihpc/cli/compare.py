"""``aihpc compare RESULT...``: results side by side, like with like, significance if runs repeat.

RESULT: a run directory (its results.json) or a result file that carries a
score.  Different workloads or schema versions are refused (exit 2);
different data sets, budgets or aihpc versions are flagged, and refused
with ``--strict``.  See :mod:`aihpc.ranking.compare`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results",
        metavar="RESULT",
        type=Path,
        nargs="+",
        help="run directories or result files (two or more)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse results of different data sets, budgets or aihpc versions "
        "instead of flagging them",
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run(args: argparse.Namespace) -> int:
    from aihpc.base.errors import ConfigError
    from aihpc.ranking.compare import (
        check_like_for_like,
        group_repeats,
        load_entry,
        render_comparison,
    )

    if len(args.results) < 2:
        raise ConfigError(f"compare needs at least two results, got {len(args.results)}")
    entries = [load_entry(path) for path in args.results]
    flags = check_like_for_like(entries, strict=args.strict)
    groups = group_repeats(entries)
    if args.json:
        print(
            json.dumps(
                {
                    "entries": [e.__dict__ for e in entries],
                    "flags": flags,
                    "groups": [{**g.__dict__, "mean": g.mean, "stdev": g.stdev} for g in groups],
                },
                sort_keys=True,
                indent=2,
            )
        )
    else:
        print(render_comparison(entries, groups, flags))
    return 0
