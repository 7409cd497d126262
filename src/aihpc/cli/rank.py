"""``aihpc rank DIR``: a ranked list of machines from the result files under DIR.

Prints the list as Markdown; ``--html FILE`` also writes it as a
self-contained HTML page.  Each run directory is verified (``aihpc verify``)
unless ``--no-verify``.  See :mod:`aihpc.ranking.rank`.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory", metavar="DIR", type=Path, help="a folder of run directories and result files"
    )
    parser.add_argument(
        "--html", metavar="FILE", type=Path, default=None, help="also write the list as HTML"
    )
    parser.add_argument(
        "--target",
        type=float,
        default=None,
        help="one target accuracy for Valid FLOPS (default: each run's min_accuracy)",
    )
    parser.add_argument(
        "--no-verify", action="store_true", help="do not verify the runs (verified: unchecked)"
    )
    parser.add_argument(
        "--kind",
        choices=("run", "infer"),
        default="run",
        help="rank training runs (default) or inference results (aihpc infer), each a list "
        "of its own",
    )


def run(args: argparse.Namespace) -> int:
    from aihpc.base.errors import ConfigError
    from aihpc.base.fileio import atomic_write
    from aihpc.ranking.rank import build_ranking, to_html, to_markdown

    if args.target is not None and not 0.0 < args.target <= 1.0:
        raise ConfigError(f"target must be an accuracy in (0, 1], got {args.target}")
    if args.html is not None and not args.html.parent.is_dir():
        raise ConfigError(f"cannot write {args.html}: directory {args.html.parent} does not exist")
    rows, _ = build_ranking(
        args.directory, verify=not args.no_verify, target=args.target, kind=args.kind
    )
    print(to_markdown(rows, args.directory, args.target))
    if args.html is not None:
        atomic_write(args.html, to_html(rows, args.directory, args.target))
        print(f"\nwritten: {args.html}")
    return 0
